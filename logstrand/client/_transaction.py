"""Transactions for logstrand's own producers: ``client.transaction(id)``.

A transaction appends to any logs and commits consumer groups' positions,
and all of it becomes visible to committed readers at once, or none of it
(docs/transactions.md).  The client plays the part of a Kafka
transactional producer against the node's transaction coordinator (the
one the Kafka front shares, ``groups._native_txns``):

- **Its producer.**  The first transaction of an id in a client asks the
  coordinator for the id's producer (INIT): a producer id and a new epoch,
  which fences every older producer of the id, in this client or another,
  native or Kafka, and aborts what it left open.  The client keeps it for
  the id's next transactions, one at a time.
- **Before it writes to a log** the transaction adds the log (ADD), so the
  coordinator knows where its markers go (KIP-890's order: a record is
  never in a log its coordinator does not know of).  Steps run at once
  (appends to several logs in a nursery) share one ADD, as a Kafka
  producer adds every partition of a drain in one AddPartitionsToTxn.
- **Its records** are appends numbered under the producer's id and epoch
  (``append_numbered``, flagged TRANSACTIONAL): a retry is taken once, and
  the logs refuse a fenced producer's (FencedError).  The numbers run on
  from one transaction to the next, per log.
- **Its positions** (``commit_positions``) are written into the group's
  positions log under the producer's key, where the coordinator turns them
  into the group's positions when the transaction commits and drops them
  when it aborts.
- **The end**: COMMIT or ABORT to the coordinator, which writes the
  decision, answers, and writes a marker into every log.  Leaving the
  ``async with`` block commits; an exception out of it aborts.

A failed append leaves the producer's numbering unknown in that log: the
transaction can only abort then, and it aborts by INIT, so that its markers
come at the next epoch and fence whatever of this epoch lands late.
"""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..errors import (
    FencedError,
    InvalidArgumentError,
    LogstrandError,
    Status,
)
from ..positions import check_group, positions_log_of, txn_positions_key
from ..records import INTERNAL_LOGS
from ..transactions import TXN_ID_RE, TxnError, producer_key
from ..wire import TxnOp, TxnReply, TxnRequest
from ._coordinators import CoordinatorClient
from ._txn_requests import FENCED_ERRORS, Prepared, ask_coordinator

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence


class TxnClient(CoordinatorClient, Protocol):
    """What a transaction needs of its client (``AsyncClient``)."""

    async def append_numbered(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        producer: tuple[int, int],
        transactional: bool = False,
    ) -> int: ...


_log = logging.getLogger("logstrand.transactions")


@attrs.define(eq=False)
class TxnProducer:
    """A transactional id's producer in this client."""

    transactional_id: str
    timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    #: Log -> the number of the producer's next record there.
    seqs: dict[int, int] = attrs.Factory(dict)
    #: One transaction at a time.  A semaphore, not a lock: the asyncio
    #: client enters and leaves a transaction in different trio tasks.
    lock: trio.Semaphore = attrs.Factory(lambda: trio.Semaphore(1))
    #: The producer must start again (INIT) before its next transaction.
    stale: bool = True
    #: A newer producer of the id took over: this one is done, and the
    #: client's next ``transaction`` of the id makes a new one.
    fenced: bool = False


