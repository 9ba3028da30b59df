"""Consumer groups: positions per (group, log) in an internal compacted log.

``logstrand.positions`` is the pure part (keys, values, the table, lag);
the client's part is ``client/_groups.py``; ``_monitor`` exports each
group's position and lag as metrics from the node that sequences the
positions log.  This package re-exports the pure names.
"""

from ..positions import (
    POSITIONS_LOG_ID,
    GroupLag,
    Position,
    PositionTable,
    check_group,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    records_between,
)

__all__ = [
    "POSITIONS_LOG_ID",
    "GroupLag",
    "Position",
    "PositionTable",
    "check_group",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "records_between",
]
