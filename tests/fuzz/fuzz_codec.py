"""Coverage-guided fuzzing of the wire codec (atheris).

    .venv/bin/python tests/fuzz/fuzz_codec.py -max_total_time=60

Any bytes fed to a ``FrameDecoder`` give messages or a ``ProtocolError``,
never another exception; a decoded message encodes and decodes to itself.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from logstrand.errors import ProtocolError
    from logstrand.wire import FrameDecoder, decode_body, encode_body


def one_input(data: bytes) -> None:
    for items_max in (64, 16_384):
        dec = FrameDecoder(frame_bytes_max=1 << 16, items_max=items_max)
        dec.feed(data)
        try:
            while (msg := dec.next_message()) is not None:
                assert decode_body(encode_body(msg)) == msg
        except ProtocolError:
            pass
    with contextlib.suppress(ProtocolError):
        decode_body(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
