"""Wire messages of group membership for logstrand's own readers (protocol 7).

A member of a group (``client.subscribe``) sends ``GroupHeartbeat`` to the
node that runs the sequencer of the group's positions log, as a Kafka
consumer of ``group.protocol=consumer`` sends ConsumerGroupHeartbeat to its
coordinator, and gets the logs it is to read.  The same rules hold
(``groups._consumer``); logs stand in for partitions: a member's
subscription is a sorted list of logs, and an assignment is a list of
indexes into it.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from ..records import positions_log_of
from . import _fields as f
from ._registry import _status, message

#: The protocol version from which a node answers these messages.
GROUPS_PROTOCOL = 7
#: Logs one member may subscribe to (a node's read streams per connection).
SUBSCRIBED_LOGS_MAX = 16_384
#: A group name's length at most (``positions.GROUP_RE``).
GROUP_NAME_MAX = 128


@message(60, "read")
@attrs.frozen(slots=True)
class GroupHeartbeat:
    """Member → coordinator: I am alive, this is what I own.

    ``epoch`` 0 joins (``member_id`` empty the first time: the coordinator
    gives one), -1 leaves, -2 leaves for a while (a static member with an
    ``instance_id``).  ``logs`` is the subscription, sent when joining or
    when it changes (``subscribe``); ``owned`` the indexes into it the
    member reads now, or None when unchanged since its last heartbeat.

    A member needs ``read`` on the group's positions log and on every log
    it subscribes to (``log_ids``).
    """

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    group: str = attrs.field(validator=f.text(GROUP_NAME_MAX))
    member_id: str = attrs.field(validator=f.text(255))
    epoch: int = attrs.field(validator=f.i64)
    instance_id: str | None = attrs.field(validator=f.optional(f.text(GROUP_NAME_MAX)))
    subscribe: bool = attrs.field(validator=f.boolean)
    logs: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u64, SUBSCRIBED_LOGS_MAX)
    )
    owned: tuple[int, ...] | None = attrs.field(
        converter=f.to_tuple, validator=f.optional(f.tuple_of(f.u32, SUBSCRIBED_LOGS_MAX))
    )

    @property
    def log_id(self) -> int:
        return positions_log_of(self.group)

    @property
    def log_ids(self) -> tuple[int, ...]:
        """The logs whose ``read`` grant the heartbeat needs."""
        return (self.log_id, *self.logs)


@message(61)
@attrs.frozen(slots=True)
class GroupHeartbeatReply:
    """The coordinator's answer.  ``status`` OK: the heartbeat was taken,
    with ``error`` the group protocol's verdict (a Kafka error code: 0, or
    UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH, after which the member drops
    what it owns and joins again, or another refusal, ``message`` saying
    why); REDIRECTED: this node does not coordinate the group (ask the
    sequencer node of its positions log again).  ``assigned``: the indexes
    of the member's logs it is to read now, or None when unchanged."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    error: int = attrs.field(default=0, validator=f.u32)
    message: str = attrs.field(default="", validator=f.text(1000))
    member_id: str = attrs.field(default="", validator=f.text(255))
    epoch: int = attrs.field(default=0, validator=f.i64)
    heartbeat_ms: int = attrs.field(default=0, validator=f.u32)
    assigned: tuple[int, ...] | None = attrs.field(
        default=None,
        converter=f.to_tuple,
        validator=f.optional(f.tuple_of(f.u32, SUBSCRIBED_LOGS_MAX)),
    )
