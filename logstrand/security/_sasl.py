"""SASL for the Kafka front: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677).  Pure.

The user name is a logstrand user and the password that user's token.
PLAIN sends the token (only ever over TLS) and is checked against the
token's hash, as the native protocol checks it.  SCRAM never sends it:
when a user is added, ``scram_credentials`` derives from the token, for
each mechanism, a random salt, the iteration count, StoredKey and
ServerKey, and the epoch store keeps those (never the token); a client
proves it knows the token by a proof only the StoredKey can check, and the
server proves it knew the keys by its signature.

Rules
-----
1. One parse, one name.  A message is parsed once, by the grammar of RFC
   5802 (PLAIN: RFC 4616), and the name it yields is both the one whose
   keys are looked up and the one the connection is then authenticated
   as: a look-up by a rougher reading of the same bytes once let a
   client-first of ``n,,r=xn=eve,n=admin`` with eve's proof log in as
   admin.  Attributes come in the RFC's order, each once; anything else
   is refused.  (A nonce may hold ``n=``: the RFC allows it, librdkafka's
   nonces are drawn from 0x2D-0x7E, and after a strict parse it is only a
   nonce.)
2. Nothing tells which users exist.  A name with no SCRAM keys gets made-up
   keys whose salt is derived from the cluster's secret and the name
   (PostgreSQL's mock salt): the same salt every time, on every node, and
   the same iteration count as real users.  It then fails at the proof, as
   a wrong token does, with the same words.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING, Any, Final

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable

MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum (and librdkafka's default check) is 4096.
ITERATIONS: Final = 4096
#: The longest SASL message taken.
MESSAGE_MAX: Final = 4096
#: What every refusal of a login says (nothing about which part was wrong).
REFUSED: Final = "bad user name or password"


class SaslError(Exception):
    """Authentication failed; the message says why (not which part was wrong)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise SaslError("malformed SCRAM message: bad base64") from None


