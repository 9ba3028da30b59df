"""Coverage-guided fuzzing of the console's request handling (atheris):
the ASGI app (``console.make_app``) with its routes, its gate (secure
mode) and its rules on hosts and origins, over a client twin whose every
call about the cluster fails as a log that does not exist would.

    .venv/bin/python tests/fuzz/fuzz_console.py -max_total_time=60

An input is a request: its first byte chooses the method and whether the
console is secure; then, split at newlines, the path, the query string,
headers (``name: value``) and the body.  Whatever it holds, the console
answers with a status of 200, 4xx or 503 and a JSON body (an event stream
for a live tail): never a 500, which is a handler that met input it did
not expect; and a request that changes something is never served unless
it is JSON from the console's own origin (the twin records every change
it is asked to make).
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar

import atheris
import trio

with atheris.instrument_imports(include=["logstrand"]):
    from logstrand.console import make_app
    from logstrand.errors import NotFoundError
    from logstrand.security import hash_token

logging.getLogger("logstrand").setLevel(logging.CRITICAL)
METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE", "HEAD")
TOKEN = "lst_console-fuzz"
DOC: dict[str, Any] = {
    "users": {"ann": {"sha256": hash_token(TOKEN), "created_ms": 0}},
    "grants": [{"user": "ann", "first": 1, "last": 100, "ops": ["read"]}],
    "group_grants": [{"user": "ann", "group": "g*", "ops": ["describe"]}],
    "sasl_secret": None,
}
CHANGES: list[str] = []


def _missing(*_args: Any, **_kwargs: Any) -> Any:
    raise NotFoundError("no such thing in this twin")


class _Store:
    def security(self) -> dict[str, Any]:
        return DOC

    def __getattr__(self, name: str) -> Any:
        if name in ("request_rebuild", "undrain", "create_logs", "update_logs"):
            CHANGES.append(name)
        return _missing


class _AStore:
    async def run(self, fn: Any) -> Any:
        return fn(_Store())


class _View:
    ranges: ClassVar[list[Any]] = []
    astore = _AStore()

    async def refresh(self) -> None:
        return None

    def range_name(self, log_id: int) -> str | None:
        return None


class _Client:
    view = _View()

    def __getattr__(self, name: str) -> Any:
        if name in ("trim", "reset_group", "abort_transaction"):
            CHANGES.append(name)
        if name == "transactions":
            # One open transaction, so that an abort gets as far as asking.

            async def states() -> dict[str, Any]:
                doc = {"pid": 1, "epoch": 0, "state": "Ongoing", "timeout_ms": 1000, "logs": [1]}
                return {"t": doc}

            return states

        async def call(*_args: Any, **_kwargs: Any) -> Any:
            raise NotFoundError("no such thing in this twin")

        return _missing if name in ("sequencer_node", "read") else call


APPS = {
    secure: make_app(_Client(), secure=secure, names=frozenset({"c.example"}))
    for secure in (False, True)
}  # type: ignore[arg-type]


async def _serve(secure: bool, scope: dict[str, Any], body: bytes) -> tuple[int, bytes, bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await APPS[secure](scope, receive, send)
    start = sent[0]
    kind = dict(start["headers"]).get(b"content-type", b"")
    return start["status"], kind, b"".join(m.get("body", b"") for m in sent[1:])


def one_input(data: bytes) -> None:
    if not data:
        return
    method, secure = METHODS[data[0] % len(METHODS)], bool(data[0] & 0x80)
    parts = data[1:].split(b"\n")
    path = "/" + parts[0].decode(errors="replace").lstrip("/")
    query = parts[1] if len(parts) > 1 else b""
    headers = [
        (k.strip(b" \t").lower(), v.strip(b" \t"))
        for k, _, v in (h.partition(b":") for h in parts[2:-1])
        if k.strip(b" \t")
    ]
    body = parts[-1] if len(parts) > 2 else b""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query,
        "headers": headers,
        "scheme": "http",
    }
    CHANGES.clear()
    status, kind, answer = trio.run(_serve, secure, scope, body)
    assert status != 500, (status, answer[:300])
    assert status in (200, 400, 401, 403, 404, 405, 413, 415, 503), status
    if kind.startswith(b"application/json"):
        json.loads(answer)
    if CHANGES:  # the twin was asked to change something: it had to be allowed
        given = {k: v for k, v in headers}
        kind = given.get(b"content-type", b"").split(b";")[0].strip(b" \t").lower()
        assert kind == b"application/json"  # media types are case-insensitive
        own = b"http://" + given.get(b"host", b"").lower()
        assert b"origin" not in given or given[b"origin"].lower() == own


def seeds() -> list[bytes]:
    json_head = b"host: 127.0.0.1:8080\ncontent-type: application/json\n"
    auth = f"authorization: Bearer {TOKEN}\n".encode()
    return [
        b"\x00api/status\n\nhost: localhost\n",
        b"\x00api/logs\nq=1..5&limit=3\nhost: localhost\n",
        b"\x00api/logs/7/records\nstart=time:5\nhost: localhost\n",
        b"\x01api/logs/7/trim\n\n" + json_head + b'{"older_than":"7d","dry_run":true}',
        b"\x01api/groups/g/reset\n\n" + json_head + b'{"log":1,"how":"lsn","value":5}',
        b"\x01api/nodes/1/drain\n\n" + json_head + b'{"dry_run":false}',
        b"\x01api/logs\n\n" + json_head + b'{"first":1,"last":2}',
        b"\x02api/logs/1\n\n" + json_head + b'{"attributes":{}}',
        b"\x80api/groups\n\nhost: localhost\n" + auth,
        b"\x00api/transactions\nopen=true&limit=5\nhost: localhost\n",
        b"\x01api/transactions/t/abort\n\n" + json_head + b'{"dry_run":false}',
        b"\x80api/logs/3/tail\ntoken=" + TOKEN.encode() + b"\nhost: localhost\n",
    ]


if __name__ == "__main__":
    from seeded import run

    run(one_input, seeds())
