"""Per-log sequencers: the pure core and its trio shell."""

from ._core import (
    Action,
    ReplyAppend,
    SendRelease,
    SendStore,
    SequencerCore,
    SequencerStats,
)

__all__ = [
    "Action",
    "ReplyAppend",
    "SendRelease",
    "SendStore",
    "SequencerCore",
    "SequencerStats",
]