def _keys(mechanism: str, token: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    name = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, token.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return hashlib.new(name, client_key).digest(), server_key


def scram_credentials(token: str) -> dict[str, dict[str, Any]]:
    """What the epoch store keeps so that SCRAM can check ``token``."""
    out: dict[str, dict[str, Any]] = {}
    for mechanism in _HASHES:
        salt = secrets.token_bytes(24)
        stored, server = _keys(mechanism, token, salt, ITERATIONS)
        out[mechanism] = {
            "salt": _b64(salt),
            "iterations": ITERATIONS,
            "stored_key": _b64(stored),
            "server_key": _b64(server),
        }
    return out


def mock_credentials(secret: bytes, mechanism: str, user: str) -> dict[str, Any]:
    """Keys for a name that has none: no proof matches them, and their salt
    is the same for the name every time (rule 2)."""
    salt = hmac.new(secret, f"{mechanism}\x00{user}".encode(), "sha256").digest()[:24]
    return {"salt": _b64(salt), "iterations": ITERATIONS, "stored_key": "", "server_key": ""}


# -- PLAIN (RFC 4616) ---------------------------------------------------------------------


@attrs.frozen
class PlainMessage:
    user: str
    token: str


def parse_plain(message: bytes) -> PlainMessage:
    """``[authzid] NUL user NUL token``; an authzid other than the user is
    refused (a user acts only for itself)."""
    parts = message.split(b"\x00")
    if len(parts) != 3 or len(message) > MESSAGE_MAX or not parts[1]:
        raise SaslError("malformed PLAIN message")
    try:
        authzid, user, token = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise SaslError("malformed PLAIN message: not UTF-8") from None
    if authzid and authzid != user:
        raise SaslError("PLAIN: acting for another user is not allowed")
    return PlainMessage(user, token)


def check_plain(message: bytes, verify: Callable[[str, str], bool]) -> str:
    """The user a PLAIN message proves; ``verify(user, token)``."""
    plain = parse_plain(message)
    if not verify(plain.user, plain.token):
        raise SaslError(REFUSED)
    return plain.user


# -- SCRAM's messages (RFC 5802, section 7) ---------------------------------------------------


@attrs.frozen
class ClientFirst:
    """A parsed client-first-message: the GS2 header as sent, the user
    (its saslname decoded), the client's nonce, and the bare message (what
    the signatures cover)."""

    gs2_header: str
    user: str
    nonce: str
    bare: str


_ESCAPES: Final = {"=2C": ",", "=3D": "="}


def _saslname(text: str) -> str:
    """A saslname decoded: ``=2C`` is a comma, ``=3D`` an equals sign, and
    any other ``=`` (or an empty name) is refused."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            escaped = _ESCAPES.get(text[i : i + 3])
            if escaped is None:
                raise SaslError("malformed SCRAM message: bad user name encoding")
            out.append(escaped)
            i += 3
        else:
            out.append(text[i])
            i += 1
    if not out:
        raise SaslError("malformed SCRAM message: an empty user name")
    return "".join(out)


def _attribute(part: str, key: str) -> str:
    if not part.startswith(key + "="):
        raise SaslError(f"malformed SCRAM message: expected {key}= where {part[:2]!r} is")
    return part[2:]


def _printable(nonce: str) -> str:
    # RFC 5802: printable = %x21-2B / %x2D-7E (the comma cannot occur here:
    # it separated the attributes).
    if not nonce or any(not 0x21 <= ord(c) <= 0x7E for c in nonce):
        raise SaslError("malformed SCRAM message: the nonce is not printable ASCII")
    return nonce


def _extensions(parts: list[str]) -> None:
    """Extensions after the nonce: each ``name=value`` once.  ``tokenauth``
    (Kafka's delegation tokens, which logstrand has not) is refused; the
    others are ignored, as the RFC lets a server do."""
    seen: set[str] = set()
    for part in parts:
        name, sep, _value = part.partition("=")
        if not sep or not name.isascii() or not name.isalpha() or name in seen:
            raise SaslError("malformed SCRAM message: a bad or repeated extension")
        if name in ("n", "r", "m", "c", "p"):
            raise SaslError(f"malformed SCRAM message: {name}= repeated or out of order")
        if name == "tokenauth":
            raise SaslError("SCRAM: delegation tokens are not served")
        seen.add(name)


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_MAX:
        raise SaslError("SCRAM message too long")
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise SaslError("malformed SCRAM message: not UTF-8") from None
    if "\x00" in text:
        raise SaslError("malformed SCRAM message: a NUL")
    return text


def parse_client_first(message: bytes) -> ClientFirst:
    """gs2-header client-first-message-bare, strictly (rule 1)."""
    text = _text(message)
    flag, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not (sep1 and sep2):
        raise SaslError("malformed SCRAM first message")
    if flag.startswith("p="):
        raise SaslError("SCRAM: channel binding is not offered (use SCRAM without -PLUS)")
    if flag not in ("n", "y"):
        raise SaslError("malformed SCRAM first message: bad GS2 flag")
    parts = bare.split(",")
    if parts[0].startswith("m="):
        raise SaslError("SCRAM: a mandatory extension (m=) that is not served")
    if len(parts) < 2:
        raise SaslError("malformed SCRAM first message")
    user = _saslname(_attribute(parts[0], "n"))
    nonce = _printable(_attribute(parts[1], "r"))
    _extensions(parts[2:])
    if authz and _saslname(_attribute(authz, "a")) != user:
        raise SaslError("SCRAM: acting for another user is not allowed")
    return ClientFirst(f"{flag},{authz},", user, nonce, bare)


@attrs.frozen
class ClientFinal:
    channel_binding: bytes
    nonce: str
    without_proof: str
    proof: bytes


def parse_client_final(message: bytes) -> ClientFinal:
    """channel-binding "," nonce ["," extensions] "," proof, strictly."""
    text = _text(message)
    without_proof, sep, proof = text.rpartition(",")
    parts = without_proof.split(",")
    if not sep or len(parts) < 2:
        raise SaslError("malformed SCRAM final message")
    binding = _unb64(_attribute(parts[0], "c"))
    nonce = _printable(_attribute(parts[1], "r"))
    _extensions(parts[2:])
    return ClientFinal(binding, nonce, without_proof, _unb64(_attribute(proof, "p")))


class ScramServer:
    """One SCRAM exchange: ``first`` takes the parsed client-first message
    and the user's keys (``mock_credentials`` for a name without any) and
    returns the server's first message; ``final`` takes the client's proof
    and returns the server's signature.  ``user`` is the name parsed from
    the client's first message, and no other (rule 1)."""

    def __init__(self, mechanism: str) -> None:
        if mechanism not in _HASHES:
            raise SaslError(f"unknown mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.user: str | None = None
        self._first: ClientFirst | None = None
        self._creds: dict[str, Any] = {}
        self._server_first = ""
        self._nonce = ""

    def first(self, first: ClientFirst, creds: dict[str, Any]) -> bytes:
        if self._first is not None:
            raise SaslError("SCRAM out of order")
        self._first, self._creds, self.user = first, creds, first.user
        self._nonce = first.nonce + _b64(secrets.token_bytes(18))
        self._server_first = f"r={self._nonce},s={creds['salt']},i={creds['iterations']}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if self._first is None:
            raise SaslError("SCRAM out of order")
        final = parse_client_final(message)
        if final.nonce != self._nonce:
            raise SaslError(REFUSED)
        if final.channel_binding != self._first.gs2_header.encode():
            raise SaslError("SCRAM channel binding does not match")
        name = _HASHES[self.mechanism]
        auth = f"{self._first.bare},{self._server_first},{final.without_proof}".encode()
        try:
            stored = base64.b64decode(self._creds["stored_key"])
            server_key = base64.b64decode(self._creds["server_key"])
        except (ValueError, binascii.Error):
            raise SaslError(REFUSED) from None
        signature = hmac.new(stored, auth, name).digest()
        if not stored or len(final.proof) != len(signature):
            raise SaslError(REFUSED)
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(name, client_key).digest(), stored):
            raise SaslError(REFUSED)
        server_signature = hmac.new(server_key, auth, name).digest()
        return f"v={_b64(server_signature)}".encode()


def scram_client_proof(
    mechanism: str, token: str, client_first_bare: str, server_first: str, without_proof: str
) -> str:
    """The proof a client sends (for tests and tools that speak SCRAM)."""
    given: dict[str, str] = {}
    for part in server_first.split(","):
        key, _, value = part.partition("=")
        given[key] = value
    salt = base64.b64decode(given["s"])
    name = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, token.encode(), salt, int(given["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored = hashlib.new(name, client_key).digest()
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, auth, name).digest()
    return _b64(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