class Transaction:
    """One transaction (see the module docstring): use it as an async
    context manager, which commits when the block ends and aborts when an
    exception leaves it."""

    def __init__(self, client: TxnClient, producer: TxnProducer) -> None:
        self._client = client
        self._producer = producer
        self._adds = _Adds()
        #: One append at a time per log: its numbers must reach it in order.
        self._appending: dict[int, trio.Lock] = {}
        #: Group -> log -> LSN: the positions held for each group.
        self._held: dict[str, dict[int, int]] = {}
        #: None while open; then "committed", "aborted" or "fenced" (a newer
        #: producer of the id took over and aborted it).
        self.outcome: str | None = None
        self._entered = False

    @property
    def transactional_id(self) -> str:
        return self._producer.transactional_id

    @property
    def producer(self) -> tuple[int, int]:
        """(producer id, producer epoch) of this transaction."""
        return self._producer.producer_id, self._producer.producer_epoch

    async def __aenter__(self) -> Transaction:
        if self._entered:
            raise InvalidArgumentError("a transaction is used once: ask for another")
        self._entered = True
        p = self._producer
        await p.lock.acquire()
        try:
            if p.stale:
                await self._init()
        except BaseException:
            p.lock.release()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            if self.outcome is not None:
                return
            if kind is None:
                await self.commit()
                return
            try:
                await self.abort()
            except LogstrandError as failure:
                # The block's own error says more; the coordinator aborts
                # the transaction at its timeout anyway.
                _log.warning("transaction %s: not aborted: %s", self.transactional_id, failure)
        finally:
            self._producer.lock.release()

    # -- what a transaction does ---------------------------------------------------

    async def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        """Append one record to ``log_id`` in the transaction; its LSN."""
        return await self.append_batch(log_id, [payload], keys=[key])

    async def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> int:
        """Append a batch to ``log_id`` in the transaction; its first LSN.

        Raises FencedError (a newer producer of the id took over: this one
        is done), and what ``append_batch`` raises; after an error the
        transaction can only abort."""
        self._check_open()
        if not payloads:
            raise InvalidArgumentError("an empty batch")
        if log_id in INTERNAL_LOGS:
            raise InvalidArgumentError(f"log {log_id} is internal: commit_positions writes there")
        await self._add(logs=(log_id,))
        p = self._producer
        lock = self._appending.get(log_id)
        if lock is None:  # (not setdefault: that makes a lock for every append)
            lock = self._appending[log_id] = trio.Lock()
        async with lock:
            seq = p.seqs.get(log_id, 0)
            number = (producer_key(p.producer_id, p.producer_epoch), seq)
            try:
                lsn = await self._client.append_numbered(
                    log_id, payloads, keys=keys, producer=number, transactional=True
                )
            except LogstrandError as exc:
                # The log's numbering of the producer is unknown now: this
                # transaction can only abort, the next starts a new epoch.
                p.stale = True
                p.fenced = p.fenced or isinstance(exc, FencedError)
                raise
            p.seqs[log_id] = seq + len(payloads)
        return lsn

    async def commit_positions(self, group: str, positions: Mapping[int, int]) -> None:
        """Commit ``group``'s positions (log -> the LSN processed up to and
        including) with the transaction: they become the group's positions
        if it commits, and are dropped if it aborts (a consume-transform-
        produce round: Kafka's ``send_offsets_to_transaction``)."""
        self._check_open()
        check_group(group)
        for log_id, lsn in positions.items():
            if type(log_id) is not int or log_id in INTERNAL_LOGS or log_id <= 0:
                raise InvalidArgumentError(f"not a data log: {log_id!r:.40}")
            if type(lsn) is not int or lsn < 0:
                raise InvalidArgumentError(f"log {log_id}: not an LSN: {lsn!r:.40}")
        await self._add(groups=(group,))
        held = self._held.setdefault(group, {})
        held.update(positions)
        p = self._producer
        # The whole of what the transaction holds for the group, each time:
        # the latest record under the key is what the coordinator commits.
        doc = {
            "epoch": p.producer_epoch,
            "positions": [[log, lsn, None, None] for log, lsn in sorted(held.items())],
        }
        try:
            await self._client.groups.appender.append(
                positions_log_of(group),
                json.dumps(doc).encode(),
                txn_positions_key(group, p.producer_id),
            )
        except LogstrandError:
            p.stale = True  # whether it was written is unknown: abort only
            raise

    async def commit(self) -> None:
        """Commit: every record and position of the transaction becomes
        visible to committed readers, all at once.

        Raises FencedError (a newer producer took over: nothing of this
        transaction will be visible), LogstrandError (the transaction could
        not commit: abort it)."""
        self._check_open()
        if self._producer.fenced:
            self.outcome = "fenced"
            raise FencedError(
                f"transaction {self.transactional_id}: a newer producer of the id took over",
                Status.FENCED,
            )
        if self._producer.stale:  # a step of it failed (it was fresh when it began)
            raise LogstrandError(
                f"transaction {self.transactional_id}: a step of it failed; it can only abort"
            )
        if self._adds.any:
            try:
                await self._ask(TxnOp.COMMIT)
            except FencedError:
                self.outcome = "fenced"  # whoever fenced it aborted it
                raise
        self.outcome = "committed"

    def prepare(self) -> Prepared | None:
        """Leave the transaction open at the block's end, for another
        client to commit or abort (``client.commit_prepared``,
        ``abort_prepared``): the first phase of a two-phase commit, as a
        Spark task's part of a micro-batch.  Its timeout still runs.  None:
        it wrote nothing, so there is nothing to commit.

        Raises FencedError (a newer producer took over), LogstrandError (a
        step failed: abort it)."""
        self._check_open()
        p = self._producer
        if p.fenced:
            raise FencedError(f"transaction {self.transactional_id}: fenced", Status.FENCED)
        if p.stale:
            raise LogstrandError(f"transaction {self.transactional_id}: a step of it failed")
        self.outcome = "prepared"
        if not self._adds.any:
            return None
        # The id's next transaction in this client starts a new epoch, which
        # aborts this one if it is still open by then.
        p.stale = True
        return Prepared(self.transactional_id, p.producer_id, p.producer_epoch)

    async def abort(self) -> None:
        """Abort: nothing of the transaction is ever visible to committed readers."""
        if self.outcome is not None:
            return
        self.outcome = "aborted"
        p = self._producer
        if self._adds.any and p.stale and not p.fenced:
            # A step failed: an append of it may still land in its log, after
            # an ABORT marker of this epoch (which fences older epochs only),
            # and join the producer's next transaction there.  INIT aborts
            # the transaction at the next epoch instead, whose markers fence
            # this epoch's appends, and gives the producer a fresh epoch.
            await self._init()
            return
        if self._adds.any:
            try:
                await self._ask(TxnOp.ABORT)
            except FencedError:
                pass  # whoever fenced it aborted it
            except LogstrandError:
                self._producer.stale = True
                raise

    # -- with the coordinator -------------------------------------------------------

    def _check_open(self) -> None:
        if not self._entered or self.outcome is not None:
            raise InvalidArgumentError(
                f"transaction {self.transactional_id} is not open (use it in 'async with')"
            )

    async def _init(self) -> None:
        p = self._producer
        reply = await self._ask(TxnOp.INIT, timeout_ms=p.timeout_ms, init=True)
        p.producer_id, p.producer_epoch = reply.producer_id, reply.producer_epoch
        p.seqs.clear()  # a new epoch numbers from 0 in every log
        p.stale = False

    async def _add(self, logs: Sequence[int] = (), groups: Sequence[str] = ()) -> None:
        async def send(logs: tuple[int, ...], groups: tuple[str, ...]) -> None:
            try:
                await self._ask(TxnOp.ADD, logs=logs, groups=groups)
            except _IdForgotten:
                if self._adds.any:
                    raise
                # The id expired at its coordinator while this client kept its
                # producer (idle for --transactional-id-expiry): nothing of the
                # transaction is written yet, so it starts with a new producer.
                await self._init()
                await self._ask(TxnOp.ADD, logs=logs, groups=groups)

        await self._adds.ensure(send, logs, groups)

    async def _ask(self, op: TxnOp, *, init: bool = False, **fields: Any) -> TxnReply:
        """One request to the id's coordinator, found again when it moved,
        and tried again while the id is busy (CONCURRENT_TRANSACTIONS)."""
        p = self._producer
        pid, epoch = (p.producer_id, p.producer_epoch) if not init else (-1, -1)

        def make(rid: int) -> TxnRequest:
            return TxnRequest(rid, int(op), p.transactional_id, pid, epoch, **fields)

        reply = await ask_coordinator(self._client, p.transactional_id, make)
        if reply.error in FENCED_ERRORS:
            p.stale = p.fenced = True
            raise FencedError(
                f"transaction {p.transactional_id}: a newer producer of the id took over "
                f"({reply.message})",
                Status.FENCED,
            )
        if reply.error == TxnError.INVALID_PRODUCER_ID_MAPPING and not init:
            p.stale = True
            raise _IdForgotten(f"transaction {p.transactional_id}: {reply.message}")
        if reply.error == TxnError.INVALID_TRANSACTION_TIMEOUT:
            raise InvalidArgumentError(
                f"transaction {p.transactional_id}: a timeout of {p.timeout_ms} ms is more than "
                "the nodes allow (--kafka-max-transaction-timeout)"
            )
        if reply.error:
            p.stale = True
            raise LogstrandError(f"transaction {p.transactional_id}: {reply.message}")
        return reply


