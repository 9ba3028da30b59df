"""Kafka's transaction coordinator in the front: a thin trio shell over
``transactions.TxnCoordinator`` (the rules), served with ``--kafka-transactions``;
its APIs in Kafka's shapes are ``_txn_apis``.

Where a transactional id lives
------------------------------
Its state is a record of the positions log that a group of the same name
would use (``positions_log_of``), under its own key (``txn_state_key``), and
its coordinator is the front of the node that sequences that log, as for
groups: FindCoordinator(key_type=1) names it, the others answer
NOT_COORDINATOR.  A front that becomes the coordinator of a positions log
reads the log back (one read for its groups and ids alike), restores each
id, and first finishes the transactions that were decided there (a PREPARE
state is written before any marker, rule 2 of the core).

Every change of an id's state is written before the request that made it
is answered, one write at a time per positions log (two writes of one id in
flight could land in the wrong order).  A write that fails drops what this
front holds of that log: the next request reads it back, so memory never
runs ahead of what a successor would read.

Ending a transaction
--------------------
EndTxn writes PREPARE_COMMIT (or PREPARE_ABORT) and answers; the
transaction's markers follow at once in the background (again, backing
off, until they are in), then COMPLETE, as Kafka's coordinator does.  The
id's next request waits for them rather than hearing
CONCURRENT_TRANSACTIONS; a read_committed consumer's OffsetFetch answers a
position a transaction still holds as UNSTABLE_OFFSET_COMMIT (KIP-447), so
it never reads the position from before the commit.  A marker is a CONTROL
record (``transactions.encode_marker``) appended to every data log the
transaction added; readers never deliver it, and a read_committed Fetch
learns from it where the producer's transaction ends (``_txn_reads``).  The
positions a transaction commits are records of the group's positions log
under ``txn_positions_key`` (TxnOffsetCommit, to the group's coordinator);
the commit turns them into positions and removes them, an abort removes
them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Protocol

import trio

from ..errors import LogstrandError, ProducerError, Status, collapse
from ..kafka_errors import KafkaError
from ..positions import POSITIONS_LOGS, positions_log_of, txn_positions_key, txn_state_key
from ..records import INTERNAL_LOGS
from ..transactions import (
    EXPIRY_MS,
    TXN_ID_RE,
    Markers,
    State,
    Txn,
    TxnCoordinator,
    TxnError,
    encode_marker,
    producer_key,
)

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._coordinator import GroupCoordinator


class TxnHost(Protocol):
    """What the coordinator needs of where it runs: a client of the cluster
    and the group coordinator, which says which positions logs are its."""

    client: AsyncClient
    coordinator: GroupCoordinator


_log = logging.getLogger("logstrand.kafka")
#: Producer ids kept at hand for the core (a new one when an epoch runs out).
_SPARE_IDS = 4
#: A request of an id waits this long at most for its last transaction's
#: markers, then is answered CONCURRENT_TRANSACTIONS (the client retries).
MARKERS_WAIT_S = 10.0
#: Rounds of writing a decided transaction's markers before the front
#: leaves it to the next read of its positions log (backing off to 5 s).
COMPLETE_ATTEMPTS = 20
#: A completed transaction's state is written this long after its markers,
#: if no later write of the id has said it by then.
END_WRITE_DELAY_S = 0.2


class TxnFront:
    """The front's transaction coordinator (see the module docstring)."""

    def __init__(self, front: TxnHost, max_timeout_ms: int, expiry_ms: int = EXPIRY_MS) -> None:
        self.front = front
        self.positions = front.client.groups
        self._spare: list[int] = []
        self.core = TxnCoordinator(self._spare.pop, max_timeout_ms, expiry_ms)
        #: Positions logs whose ids were read back since this front took them.
        self._loaded: set[int] = set()
        self._locks = {p: trio.Lock() for p in POSITIONS_LOGS}
        self._changed = trio.Event()
        #: Id -> set when the markers of its decided transaction are in
        #: (``_complete``, in the background).
        self._ending: dict[str, trio.Event] = {}
        #: Id -> the number of its last state write (``_save_end``), counted
        #: by ``_writes``.
        self._written: dict[str, int] = {}
        self._writes = 0
        #: Id -> when (wall clock) its open transaction began here: the
        #: metrics' age (``_txn_metrics``); only open ones are kept.
        self.opened: dict[str, float] = {}

    # -- the steps of a producer, for the Kafka APIs and the native ones --------------

    async def init(
        self, txn_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, Txn | None]:
        """Rules 1 and 4: the id's producer at a new epoch (an open
        transaction of the id aborted first, here, so the answer is the new
        epoch rather than CONCURRENT_TRANSACTIONS and a retry); the error,
        and the id's state.  ``producer_id`` and ``epoch``: a producer that
        says which it was (KIP-360) is the id's current one, or told why not."""
        code = await self.take(txn_id)
        txn = self.core.txns.get(txn_id)
        if not code and producer_id >= 0 and txn is not None:
            if producer_id != txn.producer_id:
                code = TxnError.INVALID_PRODUCER_ID_MAPPING
            elif epoch < txn.producer_epoch:
                code = TxnError.PRODUCER_FENCED
        if not code:
            try:
                await self.producer_ids()
            except LogstrandError:
                code = KafkaError.COORDINATOR_NOT_AVAILABLE
        if code:
            return code, None
        now = trio.current_time()
        code, txn, markers = self.core.init_producer_id(now, txn_id, timeout_ms)
        if markers is not None:
            code = await self.finish(markers)
            if not code:
                code, txn, _ = self.core.init_producer_id(now, txn_id, timeout_ms)
        if not code:
            code = await self.save(txn_id)
        return code, None if code else txn

    async def add(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        logs: set[int],
        groups: frozenset[str] = frozenset(),
    ) -> int:
        """Add logs (and groups, with their positions logs, where the
        positions they hold go) to the id's transaction; written down only
        when that changed it (a client adds the same log again)."""
        code: int = await self.take(txn_id)
        if code:
            return code
        logs = logs | {positions_log_of(g) for g in groups}
        before = self.core.txns.get(txn_id)
        known = (
            before is not None
            and before.state == State.ONGOING
            and logs <= before.logs
            and groups <= before.groups
        )
        now = trio.current_time()
        code = self.core.add_logs(now, txn_id, producer_id, epoch, logs, groups)
        if code or known:
            return code
        code = await self.save(txn_id)
        self.track(txn_id)
        self.poke()  # a transaction opened: its deadline is the timer's
        return code

    async def end(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, tag: str = ""
    ) -> int:
        """EndTxn: the decision written, answer; the markers follow at once
        (as Kafka's coordinator does), and the id's next request waits for
        them."""
        code = await self.take(txn_id)
        if not code:
            code, markers = self.core.end(txn_id, producer_id, epoch, commit, tag)
            if markers is not None:
                code = await self.decide(markers)
                if not code:
                    self.complete_later(markers)
        return code

    async def abort(self, txn_id: str) -> int:
        """An operator's abort of the id's open transaction (its producer
        fenced), its markers written before the answer."""
        code = await self.take(txn_id)
        if not code:
            code, markers = self.core.abort_now(txn_id)
            if markers is not None:
                _log.info("transaction %s aborted by an operator", txn_id)
                code = await self.finish(markers)
        return code

    # -- who coordinates, and what was written ---------------------------------------

    async def take(self, txn_id: str | None) -> int:
        """NONE if this front coordinates ``txn_id`` now (its positions log
        read back first if need be), or the error to answer."""
        if txn_id is None or not TXN_ID_RE.fullmatch(txn_id):
            return KafkaError.INVALID_REQUEST
        home = positions_log_of(txn_id)
        if not self.front.coordinator.coordinates_log(home):
            if home in self._loaded:  # the sequencer moved: forget its ids
                self._drop(home)
            return KafkaError.NOT_COORDINATOR
        if home in self._loaded:
            self.core.use(txn_id, trio.current_time())
            return await self._settled(txn_id)
        async with self._locks[home]:
            if home in self._loaded:
                return await self._settled(txn_id)
            try:
                await self.positions.ensure_log()  # the first id of a new cluster
                table = await self.positions.refresh(home)
                now = trio.current_time()
                for name, record in table.txns.items():
                    if positions_log_of(name) == home:
                        self.core.restore(now, json.loads(record))
                        self.track(name)
                self._loaded.add(home)
                # Decided before this front took over: finish them first.
                for markers in self.core.pending():
                    if positions_log_of(markers.transactional_id) == home:
                        self.complete_later(markers)
            except (LogstrandError, ValueError, KeyError, TypeError) as exc:
                _log.warning("kafka: transactions of %s not read back: %s", home, exc)
                self._drop(home)
                return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        self.poke()
        self.core.use(txn_id, trio.current_time())
        return await self._settled(txn_id)

    async def _settled(self, txn_id: str) -> int:
        """Wait (a while) for the markers of the id's last transaction, which
        EndTxn answered before they were in: the next step of its producer
        goes on then, not with CONCURRENT_TRANSACTIONS and a retry."""
        ending = self._ending.get(txn_id)
        if ending is not None:
            with trio.move_on_after(MARKERS_WAIT_S):
                await ending.wait()
        return KafkaError.NONE

    def _drop(self, home: int) -> None:
        self._loaded.discard(home)
        self.core.forget(lambda t: positions_log_of(t) != home)
        self._written = {k: v for k, v in self._written.items() if positions_log_of(k) != home}
        self.opened = {k: v for k, v in self.opened.items() if positions_log_of(k) != home}

    def track(self, txn_id: str) -> None:
        """Note when the id's transaction opened (for the metrics)."""
        txn = self.core.txns.get(txn_id)
        if txn is not None and txn.state == State.ONGOING:
            self.opened.setdefault(txn_id, time.time())

    async def _write(self, txn: Txn) -> bool:
        """Write ``txn``'s state (under its log's lock); False, its log
        dropped from memory, if the write failed."""
        home = positions_log_of(txn.transactional_id)
        self._writes += 1
        self._written[txn.transactional_id] = self._writes
        try:
            await self.positions.appender.append(
                home, json.dumps(txn.to_json()).encode(), txn_state_key(txn.transactional_id)
            )
        except LogstrandError as exc:
            _log.warning("kafka: transaction %s: state not written: %s", txn.transactional_id, exc)
            self._drop(home)
            return False
        return True

    async def save(self, txn_id: str) -> int:
        """Write the id's state as it is now: NONE, or the error to answer."""
        async with self._locks[positions_log_of(txn_id)]:
            txn = self.core.txns.get(txn_id)
            if txn is None or await self._write(txn):
                return KafkaError.NONE
            return KafkaError.COORDINATOR_NOT_AVAILABLE

    async def finish(self, markers: Markers) -> int:
        """Write the decision, then its markers (rules 2 and 3), before the
        caller goes on; markers that fail are written again in the
        background."""
        code = await self.decide(markers)
        if code:
            return code
        code = await self._outcome(markers)
        if code:
            self.complete_later(markers)
        return code

    async def decide(self, markers: Markers) -> int:
        """Write the id's PREPARE state: the decision, before any marker."""
        async with self._locks[positions_log_of(markers.transactional_id)]:
            txn = self.core.txns.get(markers.transactional_id)
            if txn is None or not await self._write(txn):
                return KafkaError.COORDINATOR_NOT_AVAILABLE
        return KafkaError.NONE

    async def _outcome(self, markers: Markers) -> int:
        """Write a decided transaction's markers and end its held positions,
        then note it complete; the end is written in the background."""
        try:
            # Markers and held positions at once: each is written again by
            # a coordinator that takes over, so their order does not matter.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_markers, markers)
                for group in sorted(markers.groups):
                    nursery.start_soon(self._end_positions, group, markers)
        except BaseExceptionGroup as group:
            exc = collapse(group)
            if not isinstance(exc, LogstrandError):
                raise exc from None
            _log.warning(
                "kafka: transaction %s: markers not written: %s", markers.transactional_id, exc
            )
            return KafkaError.COORDINATOR_NOT_AVAILABLE
        self.core.markers_written(markers)
        self.opened.pop(markers.transactional_id, None)
        # The end is written after: every marker is in, so a coordinator
        # that reads PREPARE back writes them again under the same numbers,
        # which the logs answer as duplicates.
        self.front.client.nursery.start_soon(self._save_end, markers.transactional_id)
        return KafkaError.NONE

    async def _save_end(self, txn_id: str) -> None:
        """Write the completed state, unless a later write of the id (its
        producer's next transaction, which begins at once) says it first:
        on a producer's path that write would wait for this one."""
        now = self._writes
        await trio.sleep(END_WRITE_DELAY_S)
        if self._written.get(txn_id, 0) <= now:
            await self.save(txn_id)

    def complete_later(self, markers: Markers) -> None:
        """Write a decided transaction's markers in the background, again
        until they are in; the id's next requests wait for it (``take``)."""
        txn_id = markers.transactional_id
        if txn_id not in self._ending:
            self._ending[txn_id] = trio.Event()
            self.front.client.nursery.start_soon(self._complete, markers)

    async def _complete(self, markers: Markers) -> None:
        txn_id = markers.transactional_id
        home = positions_log_of(txn_id)
        try:
            for attempt in range(COMPLETE_ATTEMPTS):
                txn = self.core.txns.get(txn_id)
                decided = txn is not None and txn.state in (
                    State.PREPARE_COMMIT,
                    State.PREPARE_ABORT,
                )
                if not decided or not self.front.coordinator.coordinates_log(home):
                    return  # done, or another front's to finish now
                if not await self._outcome(markers):
                    return
                await trio.sleep(min(5.0, 0.1 * 2**attempt))
            # The next request of an id there reads the log back, and
            # finishes what is decided first.
            self._drop(home)
        finally:
            self._ending.pop(txn_id).set()

    async def _write_markers(self, markers: Markers) -> None:
        """A COMMIT (or ABORT) marker into every log the transaction wrote
        to, all at once, each numbered under the producer's fence key.  A
        positions log gets none: its positions are the held record's to end
        (``_end_positions``)."""
        marker = encode_marker(markers.commit, markers.producer_id, markers.producer_epoch)
        fence = producer_key(markers.producer_id, markers.producer_epoch, fence=True)
        try:
            async with trio.open_nursery() as nursery:
                for log_id, seq in markers.seqs:
                    if log_id not in INTERNAL_LOGS:
                        nursery.start_soon(self._marker, log_id, marker, (fence, seq))
        except BaseExceptionGroup as group:
            raise collapse(group) from None

    async def _marker(self, log_id: int, marker: bytes, number: tuple[int, int]) -> None:
        client = self.front.client
        try:
            await client.append_marker(log_id, marker, number)
        except ProducerError as exc:
            # The log forgot the fence key (a day idle, or evicted): it takes
            # the key again from 0.  Anything else (a numbering that cannot
            # be, a table lost): the marker still goes, without a fence.
            _log.warning(
                "kafka: log %d: marker %s refused (%s): written again", log_id, number, exc
            )
            again = (number[0], 0) if exc.status == Status.UNKNOWN_PRODUCER else None
            try:
                await client.append_marker(log_id, marker, again)
            except ProducerError:
                await client.append_marker(log_id, marker, None)

    async def _end_positions(self, group: str, markers: Markers) -> None:
        """Commit (or drop) the positions the transaction holds for ``group``.
        Done again by a coordinator that takes over: committing the same
        positions twice changes nothing."""
        table = await self.positions.refresh(positions_log_of(group))
        held = table.txn_positions.get((group, markers.producer_id))
        if held is None:
            return
        try:
            doc = json.loads(held)
            epoch = int(doc["epoch"])
            entries = [(int(x[0]), int(x[1]), x[2], x[3]) for x in doc["positions"]]
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            _log.warning("kafka: group %s: held positions not read: %s", group, exc)
            return
        # Written at the transaction's epoch; an abort that fenced it
        # decides at the epoch after.
        if markers.commit and epoch == markers.producer_epoch:
            await self.positions.commit_many(group, entries)
        if epoch <= markers.producer_epoch:
            key = txn_positions_key(group, markers.producer_id)
            await self.positions.appender.append(positions_log_of(group), None, key)

    async def producer_ids(self) -> None:
        while len(self._spare) < _SPARE_IDS:
            self._spare.append(await self.front.client.allocate_producer_id())

    # -- timeouts ------------------------------------------------------------------------

    def poke(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        """Abort the transactions whose producers went silent.  Until cancelled."""
        while True:
            with trio.move_on_at(self.core.next_deadline() or math.inf):
                await self._changed.wait()
            self._changed = trio.Event()
            try:
                await self.producer_ids()
            except LogstrandError as exc:
                _log.warning("kafka: transactions: no producer ids: %s", exc)
                await trio.sleep(1.0)
                continue
            # Ids of logs whose sequencer moved are another front's now: a
            # timeout here must not abort what that coordinator holds.
            for home in [h for h in self._loaded if not self.front.coordinator.coordinates_log(h)]:
                self._drop(home)
            now = trio.current_time()
            for markers in self.core.tick(now):
                _log.info("kafka: transaction %s timed out: aborted", markers.transactional_id)
                await self.finish(markers)
            for txn_id in self.core.expire(now):
                await self._remove(txn_id)

    async def _remove(self, txn_id: str) -> None:
        """Rule 7: the id expired here; its state goes from its positions
        log (a tombstone), so a coordinator that takes over forgets it too.
        Not written: it comes back with the next coordinator, to expire
        again."""
        home = positions_log_of(txn_id)
        async with self._locks[home]:
            if txn_id in self.core.txns:
                return  # used again meanwhile (a new producer): it stays
            try:
                await self.positions.appender.append(home, None, txn_state_key(txn_id))
            except LogstrandError as exc:
                _log.warning("kafka: transactional id %s: expired, not removed: %s", txn_id, exc)
                return
        self._written.pop(txn_id, None)
        _log.info("kafka: transactional id %s expired: removed", txn_id)
