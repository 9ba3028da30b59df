"""TLS contexts and the identities in certificates.

A node certificate names its node with a URI subject alternative name
``logstrand:node:<id>``; a client certificate names its user with
``logstrand:user:<name>``.  Every node certificate and client certificate is
signed by the cluster's CA (``--tls-ca``), which both ends verify.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import attrs

from ..errors import InvalidArgumentError

NODE_URI = "logstrand:node:"
USER_URI = "logstrand:user:"


@attrs.frozen
class TlsFiles:
    """A node's TLS files: its certificate and key, and the cluster's CA."""

    cert: str
    key: str
    ca: str

    def __attrs_post_init__(self) -> None:
        for what, path in (("certificate", self.cert), ("key", self.key), ("CA", self.ca)):
            if not os.path.isfile(path):
                raise InvalidArgumentError(f"TLS {what} {path!r} is not a readable file")


def _base(purpose: ssl.Purpose, ca: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(purpose, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A node's listening side: its certificate; clients may present one."""
    try:
        ctx = _base(ssl.Purpose.CLIENT_AUTH, files.ca)
        ctx.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgumentError(f"cannot load TLS files: {exc}") from None
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def client_context(ca: str, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """The connecting side: verifies the node against the CA (and its host
    name or address), and presents ``cert`` when given (a node, or a client
    that authenticates with a certificate)."""
    try:
        ctx = _base(ssl.Purpose.SERVER_AUTH, ca)
        if cert:
            ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgumentError(f"cannot load TLS files: {exc}") from None
    return ctx


def peer_identity(peercert: dict[str, Any] | None) -> tuple[str, str] | None:
    """``("node", "3")`` or ``("user", "alice")`` from a verified peer
    certificate (``SSLObject.getpeercert()``), or None."""
    if not peercert:
        return None
    for kind, value in peercert.get("subjectAltName", ()):
        if kind != "URI":
            continue
        if value.startswith(NODE_URI) and value[len(NODE_URI) :].isdigit():
            return "node", value[len(NODE_URI) :]
        if value.startswith(USER_URI):
            return "user", value[len(USER_URI) :]
    return None


@attrs.frozen
class Credentials:
    """How this process proves who it is to the nodes, and how it checks them.

    ``ssl``: None for a cluster without TLS.  ``token``: a user's token, sent
    in ``Hello`` (only ever over TLS).
    """

    ssl: ssl.SSLContext | None = None
    token: str | None = None

    @classmethod
    def build(
        cls,
        *,
        token: str | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
    ) -> Credentials | None:
        """From what a user passes (or None when nothing is set)."""
        if not (token or ca or cert or key):
            return None
        if (cert is None) != (key is None):
            raise InvalidArgumentError("a client certificate needs its key, and the other way")
        if ca is None:
            raise InvalidArgumentError(
                "the cluster's CA certificate is needed to connect over TLS (ca=..., LOGSTRAND_CA)"
            )
        return cls(client_context(ca, cert, key), token)


def credentials_from_env(
    *,
    token: str | None = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
) -> Credentials | None:
    """``Credentials.build`` with every unset argument taken from
    ``LOGSTRAND_TOKEN``, ``LOGSTRAND_CA``, ``LOGSTRAND_CERT``, ``LOGSTRAND_KEY``."""
    env = os.environ
    token = token or env.get("LOGSTRAND_TOKEN") or None
    if token is None and env.get("LOGSTRAND_TOKEN_FILE"):
        token = read_token(env["LOGSTRAND_TOKEN_FILE"])
    return Credentials.build(
        token=token,
        ca=ca or env.get("LOGSTRAND_CA") or None,
        cert=cert or env.get("LOGSTRAND_CERT") or None,
        key=key or env.get("LOGSTRAND_KEY") or None,
    )


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read the token file {path!r}: {exc}") from None
