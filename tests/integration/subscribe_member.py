"""A member of a logstrand group (``client.subscribe``), run as a process of
its own by ``test_subscribe.py`` so that a test can kill it.  It appends to
OUT, one line per event:

    assigned T L,L,...    when the logs it reads change (also to none)
    got T L LSN PAYLOAD   a record handed to it

T is the wall clock (the test compares members' times).
Usage: subscribe_member.py URL GROUP FIRST LAST OUT [INSTANCE_ID]
It subscribes to logs FIRST..LAST with autocommit and runs until SIGTERM
(it then leaves the group: its last records are committed first) or SIGKILL.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import TextIO

import trio

from logstrand import Record, open_client


async def main(
    url: str, group: str, first: int, last: int, out: TextIO, instance: str | None
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with open_client(url) as client, trio.open_nursery() as nursery:

            async def stop() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(stop)
            sub = client.subscribe(group, range(first, last + 1), instance_id=instance)
            seen: list[list[int] | None] = [None]

            def note() -> None:
                if sub.assigned != seen[0]:
                    seen[0] = sub.assigned
                    out.write(f"assigned {time.time()} {','.join(map(str, sub.assigned))}\n")
                    out.flush()

            async def watch() -> None:  # a change with no record to hand out yet
                while True:
                    note()
                    await trio.sleep(0.05)

            try:
                await sub.start()
                nursery.start_soon(watch)
                while True:
                    for log, item in await sub.next_pairs():
                        note()
                        if isinstance(item, Record):
                            assert item.payload is not None
                            payload = item.payload.decode()
                            out.write(f"got {time.time()} {log} {item.lsn} {payload}\n")
                    out.flush()
            finally:
                with trio.CancelScope(shield=True):
                    await sub.aclose()
                out.write("left\n")
                out.flush()


if __name__ == "__main__":
    url, group, first, last, path = sys.argv[1:6]
    instance = sys.argv[6] if len(sys.argv) > 6 else None
    with open(path, "a") as out:
        trio.run(main, url, group, int(first), int(last), out, instance)
