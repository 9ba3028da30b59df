"""SASL for the Kafka front: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677).  Pure.

The user name is a logstrand user and the password that user's token.
PLAIN sends the token (only ever over TLS) and is checked against the
token's hash, as the native protocol checks it.  SCRAM never sends it:
when a user is added, ``scram_credentials`` derives from the token, for
each mechanism, a random salt, the iteration count, StoredKey and
ServerKey, and the epoch store keeps those (never the token); a client
proves it knows the token by a proof only the StoredKey can check, and the
server proves it knew the keys by its signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable

MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum (and librdkafka's default check) is 4096.
ITERATIONS: Final = 4096
#: The longest SASL message taken.
MESSAGE_MAX: Final = 4096


class SaslError(Exception):
    """Authentication failed; the message says why (not which part was wrong)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


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


def check_plain(message: bytes, verify: Callable[[str, str], bool]) -> str:
    """The user a PLAIN message (``authzid NUL user NUL token``) proves; ``verify(user, token)``."""
    parts = message.split(b"\x00")
    if len(parts) != 3 or len(message) > MESSAGE_MAX:
        raise SaslError("malformed PLAIN message")
    authzid, user, token = (p.decode(errors="replace") for p in parts)
    if authzid and authzid != user:
        raise SaslError("PLAIN: acting for another user is not allowed")
    if not verify(user, token):
        raise SaslError("bad user name or password")
    return user


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


class ScramServer:
    """One SCRAM exchange: ``first`` takes the client's first message and
    returns the server's; ``final`` takes the client's proof and returns the
    server's signature, with ``user`` set.  ``lookup(user)`` gives the user's
    stored credentials for this mechanism (None: no such user, or no SCRAM
    keys for it)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], dict[str, Any] | None]) -> None:
        if mechanism not in _HASHES:
            raise SaslError(f"unknown mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.lookup = lookup
        self.user: str | None = None
        self._creds: dict[str, Any] | None = None
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def first(self, message: bytes) -> bytes:
        if len(message) > MESSAGE_MAX:
            raise SaslError("SCRAM message too long")
        text = message.decode(errors="replace")
        gs2, sep, bare = text.partition(",,")
        # "n" or "y" (no channel binding), with an optional authzid.
        if not sep or not text.startswith(("n,", "y,")):
            raise SaslError("malformed SCRAM first message")
        self._gs2 = gs2 + ",,"
        attrs = _attributes(bare)
        user = attrs.get("n", "").replace("=2C", ",").replace("=3D", "=")
        client_nonce = attrs.get("r", "")
        if not user or not client_nonce:
            raise SaslError("malformed SCRAM first message")
        authzid = gs2.partition(",a=")[2]
        if authzid and authzid != user:
            raise SaslError("SCRAM: acting for another user is not allowed")
        # A user without keys gets made-up ones, and fails at the proof like
        # a wrong password (nothing tells which users exist).
        creds = self.lookup(user) or {
            "salt": _b64(secrets.token_bytes(24)),
            "iterations": ITERATIONS,
            "stored_key": "",
            "server_key": "",
        }
        self.user, self._creds, self._first_bare = user, creds, bare
        self._nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        self._server_first = f"r={self._nonce},s={creds['salt']},i={creds['iterations']}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if self._creds is None or len(message) > MESSAGE_MAX:
            raise SaslError("SCRAM out of order")
        text = message.decode(errors="replace")
        without_proof, sep, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or attrs.get("r") != self._nonce:
            raise SaslError("bad user name or password")
        if attrs.get("c") != _b64(self._gs2.encode()):
            raise SaslError("SCRAM channel binding does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
            stored = base64.b64decode(self._creds["stored_key"])
            server_key = base64.b64decode(self._creds["server_key"])
        except ValueError:
            raise SaslError("bad user name or password") from None
        name = _HASHES[self.mechanism]
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(stored, auth, name).digest()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if not stored or len(proof) != len(signature):
            raise SaslError("bad user name or password")
        if not hmac.compare_digest(hashlib.new(name, client_key).digest(), stored):
            raise SaslError("bad user name or password")
        server_signature = hmac.new(server_key, auth, name).digest()
        return f"v={_b64(server_signature)}".encode()


def scram_client_proof(
    mechanism: str, token: str, client_first_bare: str, server_first: str, without_proof: str
) -> str:
    """The proof a client sends (for tests and tools that speak SCRAM)."""
    attrs = _attributes(server_first)
    salt = base64.b64decode(attrs["s"])
    name = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, token.encode(), salt, int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored = hashlib.new(name, client_key).digest()
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, auth, name).digest()
    return _b64(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
