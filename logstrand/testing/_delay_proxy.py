"""A TCP proxy that delays what it forwards, for slow links in tests (this
machine's kernel has no ``netem``).

    python -m logstrand.testing._delay_proxy --listen 0.0.0.0:15000 \\
        --to 127.0.0.1:4440 --control /tmp/delay

Every chunk read on either side is sent on after the delay in milliseconds
written in the control file (read every 0.1 s; a missing or empty file is
0).  Chunks keep their order; a bounded queue per direction holds them
meanwhile, so a slow link slows its sender down rather than filling memory.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import trio

#: Chunks waiting out their delay, per direction of a connection.
QUEUE = 256
CHUNK = 65536


class _Delay:
    def __init__(self, control: Path) -> None:
        self.control = control
        self.seconds = 0.0

    async def watch(self) -> None:
        while True:
            try:
                text = self.control.read_text().strip()
                self.seconds = max(0.0, float(text or 0) / 1000)
            except (OSError, ValueError):
                self.seconds = 0.0
            await trio.sleep(0.1)


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, delay: _Delay) -> None:
    send, receive = trio.open_memory_channel[tuple[float, bytes]](QUEUE)

    async def read() -> None:
        async with send:
            while chunk := await src.receive_some(CHUNK):
                await send.send((trio.current_time() + delay.seconds, chunk))

    async def write() -> None:
        async with receive:
            async for due, chunk in receive:
                await trio.sleep_until(due)
                await dst.send_all(chunk)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await dst.send_eof()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(write)


async def _serve(conn: trio.SocketStream, to: tuple[str, int], delay: _Delay) -> None:
    try:
        upstream = await trio.open_tcp_stream(*to)
    except OSError:
        await conn.aclose()
        return
    async with conn, upstream:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, conn, upstream, delay)
                nursery.start_soon(_pump, upstream, conn, delay)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(listen: tuple[str, int], to: tuple[str, int], control: Path) -> None:
    delay = _Delay(control)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(delay.watch)
        listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])

        async def handle(conn: trio.SocketStream) -> None:
            await _serve(conn, to, delay)

        await trio.serve_listeners(handle, listeners)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--listen", required=True, type=_host_port)
    ap.add_argument("--to", required=True, type=_host_port)
    ap.add_argument("--control", required=True, type=Path)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(main, args.listen, args.to, args.control)
    sys.exit(0)
