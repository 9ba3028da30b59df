"""Stage marks on the append path, for ``bench/single.py``'s per-stage trace.

Off unless ``LOGSTRAND_TRACE`` names a directory when the process starts.
Then every ``mark(stage)`` on the append path (client, sequencer, storage
nodes) notes the stage and ``time.monotonic_ns()``, which on Linux is one
clock for every process of the machine; at exit each process writes its
marks to ``<dir>/<pid>.trace``, one ``<ns> <stage>`` per line.  A benchmark
that appends one record at a time, each after the last returned, can then
cut the marks of all processes at its own call boundaries and say where
each append's time went.  Bounded: at most ``MARKS_MAX`` marks a process.

When off, ``mark`` is never called: call sites test ``ON`` first, so the
cost on the hot path is one global load.
"""

from __future__ import annotations

import atexit
import os
import time

ON = bool(os.environ.get("LOGSTRAND_TRACE"))
MARKS_MAX = 1_000_000
_marks: list[tuple[int, str]] = []


def mark(stage: str) -> None:
    if len(_marks) < MARKS_MAX:
        _marks.append((time.monotonic_ns(), stage))


def _dump() -> None:
    directory = os.environ.get("LOGSTRAND_TRACE")
    if not directory or not _marks:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{os.getpid()}.trace")
    with open(path, "w") as f:
        f.writelines(f"{ns} {stage}\n" for ns, stage in _marks)


if ON:
    atexit.register(_dump)
