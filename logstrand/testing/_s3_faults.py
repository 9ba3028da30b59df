"""An S3 API that misbehaves on purpose, for the tiered storage's fault
tests: an HTTP proxy on 127.0.0.1 in front of a real one (moto's server)
that can make every request slow, answer a share of them with S3's own
503 SlowDown, or hold PUTs (a node mid-upload, to be killed there).

Each request is read whole, faulted or forwarded as it is (its headers
and signature unchanged), and its answer sent back whole; connections
are kept alive as a client's are.  Settings change at any moment from the
test's thread.
"""

from __future__ import annotations

import http.client
import http.server
import random
import select
import socket
import threading
import time
from typing import Any

from ._ports import free_port

#: What S3 answers a client that should slow down (a 503 it retries).
SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
#: Longest a held PUT waits for ``release`` (bounded: a test that forgot
#: to release still ends).
HOLD_MAX_S = 120.0


#: ``_answer``'s word for a PUT that was held: forward it if its client is still there.
HELD = -1


def _gone(sock: socket.socket) -> bool:
    """Has the peer closed ``sock`` (or reset it)?"""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class S3Faults:
    """The proxy (``endpoint``) in front of ``upstream``, until ``stop``."""

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        #: Seconds every request waits before it is forwarded.
        self.delay_s = 0.0
        #: The share of requests answered 503 SlowDown instead.
        self.error_rate = 0.0
        #: While set, PUTs wait (their body read) until ``release``.
        self.hold_puts = False
        #: PUTs waiting now (the test waits for one to kill its node).
        self.held = 0
        #: Requests answered with an error, and forwarded.
        self.faulted = 0
        self.forwarded = 0
        self._released = threading.Event()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, answer = proxy._answer(
                    self.command, self.path, dict(self.headers), body
                )
                if status == HELD and _gone(self.connection):
                    # The client died while its PUT was held: S3 discards a
                    # request cut short, so nothing is forwarded.
                    self.close_connection = True
                    return
                if status == HELD:
                    status, headers, answer = proxy._forward(
                        self.command, self.path, dict(self.headers), body
                    )
                self.send_response(status)
                size = str(len(answer))
                for k, v in headers:
                    if k.lower() == "content-length" and self.command == "HEAD":
                        size = v  # a HEAD's answer says the object's size
                    elif k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", size)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        return Handler

    def _answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if self.delay_s:
            time.sleep(self.delay_s)
        if method == "PUT" and self.hold_puts:
            with self._lock:
                self.held += 1
            try:
                self._released.wait(HOLD_MAX_S)
            finally:
                with self._lock:
                    self.held -= 1
            return HELD, [], b""
        with self._lock:
            fault = self._rng.random() < self.error_rate
            if fault:
                self.faulted += 1
            else:
                self.forwarded += 1
        if fault:
            return 503, [("Content-Type", "application/xml")], SLOW_DOWN
        return self._forward(method, path, headers, body)

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.getheaders(), reply.read()
        finally:
            conn.close()

    def release(self) -> None:
        """Let held PUTs go on (and take no more)."""
        self.hold_puts = False
        self._released.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> S3Faults:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
