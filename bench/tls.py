"""Bulk transfer over loopback: plain TCP, trio's SSLStream, logstrand's TlsStream.

    python bench/tls.py [--mb 200] [--repeat 3]

One process, two trio tasks (both ends share one core): the client sends
``--mb`` MB in 1 MB messages, the server reads them; MB/s of the whole
transfer, medians of ``--repeat`` runs, in alternating order.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time

import trio

from logstrand.net._tls import TlsStream
from logstrand.security import TlsFiles, client_context, server_context
from logstrand.security._certs import LocalCA

MESSAGE = b"x" * (1024 * 1024)


async def _wrap(kind: str, tcp: trio.SocketStream, ctx: object, server: bool) -> trio.abc.Stream:
    import ssl

    assert isinstance(ctx, ssl.SSLContext)
    if kind == "plain":
        return tcp
    host = None if server else "127.0.0.1"
    if kind == "trio SSLStream":
        s = trio.SSLStream(tcp, ctx, server_side=server, server_hostname=host)
        await s.do_handshake()
        return s
    t = TlsStream(tcp, ctx, server_side=server, server_hostname=host)
    await t.do_handshake()
    return t


async def transfer(kind: str, total: int, sctx: object, cctx: object) -> float:
    done = trio.Event()

    async def handler(tcp: trio.SocketStream) -> None:
        s = await _wrap(kind, tcp, sctx, True)
        got = 0
        while got < total:
            data = await s.receive_some(256 * 1024)
            if not data:
                break
            got += len(data)
        done.set()

    async with trio.open_nursery() as n:
        listeners = await n.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        c = await _wrap(kind, await trio.open_tcp_stream("127.0.0.1", port), cctx, False)
        t0 = time.perf_counter()
        for _ in range(total // len(MESSAGE)):
            await c.send_all(MESSAGE)
        await done.wait()
        took = time.perf_counter() - t0
        n.cancel_scope.cancel()
    return total / took / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ca = LocalCA(d)
        cert, key = ca.node(1, ["127.0.0.1"])
        sctx = server_context(TlsFiles(cert, key, ca.ca_path))
        cctx = client_context(ca.ca_path, cert, key)
        kinds = ("plain", "trio SSLStream", "TlsStream")
        runs: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.repeat):
            for kind in kinds:
                runs[kind].append(trio.run(transfer, kind, args.mb * 1024 * 1024, sctx, cctx))
    print(f"| stream | MB/s (median of {args.repeat}) | runs |")
    print("|---|---:|---|")
    for kind, values in runs.items():
        spread = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {kind} | {statistics.median(values):,.0f} | {spread} |")


if __name__ == "__main__":
    main()
