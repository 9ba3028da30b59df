"""Consumer positions, in one place (docs/groups.md).

* ``_model``: what a position is, how the internal positions log keys and
  holds them, the table they make, lag and resets; pure.
* ``_client``: the client's part (``Groups``): commit, read back, describe,
  reset, delete; written against the client's parts as protocols.
* ``_monitor``: the node extension that exports groups' lag as metrics.

This face holds the pure model; the client and the node import the piece
they use.
"""

from ..records import POSITIONS_LOG_ID, POSITIONS_LOGS
from ._model import (
    EPOCHS_WALKED_MAX,
    GROUP_RE,
    METADATA_MAX,
    GroupLag,
    Position,
    PositionTable,
    check_group,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    epochs_to_walk,
    group_of_key,
    group_of_txn_key,
    lag_of,
    last_lsn_of,
    membership_key,
    positions_log_of,
    records_between,
    reset_target,
    txn_positions_key,
    txn_state_key,
)

__all__ = [
    "EPOCHS_WALKED_MAX",
    "GROUP_RE",
    "METADATA_MAX",
    "POSITIONS_LOGS",
    "POSITIONS_LOG_ID",
    "GroupLag",
    "Position",
    "PositionTable",
    "check_group",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "epochs_to_walk",
    "group_of_key",
    "group_of_txn_key",
    "lag_of",
    "last_lsn_of",
    "membership_key",
    "positions_log_of",
    "records_between",
    "reset_target",
    "txn_positions_key",
    "txn_state_key",
]