class _IdForgotten(LogstrandError):
    """The coordinator knows no producer of the id by this producer id: the
    id expired (``TxnCoordinator.expire``)."""


@attrs.define(eq=False)
class _Adds:
    """What a transaction added at its coordinator, and the one ADD that
    steps running at once share."""

    logs: set[int] = attrs.Factory(set)
    groups: set[str] = attrs.Factory(set)
    _want_logs: set[int] = attrs.Factory(set)
    _want_groups: set[str] = attrs.Factory(set)
    #: Set when the ADD in flight is answered (or failed).
    _flight: trio.Event | None = None

    @property
    def any(self) -> bool:
        return bool(self.logs or self.groups)

    async def ensure(
        self,
        send: Callable[[tuple[int, ...], tuple[str, ...]], Awaitable[None]],
        logs: Sequence[int],
        groups: Sequence[str],
    ) -> None:
        """Return once ``logs`` and ``groups`` are added: by an ADD in
        flight that took them, or by one this step sends with what other
        steps want meanwhile.  An ADD that failed raises in the step that
        sent it; the others ask again."""
        while True:
            want_logs = [x for x in logs if x not in self.logs]
            want_groups = [g for g in groups if g not in self.groups]
            if not want_logs and not want_groups:
                return
            self._want_logs.update(want_logs)
            self._want_groups.update(want_groups)
            if self._flight is not None:
                await self._flight.wait()
                continue
            flight = self._flight = trio.Event()
            try:
                # One checkpoint first: steps started together with this one
                # (appends to three logs in a nursery) name their logs too,
                # and one ADD carries them all.
                await trio.lowlevel.checkpoint()
                new_logs = tuple(sorted(self._want_logs - self.logs))
                new_groups = tuple(sorted(self._want_groups - self.groups))
                self._want_logs.clear()
                self._want_groups.clear()
                if new_logs or new_groups:
                    await send(new_logs, new_groups)
                self.logs.update(new_logs)
                self.groups.update(new_groups)
            finally:
                self._flight = None
                flight.set()


def new_producer(txn_id: str, timeout_s: float) -> TxnProducer:
    if not TXN_ID_RE.fullmatch(txn_id):
        raise InvalidArgumentError(
            f"not a transactional id: {txn_id!r:.60} (printable ASCII, no spaces, 1-249)"
        )
    if not math.isfinite(timeout_s) or not 0 < timeout_s <= 3600:
        raise InvalidArgumentError("timeout_s: more than 0 and at most an hour")
    return TxnProducer(txn_id, max(1, round(timeout_s * 1000)))
