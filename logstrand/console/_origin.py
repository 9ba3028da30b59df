"""Who may talk to the console through a browser: the rules that keep other
web sites out of it.  Pure.

A browser sends requests on behalf of any page it shows, and a page of
another site can make it send a form POST (``text/plain``, no preflight)
to the console's address, or, by DNS rebinding, read the console's API
through a name of its own that it points at 127.0.0.1.  In insecure mode
there is no token to stop either.  So:

1. **Host.**  A request is served only under one of the console's names:
   an IP address (a page cannot rebind those: its origin would be the
   address itself), ``localhost``, the address the console listens on,
   the node's advertised host, and what ``--http-allowed-hosts`` adds.
   Anything else is refused: a rebound name reads nothing.
2. **Changes come as JSON from the console's own origin.**  A request that
   changes something (POST, PUT, PATCH, DELETE) must say
   ``Content-Type: application/json``, which no form can send and no
   cross-site ``fetch`` can without a preflight the console never
   answers; and its ``Origin``, when the browser sends one, must be the
   console's own.  Tools without a browser (curl, the CLI) send no Origin
   and go on.
3. **No framing, no sniffing.**  Every answer says ``X-Frame-Options: DENY``
   and ``frame-ancestors 'none'`` (no clickjacking through a frame),
   ``nosniff`` (a JSON answer is never run as a script), and
   ``no-referrer`` (a live tail's ``?token=`` never leaks in a Referer).
"""

from __future__ import annotations

import ipaddress
from typing import Final

MUTATING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: HTTP's optional white space around a header's value: space and tab only
#: (``str.strip()`` would also take control characters for white space).
_OWS: Final = " \t"
#: The headers of every answer (rule 3).
SAFE_HEADERS: Final = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


def host_name(header: str) -> str:
    """The name in a Host header, without its port, lower case (an IPv6
    address without its brackets)."""
    text = header.strip(_OWS).lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_refusal(header: str | None, names: frozenset[str]) -> str | None:
    """Why a request with this Host header is refused (rule 1), or None."""
    if header is None:
        return "a request without a Host header"
    name = host_name(header).rstrip(".")
    if _is_address(name) or name == "localhost" or name in names:
        return None
    return (
        f"host {name!r} is not a name of this console: add it with --http-allowed-hosts "
        "(the console refuses other names, so that a web page cannot reach it through "
        "a name of its own)"
    )


def change_refusal(method: str, headers: dict[str, str], scheme: str) -> tuple[int, str] | None:
    """(status, why) a request that changes something is refused (rule 2), or None."""
    if method not in MUTATING:
        return None
    kind = headers.get("content-type", "").partition(";")[0].strip(_OWS).lower()
    if kind != "application/json":
        return 415, "a request that changes something must be Content-Type: application/json"
    origin = headers.get("origin")
    own = f"{scheme}://{headers.get('host', '').strip(_OWS).lower()}"
    if origin is not None and origin.strip(_OWS).lower() != own:
        return 403, f"origin {origin!r} is not this console's ({own}): refused"
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return 403, "a request from another site (Sec-Fetch-Site): refused"
    return None
