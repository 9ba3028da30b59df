"""logstrand: a distributed log store in the style of LogDevice.

Layout: ``types`` and ``errors`` are the vocabulary; ``wire`` is the protocol
(pure); ``logsdb`` is a node's local store; ``testing`` holds in-memory twins.
"""

from .errors import (
    ClosedError,
    CorruptionError,
    InvalidArgumentError,
    LogstrandError,
    NotFoundError,
    PreemptedError,
    ProtocolError,
    StaleError,
    Status,
    TransientError,
)
from .types import (
    LSN_INVALID,
    LSN_MAX,
    LSN_OLDEST,
    TAIL,
    Gap,
    GapType,
    LogID,
    Record,
    compose_lsn,
    format_lsn,
    lsn_epoch,
    lsn_esn,
    parse_lsn,
)

__version__ = "0.1.0"

__all__ = [
    "LSN_INVALID",
    "LSN_MAX",
    "LSN_OLDEST",
    "TAIL",
    "ClosedError",
    "CorruptionError",
    "Gap",
    "GapType",
    "InvalidArgumentError",
    "LogID",
    "LogstrandError",
    "NotFoundError",
    "PreemptedError",
    "ProtocolError",
    "Record",
    "StaleError",
    "Status",
    "TransientError",
    "__version__",
    "compose_lsn",
    "format_lsn",
    "lsn_epoch",
    "lsn_esn",
    "parse_lsn",
]
