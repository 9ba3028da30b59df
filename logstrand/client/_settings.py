"""Client settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..errors import InvalidArgumentError, Status
from ..idempotence import WINDOW
from ..records import KEY_BYTES_MAX, check_log_id

if TYPE_CHECKING:
    from collections.abc import Sequence


@attrs.frozen
class ClientSettings:
    """How the client batches and retries.

    Concurrent appends to one log coalesce: while ``inflight_batches_per_log``
    APPENDs are out, new records wait and leave together in the next one (up to
    ``batch_bytes_max`` / ``batch_records_max``).  ``linger_ms`` makes a lone
    append wait that long for company first (Kafka's ``linger.ms``).
    """

    append_timeout_s: float = 10.0
    #: One attempt waits this long for its node before trying again (maybe elsewhere).
    append_attempt_timeout_s: float = 3.0
    #: Batches (of all logs) out to one node at once, alone or gathered in
    #: ``AppendMany`` requests; more wait in the client (the node reads at
    #: most 128 unanswered requests of a connection, an ``AppendMany``
    #: counting one per batch).
    appends_in_flight_per_node: int = 128
    linger_ms: float = 0.0
    batch_bytes_max: int = 1024 * 1024
    batch_records_max: int = 10_000
    inflight_batches_per_log: int = 2
    payload_bytes_max: int = 1024 * 1024
    #: Idempotent appends (docs/delivery.md): a retried batch is never
    #: stored twice.  Off: at least once, one epoch store call less.
    idempotent: bool = True
    #: The producer id to append under (``producers.derived_id``), instead
    #: of one from the cluster: for a task that may be run again.
    producer_id: int | None = None
    #: A reader with ``autocommit`` commits its group's position at most
    #: this often (and when it closes).
    autocommit_interval_s: float = 1.0
    #: Records appended through ``Client.append_async`` (and ``append``) and
    #: not yet acknowledged may hold this many bytes (Kafka's
    #: ``buffer.memory``); past it, appends wait up to ``max_block_ms`` for
    #: room, then raise ``BufferFullError`` (Kafka's ``max.block.ms``).
    buffer_bytes_max: int = 32 * 1024 * 1024
    max_block_ms: float = 60_000.0
    #: What the nodes may send a ``read_many`` ahead of delivery, over all its
    #: logs: shared out as each log's node windows (at least 16 records each).
    read_buffer_bytes: int = 64 * 1024 * 1024

    def __attrs_post_init__(self) -> None:
        if self.append_timeout_s <= 0 or self.linger_ms < 0:
            raise InvalidArgumentError("timeouts must be positive")
        if self.batch_bytes_max <= 0 or self.batch_records_max <= 0:
            raise InvalidArgumentError("batch limits must be positive")
        if self.inflight_batches_per_log <= 0:
            raise InvalidArgumentError("inflight_batches_per_log must be positive")
        if self.idempotent and self.inflight_batches_per_log > WINDOW:
            raise InvalidArgumentError(
                f"idempotent appends keep at most {WINDOW} batches per log in flight"
            )
        if self.buffer_bytes_max <= 0 or self.max_block_ms < 0:
            raise InvalidArgumentError(
                "buffer_bytes_max must be positive, max_block_ms not negative"
            )
        if self.read_buffer_bytes <= 0:
            raise InvalidArgumentError("read_buffer_bytes must be positive")
        if self.autocommit_interval_s < 0:
            raise InvalidArgumentError("autocommit_interval_s must not be negative")
        if self.producer_id is not None and not 0 < self.producer_id < 2**64:
            raise InvalidArgumentError("producer_id must be a u64 above 0")

    def batch_end(self, payloads: Sequence[bytes | None], start: int) -> int:
        """Where the APPEND that starts at ``payloads[start]`` ends: the
        records ``append_batch`` sends in one APPEND (at least one)."""
        end, size = start, 0
        while end < len(payloads) and end - start < self.batch_records_max:
            p = len(payloads[end] or b"")
            if end > start and size + p > self.batch_bytes_max:
                break
            size += p
            end += 1
        return end


def check_record(log_id: int, payload: bytes | None, key: bytes | None, payload_max: int) -> None:
    """What ``Appender.check`` refuses of one record without waiting: a bad
    log id, a key or payload that is not bytes or too big."""
    check_log_id(log_id)
    check_bytes("payload", (payload,), payload_max)
    check_bytes("key", (key,), KEY_BYTES_MAX)


def check_bytes(what: str, values: Sequence[bytes | None], limit: int) -> None:
    for v in values:
        if v is None:
            continue
        if type(v) is not bytes:
            raise InvalidArgumentError(f"{what} must be bytes or None, not {type(v).__name__}")
        if len(v) > limit:
            raise InvalidArgumentError(
                f"{what} of {len(v)} bytes exceeds the limit of {limit}", Status.TOOBIG
            )
