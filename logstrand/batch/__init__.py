"""The one record batch format: the packed batch.

A batch is one run of records of a log as one value: the unit a client
appends, a STORE and a digest carry, LogsDB keeps, and a read stream sends
(``_packed`` describes the layout).  This package owns it whole: building
(``make_batch``, ``PackedBatch.for_append``), checking (``PackedBatch.parse``,
``body_ok``), reading (``columns``, ``keys_payloads``, ``extras``: a
record's headers and create time, ``pack_extra``), new headers for
sequencers and rebuilding (``restamp``, ``reheader``) and the compression of
bodies (``Codec``).  Pure: no I/O, no numpy.  The readers' columnar and Arrow
views over batches are in the client (``client._views``).
"""

from __future__ import annotations

from ._build import Columns
from ._compression import Codec, pack_body, seal_body
from ._extras import Header, extras_of, pack_extra, unpack_extra
from ._layout import (
    COUNT_MAX,
    EXTRAS,
    FLAGS,
    FORMAT,
    HEAD_BYTES,
    LSNS,
    PRODUCER,
    RAW_BYTES_MAX,
    TIMESTAMPS,
    crc32c,
)
from ._packed import PackedBatch, last_lsn_of

__all__ = [
    "COUNT_MAX",
    "EXTRAS",
    "FLAGS",
    "FORMAT",
    "HEAD_BYTES",
    "LSNS",
    "PRODUCER",
    "RAW_BYTES_MAX",
    "TIMESTAMPS",
    "Codec",
    "Columns",
    "Header",
    "PackedBatch",
    "crc32c",
    "extras_of",
    "last_lsn_of",
    "make_batch",
    "pack_body",
    "pack_extra",
    "seal_body",
    "unpack_extra",
]


#: A batch of records from plain columns (``PackedBatch.of_columns``).
make_batch = PackedBatch.of_columns
