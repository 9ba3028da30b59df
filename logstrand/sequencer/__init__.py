"""Per-log sequencers: the pure core and its trio shell."""

from ._core import (
    Action,
    ConfirmRefusal,
    ReplyAppend,
    SendRelease,
    SendStore,
    SequencerCore,
    SequencerStats,
)

__all__ = [
    "Action",
    "ConfirmRefusal",
    "ReplyAppend",
    "SendRelease",
    "SendStore",
    "SequencerCore",
    "SequencerStats",
]
