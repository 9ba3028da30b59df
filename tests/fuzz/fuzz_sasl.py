"""Coverage-guided fuzzing of the Kafka front's SASL exchange (atheris),
stateful: each input is a whole conversation on one connection.

    .venv/bin/python tests/fuzz/fuzz_sasl.py -max_total_time=60

The front (``kafka._auth.FrontAuth``, as a node runs it, over a store
twin) knows two users, ``ann`` and ``bob``.  An input is a series of
steps, split at ``SEP``: a step's first byte chooses a handshake (its
mechanism from the rest: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or bytes of
the fuzzer's own), an authenticate with the rest as its bytes, or a
*proof*: the client's final SCRAM message, made with **ann's** token over
whatever the exchange holds so far (the fuzzer cannot compute proofs, so
the harness plays an honest client for ann).  Whatever the steps:

- nothing but the front's answers comes out (no exception escapes);
- the connection is authenticated as ann only after a proof made with
  ann's token, and never as bob (whose token no input holds): a proof for
  ann that logs in as another user is the attack of issue 54;
- after a refused login the connection is closed (``closing``) and no
  later step changes who it is.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import atheris
import trio

with atheris.instrument_imports(include=["logstrand"]):
    from logstrand.kafka._auth import FrontAuth
    from logstrand.security import hash_token, scram_credentials
    from logstrand.security._sasl import scram_client_proof

logging.getLogger("logstrand").setLevel(logging.CRITICAL)  # every refusal is logged
SEP = b"\xf0\x9f"
TOKENS = {"ann": "lst_ann-token", "bob": "lst_bob-token"}
DOC: dict[str, Any] = {
    "users": {
        name: {"sha256": hash_token(t), "created_ms": 0, "scram": scram_credentials(t)}
        for name, t in TOKENS.items()
    },
    "grants": [],
    "group_grants": [],
    "sasl_secret": base64.b64encode(b"k" * 32).decode(),
}
MECHANISMS = (b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512")


class _Store:
    def security(self) -> dict[str, Any]:
        return DOC

    def sasl_secret(self) -> str:
        return str(DOC["sasl_secret"])


class _AStore:
    async def run(self, fn: Any) -> Any:
        return fn(_Store())


class _View:
    astore = _AStore()

    def range_name(self, log_id: int) -> str | None:
        return None


class _Client:
    view = _View()


class _Conn:
    def __init__(self) -> None:
        self.peer = "fuzz"
        self.user: str | None = None
        self.sasl: str | None = None
        self.scram: Any = None
        self.closing = False
        self.raw_sasl = False


class _Request:
    def __init__(self, conn: _Conn, body: dict[str, Any], version: int = 1) -> None:
        self.conn = conn
        self.body = body
        self.version = version  # SaslHandshake v1: its messages in SaslAuthenticate


async def _send(auth: FrontAuth, conn: _Conn, data: bytes) -> dict[str, Any]:
    """One SASL message: in SaslAuthenticate, or raw after a v0 handshake
    (the listener hands raw frames to ``FrontAuth.raw``)."""
    if not conn.raw_sasl:
        return await auth.authenticate(_Request(conn, {"auth_bytes": data}))
    answer = await auth.raw(conn, data)
    return {"error_code": int(answer is None), "auth_bytes": answer or b""}


async def _talk(steps: list[bytes]) -> None:
    auth = FrontAuth(_Client(), secure=True, failed_login_delay_s=0)  # type: ignore[arg-type]
    conn = _Conn()
    first_bare = server_first = ""
    for step in steps:
        if conn.closing or not step:
            return  # the listener closes the connection: nothing more is read
        kind, rest = step[0] % 3, step[1:]
        if kind == 0:
            mech = MECHANISMS[rest[0] % 3] if rest[:1] and rest[0] < 0xF0 else rest
            # One handshake in eight at v0: the SASL messages after it are raw.
            version = 0 if step[0] // 3 % 8 == 7 else 1
            body = {"mechanism": mech.decode(errors="replace")}
            answer = await auth.handshake(_Request(conn, body, version))
            assert conn.raw_sasl == (version == 0 and not answer["error_code"])
            continue
        if kind == 1:
            answer = await _send(auth, conn, rest)
            if rest.count(b",") >= 1 and b",," in rest[:8]:
                first_bare = rest.split(b",", 2)[-1].decode(errors="replace")
            if not answer["error_code"] and answer["auth_bytes"].startswith(b"r="):
                server_first = answer["auth_bytes"].decode()
            assert conn.user != "bob", "logged in as a user whose token no input holds"
            assert conn.user in (None, "ann")
            continue
        if not (server_first and conn.sasl and conn.sasl.startswith("SCRAM")):
            continue
        # An honest client for ann: the proof over this exchange.
        nonce = server_first.split(",")[0][2:]
        without = f"c=biws,r={nonce}"
        proof = scram_client_proof(conn.sasl, TOKENS["ann"], first_bare, server_first, without)
        answer = await _send(auth, conn, f"{without},p={proof}".encode())
        assert conn.user in (None, "ann"), conn.user
        if not answer["error_code"]:
            assert conn.user == "ann"


def one_input(data: bytes) -> None:
    trio.run(_talk, data.split(SEP)[:8])


def seeds() -> list[bytes]:
    """Conversations that log ann in, with each mechanism."""
    plain = b"\x00" + b"\x00" + SEP + b"\x01" + b"\x00ann\x00" + TOKENS["ann"].encode()
    scram = [
        b"\x00" + bytes([i]) + SEP + b"\x01n,,n=ann,r=abcdefgh" + SEP + b"\x02" for i in (1, 2)
    ]
    return [plain, *scram]


if __name__ == "__main__":
    from seeded import run

    run(one_input, seeds())
