"""Coverage-guided fuzzing of a node's dispatch, in process, on the
in-memory LogsDB (atheris; see ``harness.py``).

    .venv/bin/python tests/fuzz/fuzz_dispatch.py -max_total_time=60

The input is a stream of frames as a node would read them: every message
that decodes is dispatched; afterwards the acknowledged records of the
finished epochs must be intact.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

with atheris.instrument_imports():
    from logstrand.errors import ProtocolError
    from logstrand.wire import FrameDecoder
    from tests.fuzz.harness import Harness


def one_input(data: bytes) -> None:
    node = Harness()
    dec = FrameDecoder(frame_bytes_max=1 << 16, items_max=16_384)
    dec.feed(data)
    try:
        while (msg := dec.next_message()) is not None:
            node.dispatch(msg)
    except ProtocolError:
        pass  # the connection would be closed; what came before stands
    node.check_intact()


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
