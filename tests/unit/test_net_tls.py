"""``net.TlsStream``: frames of any size both ways, handshake refusals, EOF."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from logstrand.net._tls import TlsStream
from logstrand.security import TlsFiles, client_context, peer_identity, server_context
from logstrand.security._certs import LocalCA

if TYPE_CHECKING:
    from pathlib import Path


async def _pair(tmp_path: Path, client_cert: bool = True) -> tuple[TlsStream, TlsStream]:
    ca = LocalCA(str(tmp_path / "tls"))
    cert, key = ca.node(3, ["127.0.0.1"])
    sctx = server_context(TlsFiles(cert, key, ca.ca_path))
    cctx = client_context(ca.ca_path, cert if client_cert else None, key if client_cert else None)
    a, b = trio.testing.memory_stream_pair()
    server = TlsStream(a, sctx, server_side=True)
    client = TlsStream(b, cctx, server_side=False, server_hostname="127.0.0.1")
    async with trio.open_nursery() as n:
        n.start_soon(server.do_handshake)
        n.start_soon(client.do_handshake)
    return server, client


async def _receive_exactly(stream: TlsStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.receive_some()
        assert data, "early EOF"
        got += data
    return bytes(got)


async def test_large_and_small_messages_both_ways(tmp_path: Path) -> None:
    server, client = await _pair(tmp_path)
    assert peer_identity(server.getpeercert()) == ("node", "3")
    big = bytes(range(256)) * 20_000  # 5 MB: many TLS records
    async with trio.open_nursery() as n:
        n.start_soon(client.send_all, big)
        assert await _receive_exactly(server, len(big)) == big
    for size in (1, 100, 16_385):
        await server.send_all(b"y" * size)
        assert await _receive_exactly(client, size) == b"y" * size
    await client.aclose()
    assert await server.receive_some() == b""


async def test_a_client_with_another_ca_is_refused(tmp_path: Path) -> None:
    ca = LocalCA(str(tmp_path / "a"))
    cert, key = ca.node(1, ["127.0.0.1"])
    other = LocalCA(str(tmp_path / "b"))
    sctx = server_context(TlsFiles(cert, key, ca.ca_path))
    a, b = trio.testing.memory_stream_pair()
    server = TlsStream(a, sctx, server_side=True)
    client = TlsStream(
        b,
        client_context(other.ca_path),
        server_side=False,
        server_hostname="127.0.0.1",
    )
    outcome: dict[str, str] = {}

    async def side(name: str, stream: TlsStream) -> None:
        with trio.move_on_after(2):
            try:
                await stream.do_handshake()
                outcome[name] = "ok"
            except trio.BrokenResourceError as exc:
                outcome[name] = str(exc)
                await stream.aclose()

    async with trio.open_nursery() as n:
        n.start_soon(side, "server", server)
        n.start_soon(side, "client", client)
    assert "CERTIFICATE_VERIFY_FAILED" in outcome["client"]
    assert outcome.get("server") != "ok"
