"""The delaying proxy of the slow-link fault: what it forwards arrives
whole, in order, and as late as its control file says."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from logstrand.testing import free_port

if TYPE_CHECKING:
    from pathlib import Path


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _round_trip(port: int, payload: bytes) -> tuple[float, bytes]:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
    with conn:
        start = time.monotonic()
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += conn.recv(65536)
        return time.monotonic() - start, got


def test_the_proxy_delays_each_way_and_keeps_the_bytes(tmp_path: Path) -> None:
    server, target = _echo_server()
    control = tmp_path / "delay"
    control.write_text("0")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "logstrand.testing._delay_proxy", "--listen",
         f"127.0.0.1:{port}", "--to", f"127.0.0.1:{target}", "--control", str(control)],
    )  # fmt: skip
    try:
        payload = bytes(range(256)) * 4096  # 1 MiB, many chunks
        fast, got = _round_trip(port, payload)
        assert got == payload
        control.write_text("150")
        time.sleep(0.3)  # read every 0.1 s
        slow, got = _round_trip(port, b"ping")
        assert got == b"ping"
        assert slow >= 0.3  # 150 ms there, 150 ms back
        assert fast < slow
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.close()
