"""A simulated transactional producer, with its coordinator's part inline.

It does what ``client.transaction`` and the node's coordinator do to the
logs (docs/transactions.md), through the real sequencers and storage of the
simulation: a transaction's batches are appends flagged TRANSACTIONAL,
numbered under ``producer_key(pid, epoch)``; its end is a COMMIT or ABORT
marker (a CONTROL record, ``encode_marker``) appended to each log it
wrote to, numbered under the fence key of the marker's epoch and retried
until it is in, as the coordinator retries it.  What is not simulated is the
coordinator's own state (its log and failover): the producer decides.

The shapes of a transaction:

* **committed**: every batch acknowledged, then COMMIT (three times in four);
* **aborted**: ABORT instead (three times in four the producer's choice);
* **failed**: a batch was given up, so it may still land later: the
  producer aborts by INIT, as the real client does, and the coordinator
  aborts at the next epoch, whose markers fence the batch's;
* **timed out**: the producer goes silent with batches in flight, and the
  coordinator aborts it at the next epoch (its markers fence the old one);
  the producer comes back at the epoch after (INIT again).

Plain appends go on beside them.  ``world.txns`` is the truth the checker
holds committed readers to (``checks.check_committed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from logstrand.batch import PackedBatch
from logstrand.errors import Status
from logstrand.records import CONTROL, TRANSACTIONAL
from logstrand.transactions import encode_marker, producer_key
from logstrand.wire import AppendReply

from .client import SimClient, rng_hit

if TYPE_CHECKING:
    from .config import Address
    from .world import World


@attrs.define(eq=False)
class TxnTruth:
    """One transaction as its producer knows it."""

    producer_id: int
    epoch: int
    #: Log -> payloads appended in it (acknowledged or not).
    payloads: dict[int, set[bytes]] = attrs.Factory(dict)
    #: None while open; "commit" or "abort" once decided.
    outcome: str | None = None
    #: Batches not yet acknowledged or given up; batches given up.
    pending: int = 0
    failed: int = 0
    #: Batches still to send, and whether the producer goes silent.
    to_send: int = 0
    silent: bool = False
    #: Markers not yet in.
    markers: int = 0


class SimTxnClient(SimClient):
    """A producer of transactions and plain appends (see the module docstring)."""

    def __init__(self, world: World, client_id: int) -> None:
        super().__init__(world, client_id)
        self.pid = 900_000 + client_id
        self.epoch = 0
        #: Log -> the next number of this epoch's transactional batches.
        self.txn_seq: dict[int, int] = {}
        #: (marker epoch, log) -> markers of that epoch numbered in the log.
        self.mark_seq: dict[tuple[int, int], int] = {}
        self.txn: TxnTruth | None = None
        #: Payload -> its transaction.
        self.txn_of: dict[bytes, TxnTruth] = {}
        #: Marker batches in flight: id(batch) -> its transaction.
        self._marker_of: dict[int, TxnTruth] = {}

    # -- the producer's steps ----------------------------------------------------

    def tick(self) -> None:
        world = self.world
        if rng_hit(world, 0.2):
            self.refresh()
        room = len(self.in_flight) < world.config.in_flight_max
        txn = self.txn
        if txn is None and self.appending:
            self._begin()
        elif txn is not None and txn.outcome is None:
            if txn.to_send and room:
                self._send_batch(txn)
            elif txn.silent and not txn.to_send:
                self._decide(txn)  # the coordinator's timeout, batches still in flight
            elif not txn.to_send and not txn.pending:
                self._decide(txn)
        if self.appending and room and rng_hit(world, 0.3):
            log = world.rng.choice(world.config.log_ids)
            self.append(log, [b"c%d-%d" % (self.id, next(self.counter))])
        if self.appending or self.in_flight or self.txn is not None:
            world.at(world.rng.expovariate(1 / world.config.append_every_s), self.tick)

    def _begin(self) -> None:
        rng = self.world.rng
        txn = self.txn = TxnTruth(self.pid, self.epoch)
        txn.to_send = rng.randint(1, 4)
        txn.silent = rng_hit(self.world, 0.1)
        self.world.txns.append(txn)

    def _send_batch(self, txn: TxnTruth) -> None:
        world = self.world
        txn.to_send -= 1
        log = world.rng.choice(world.config.log_ids)
        payloads = [
            b"t%d-%d" % (self.id, next(self.counter)) for _ in range(world.rng.randint(1, 3))
        ]
        txn.payloads.setdefault(log, set()).update(payloads)
        for p in payloads:
            self.txn_of[p] = txn
        self.attempted.update(payloads)
        self.log_of.update(dict.fromkeys(payloads, log))
        seq = self.txn_seq.get(log, 0)
        self.txn_seq[log] = seq + len(payloads)
        number = (producer_key(txn.producer_id, txn.epoch), seq)
        self.out[log].append(number)
        batch = PackedBatch.for_append(
            [None] * len(payloads), payloads, producer=number, flags=TRANSACTIONAL
        )
        txn.pending += 1
        self._send(log, payloads, world.now, batch, 0)

    def _decide(self, txn: TxnTruth) -> None:
        """Commit or abort, and write the markers; the epoch the next
        transaction starts in."""
        world = self.world
        if txn.silent or (txn.failed and not world.config.break_txn_abort):
            # Timed out, or a batch given up that may still land: aborted at
            # the next epoch (the coordinator's timeout, or the producer's
            # INIT), whose markers fence this one's batches.
            txn.outcome, mark_epoch, self.epoch = "abort", txn.epoch + 1, txn.epoch + 2
        elif txn.failed or not rng_hit(world, 0.75):
            txn.outcome, mark_epoch = "abort", txn.epoch
            if txn.failed:
                self.epoch = txn.epoch + 1  # (break_txn_abort: the next INIT)
        else:
            txn.outcome, mark_epoch = "commit", txn.epoch
        if self.epoch != txn.epoch:
            self.txn_seq = {}
        world.note(
            f"client {self.id} txn {txn.producer_id}/{txn.epoch} {txn.outcome}s "
            f"(markers at epoch {mark_epoch}) in logs {sorted(txn.payloads)}"
        )
        marker = encode_marker(txn.outcome == "commit", txn.producer_id, mark_epoch)
        key = producer_key(txn.producer_id, mark_epoch, fence=True)
        for log in sorted(txn.payloads):
            seq = self.mark_seq.get((mark_epoch, log), 0)
            self.mark_seq[(mark_epoch, log)] = seq + 1
            number = None if world.config.break_txn_fence else (key, seq)
            batch = PackedBatch.for_append([None], [marker], producer=number, flags=CONTROL)
            self._marker_of[id(batch)] = txn
            txn.markers += 1
            self._send(log, [marker], world.now, batch, 0)
        if not txn.markers:
            self.txn = None

    # -- replies -----------------------------------------------------------------

    def receive(self, src: Address, msg: Any) -> None:
        if not isinstance(msg, AppendReply):
            return
        got = self.in_flight.get(msg.request_id)
        if got is None:
            return
        _log, payloads, _, batch, _ = got
        txn = self._marker_of.get(id(batch))
        if txn is not None:
            self._marker_reply(msg, txn, batch)
            return
        super().receive(src, msg)
        if batch.flag_bits & TRANSACTIONAL and payloads[0] in self.acked:
            self._resolved(payloads[0], failed=False)

    def _marker_reply(self, msg: AppendReply, txn: TxnTruth, batch: PackedBatch) -> None:
        """A marker is written until it is in, as the coordinator writes it:
        a log that forgot the fence key takes it again from 0, one that
        refuses its numbering takes it without."""
        log, payloads, sent, _, attempt = self.in_flight.pop(msg.request_id)
        del self._marker_of[id(batch)]
        if msg.status == Status.OK:
            txn.markers -= 1
            self.world.note(f"client {self.id} marker in log {log} at {msg.first_lsn:#x}")
            if not txn.markers and self.txn is txn:
                self.txn = None
            return
        number = batch.producer
        if number is not None and msg.status == Status.UNKNOWN_PRODUCER:
            number = (number[0], 0)
        elif msg.status in (Status.OUT_OF_SEQUENCE, Status.FENCED):
            number = None
        if msg.status == Status.REDIRECTED and msg.redirect is not None:
            self.hint[log] = msg.redirect
        again = PackedBatch.for_append([None], payloads, producer=number, flags=CONTROL)
        self._marker_of[id(again)] = txn
        self.world.at(0.05, self._send, log, payloads, sent, again, attempt + 1)
        self._after_failure(log, redirected=msg.status == Status.REDIRECTED)

    def _retry(self, rid: int, *, wait: bool = False) -> None:
        log, payloads, sent, batch, attempt = self.in_flight[rid]
        txn = self._marker_of.get(id(batch))
        if txn is not None:  # a marker that timed out: the same again
            self.in_flight.pop(rid)
            self.world.at(0.05, self._send, log, payloads, sent, batch, attempt + 1)
            return
        gives_up = not (attempt < self.world.config.retries or wait)
        super()._retry(rid, wait=wait)
        if gives_up and batch.flag_bits & TRANSACTIONAL:
            self._resolved(payloads[0], failed=True)

    def _resolved(self, payload: bytes, *, failed: bool) -> None:
        txn = self.txn_of[payload]
        txn.pending -= 1
        txn.failed += failed
