"""A Kafka peer on a plain socket (or TLS), with no Kafka client library:
for tests that send what no well-behaved client would (forged SASL
messages, frames built to cost the node, sizes with nothing behind them)."""

from __future__ import annotations

import base64
import secrets
import socket
import ssl
import struct
import time
from typing import Any

from logstrand.kafka import _protocol as proto
from logstrand.security._sasl import scram_client_proof

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


class KafkaPeer:
    """One connection to a Kafka front: ``request`` sends and waits for the
    answer; ``send_raw`` sends any bytes."""

    def __init__(self, address: str, *, ca: str | None = None, timeout_s: float = 10.0) -> None:
        host, port = address.rsplit(":", 1)
        raw = socket.create_connection((host, int(port)), timeout=timeout_s)
        if ca is not None:
            ctx = ssl.create_default_context(cafile=ca)
            ctx.check_hostname = False
            self.sock: socket.socket = ctx.wrap_socket(raw)
        else:
            self.sock = raw
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.correlation += 1
        self.sock.sendall(proto.encode_request(api_key, version, self.correlation, body))

    def _exactly(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def receive(self, api_key: int, version: int, timeout_s: float = 10.0) -> dict[str, Any] | None:
        """The next answer's body; None when the node closed the connection."""
        self.sock.settimeout(timeout_s)
        head = self._exactly(4)
        if head is None:
            return None
        frame = self._exactly(struct.unpack(">i", head)[0])
        if frame is None:
            return None
        correlation, body = proto.decode_response(api_key, version, frame)
        assert correlation == self.correlation
        return body

    def request(
        self, api_key: int, version: int, body: dict[str, Any], timeout_s: float = 10.0
    ) -> dict[str, Any] | None:
        self.send(api_key, version, body)
        return self.receive(api_key, version, timeout_s)

    def api_versions(self, timeout_s: float = 10.0) -> dict[str, Any] | None:
        body = {"client_software_name": "t", "client_software_version": "1"}
        return self.request(API_VERSIONS, 3, body, timeout_s)

    def closed(self, timeout_s: float = 5.0) -> bool:
        """Whether the node closes the connection within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except OSError:
            return True

    # -- SASL ----------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int = 1) -> None:
        answer = self.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})
        assert answer is not None
        assert answer["error_code"] == 0, answer

    def authenticate(self, data: bytes) -> dict[str, Any] | None:
        return self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": data})

    def raw(self, data: bytes, timeout_s: float = 10.0) -> bytes | None:
        """A raw SASL message (after a v0 handshake) and its raw answer;
        None when the node closed the connection instead."""
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        self.sock.settimeout(timeout_s)
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def plain(self, user: str, token: str) -> dict[str, Any] | None:
        self.handshake("PLAIN")
        return self.authenticate(f"\x00{user}\x00{token}".encode())

    def raw_scram(self, user: str, token: str, mechanism: str = "SCRAM-SHA-256") -> bytes | None:
        """A whole SCRAM exchange the way of a v0 handshake, raw: the
        server's final message (None: the connection was closed)."""
        self.handshake(mechanism, version=0)
        nonce = base64.b64encode(secrets.token_bytes(12)).decode()
        bare = f"n={user},r={nonce}"
        server_first = self.raw(f"n,,{bare}".encode())
        if server_first is None:
            return None
        server_nonce = server_first.decode().split(",")[0][2:]
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={server_nonce}"
        proof = scram_client_proof(mechanism, token, bare, server_first.decode(), without_proof)
        return self.raw(f"{without_proof},p={proof}".encode())

    def scram(
        self, user: str, token: str, mechanism: str = "SCRAM-SHA-256", *, first: str | None = None
    ) -> dict[str, Any] | None:
        """A whole SCRAM exchange as ``user`` with ``token``; ``first``: a
        client-first message of the caller's own (its nonce after ``r=``
        up to the next comma).  The answer to the client's final message, or
        to the first when that was refused."""
        self.handshake(mechanism)
        nonce = base64.b64encode(secrets.token_bytes(12)).decode()
        first = first if first is not None else f"n,,n={user},r={nonce}"
        bare = first.split(",", 2)[2]  # after the GS2 header's two commas
        answer = self.authenticate(first.encode())
        if answer is None or answer["error_code"]:
            return answer
        server_first = answer["auth_bytes"].decode()
        server_nonce = server_first.split(",")[0][2:]
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={server_nonce}"
        proof = scram_client_proof(mechanism, token, bare, server_first, without_proof)
        return self.authenticate(f"{without_proof},p={proof}".encode())


def wait_answered(address: str, *, ca: str | None = None, within_s: float) -> float:
    """Seconds a fresh connection's ApiVersions took (it must be answered
    within ``within_s``)."""
    t0 = time.monotonic()
    with KafkaPeer(address, ca=ca, timeout_s=within_s) as peer:
        answer = peer.api_versions(timeout_s=within_s)
    took = time.monotonic() - t0
    assert answer is not None
    assert answer["error_code"] == 0, answer
    return took


def wait_for_partitions(bootstrap: str, topic: str, count: int, timeout_s: float = 15.0) -> None:
    """Wait until every broker in ``bootstrap`` lists ``count`` partitions of
    ``topic``.  A front learns of partitions another front added when its
    view is next read (within ``LOGSTRAND_VIEW_REFRESH_S``), as a Kafka
    broker learns of them from the controller after CreatePartitions has
    answered: a producer whose metadata came from a front that has not yet
    heard fails a record for the new partition as UNKNOWN_PARTITION, and
    ``flush`` still returns 0."""
    deadline = time.monotonic() + timeout_s
    for address in bootstrap.split(","):
        while True:
            with KafkaPeer(address) as peer:
                got = peer.request(3, 1, {"topics": [{"name": topic}]})
            parts = [t["partitions"] for t in (got or {}).get("topics", []) if t["name"] == topic]
            if parts and len(parts[0]) == count:
                break
            assert time.monotonic() < deadline, f"{address} lists {topic} as {parts}"
            time.sleep(0.1)
