"""The transaction coordinator's rules (Kafka's KIP-98 as KIP-890 revised
it), for every transactional id one coordinator holds.  Pure: the shell
feeds it requests and the time, writes down the states it changes, writes
the markers it asks for, and tells it when they are written.

Rules
-----
1. **One producer per transactional id.**  ``init_producer_id`` gives the id
   a producer id (new the first time) and a producer epoch one higher than
   before, which fences every older producer of the id: a request carrying
   an older epoch is PRODUCER_FENCED.  When the epoch would pass
   ``EPOCH_MAX`` the id gets a new producer id at epoch 0.
2. **States.**  EMPTY (no transaction) -> ONGOING (the first log added) ->
   PREPARE_COMMIT or PREPARE_ABORT (EndTxn, or an abort the coordinator
   decides) -> COMPLETE_COMMIT or COMPLETE_ABORT (every marker written) ->
   ONGOING again with the next log added.  A PREPARE state is the decision:
   it is written down before any marker, so a coordinator that takes over
   finishes writing the markers of a decided transaction, and never decides
   it again.
3. **Markers.**  Deciding a transaction asks for one marker (COMMIT or
   ABORT, with the producer id and the epoch of the decision) in every log
   the transaction added, in one ``Markers`` order, each numbered per log
   (``Txn.marks``, from 0 at each epoch): written again by a coordinator
   that takes over, a log takes it once; ``markers_written`` completes it.
   While markers are out, requests of the id get CONCURRENT_TRANSACTIONS,
   which clients retry.
4. **Fencing an open transaction.**  ``init_producer_id`` while a
   transaction is ONGOING bumps the epoch and aborts it (its markers carry
   the new epoch, so the old producer's late writes are fenced by the
   logs), and answers CONCURRENT_TRANSACTIONS until the abort is complete;
   the new producer's retry then gets the epoch.
5. **Timeouts.**  A transaction ONGOING for longer than its producer's
   ``transaction.timeout.ms`` is aborted by the coordinator, with the epoch
   bumped as in rule 4, so that the producer that went silent is fenced.
   A timeout above ``max_timeout_ms`` is INVALID_TRANSACTION_TIMEOUT.
6. **Retries.**  EndTxn repeated after its transaction completed the same
   way answers NONE (its first answer may have been lost); the other way
   round, or with no transaction, INVALID_TXN_STATE.
7. **Expiry.**  An id with no transaction open whose producer sent nothing
   for ``expiry_ms`` (7 days; Kafka's ``transactional.id.expiration.ms``)
   is forgotten (``expire``), and the shell removes its state: an
   application that makes an id per session does not grow the state for
   ever.  Its next producer starts afresh (a new producer id).  The clock
   starts again when a coordinator takes the id over.

Error codes are Kafka's numbers (``TxnError``), which the Kafka front
sends as they are and the native client turns into its exceptions.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import re
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable

#: A producer epoch is a Kafka int16; past this the id gets a new producer id.
EPOCH_MAX = 32_767
#: What names a transactional id here: printable ASCII, no spaces (Kafka
#: takes any string; these are the ones its tools and clients use).
TXN_ID_RE = re.compile(r"[\x21-\x7e]{1,249}")
#: What a transaction may ask for at most unless the node says otherwise
#: (Kafka's transaction.max.timeout.ms).
MAX_TIMEOUT_MS = 900_000
#: An id not used for this long, with no transaction open, is forgotten:
#: its state removed (Kafka's transactional.id.expiration.ms, 7 days).
EXPIRY_MS = 7 * 24 * 3600 * 1000


class TxnError(enum.IntEnum):
    """The errors of the rules, by Kafka's numbers."""

    NONE = 0
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    PRODUCER_FENCED = 90


class State(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


_PREPARING = (State.PREPARE_COMMIT, State.PREPARE_ABORT)
_DONE = (State.EMPTY, State.COMPLETE_COMMIT, State.COMPLETE_ABORT)


@attrs.define(eq=False)
class Txn:
    """One transactional id's producer and transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: State = State.EMPTY
    #: The logs the open (or deciding) transaction wrote to.
    logs: set[int] = attrs.Factory(set)
    #: The groups whose positions it commits (AddOffsetsToTxn).
    groups: set[str] = attrs.Factory(set)
    #: When the open transaction started (its first log), for rule 5.
    started: float | None = None
    #: When a request of the id's producer last came (rule 7; the clock
    #: starts again when a coordinator takes the id over).
    used: float | None = None
    #: The tag of the id's last commit (``TxnRequest.tag``): what it did, in
    #: the application's words (a Spark micro-batch), to be told again.
    tag: str = ""
    #: Log -> how many markers of this producer id and epoch went into it:
    #: the number of the next one (rule 3: markers are numbered under the
    #: fence key, so a log takes each once and fences older epochs).
    marks: dict[int, int] = attrs.Factory(dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.transactional_id,
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "logs": sorted(self.logs),
            "groups": sorted(self.groups),
            "marks": {str(k): v for k, v in sorted(self.marks.items())},
            "tag": self.tag,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Txn:
        return cls(
            d["id"],
            int(d["pid"]),
            int(d["epoch"]),
            int(d["timeout_ms"]),
            State(d["state"]),
            {int(x) for x in d["logs"]},
            {str(x) for x in d.get("groups", ())},
            marks={int(k): int(v) for k, v in d.get("marks", {}).items()},
            tag=str(d.get("tag", "")),
        )


@attrs.frozen
class Markers:
    """Rule 3: write a COMMIT (or ABORT) marker of producer ``producer_id``
    at ``producer_epoch`` into each of ``logs``, and commit (or drop) the
    positions it holds for each of ``groups``, then ``markers_written``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    logs: frozenset[int]
    groups: frozenset[str] = frozenset()
    #: (log, number of its marker): what each marker is numbered as.
    seqs: tuple[tuple[int, int], ...] = ()


class TxnCoordinator:
    """Every transactional id one coordinator holds (see the module docstring)."""

    def __init__(
        self,
        new_producer_id: Callable[[], int],
        max_timeout_ms: int = MAX_TIMEOUT_MS,
        expiry_ms: int = EXPIRY_MS,
    ) -> None:
        self._new_producer_id = new_producer_id
        self.max_timeout_ms = max_timeout_ms
        self.expiry_s = expiry_ms / 1000
        self.txns: dict[str, Txn] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        #: (when it may be idle long enough, order, id): one entry per id,
        #: pushed again later when it was used meanwhile (``expire``).
        self._idle: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    # -- producers ----------------------------------------------------------------------

    def init_producer_id(
        self, now: float, txn_id: str, timeout_ms: int
    ) -> tuple[TxnError, Txn | None, Markers | None]:
        """Rules 1 and 4: the id's producer id and new epoch, or an error;
        with the markers of an open transaction this aborts."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return TxnError.INVALID_TRANSACTION_TIMEOUT, None, None
        txn = self.txns.get(txn_id)
        if txn is None:
            txn = self.txns[txn_id] = Txn(txn_id, self._new_producer_id(), 0, timeout_ms)
            self._note_use(txn, now)
            return TxnError.NONE, txn, None
        if txn.state in _PREPARING:
            return TxnError.CONCURRENT_TRANSACTIONS, None, None
        if txn.state == State.ONGOING:
            return TxnError.CONCURRENT_TRANSACTIONS, None, self._abort(txn)
        txn.timeout_ms = timeout_ms
        self._bump(txn)
        return TxnError.NONE, txn, None

    def _bump(self, txn: Txn) -> None:
        if txn.producer_epoch >= EPOCH_MAX:
            txn.producer_id, txn.producer_epoch = self._new_producer_id(), 0
        else:
            txn.producer_epoch += 1
        txn.marks = {}  # a new epoch's markers number from 0

    def _check(self, txn_id: str, producer_id: int, epoch: int) -> tuple[TxnError, Txn | None]:
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return TxnError.INVALID_PRODUCER_ID_MAPPING, None
        if epoch < txn.producer_epoch:
            return TxnError.PRODUCER_FENCED, None
        if epoch > txn.producer_epoch:
            return TxnError.INVALID_PRODUCER_EPOCH, None
        if txn.state in _PREPARING:
            return TxnError.CONCURRENT_TRANSACTIONS, None
        return TxnError.NONE, txn

    # -- a transaction -------------------------------------------------------------------

    def add_logs(
        self,
        now: float,
        txn_id: str,
        producer_id: int,
        epoch: int,
        logs: set[int],
        groups: frozenset[str] = frozenset(),
    ) -> TxnError:
        """AddPartitionsToTxn (and AddOffsetsToTxn: a group, and its
        positions log): the transaction writes to ``logs`` and commits
        positions of ``groups``; the first one opens it (rule 2)."""
        code, txn = self._check(txn_id, producer_id, epoch)
        if txn is None:
            return code
        if txn.state in _DONE:
            txn.state, txn.started = State.ONGOING, now
            txn.logs, txn.groups = set(), set()
            self._wake(txn, now + txn.timeout_ms / 1000)
        txn.logs |= logs
        txn.groups |= groups
        return TxnError.NONE

    def end(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, tag: str = ""
    ) -> tuple[TxnError, Markers | None]:
        """EndTxn: decide the transaction (rules 2, 3 and 6); a commit keeps
        ``tag`` as the id's last commit's."""
        txn = self.txns.get(txn_id)
        if txn is not None and txn.producer_id == producer_id and epoch == txn.producer_epoch:
            done = State.COMPLETE_COMMIT if commit else State.COMPLETE_ABORT
            if txn.state == done:
                return TxnError.NONE, None  # a retry of what was done
        code, txn = self._check(txn_id, producer_id, epoch)
        if txn is None:
            return code, None
        if txn.state != State.ONGOING:
            return TxnError.INVALID_TXN_STATE, None
        if commit:
            txn.tag = tag
        return TxnError.NONE, self._decide(txn, commit)

    def abort_now(self, txn_id: str) -> tuple[TxnError, Markers | None]:
        """An operator's abort (``logstrand transactions abort``): the id's
        open transaction aborted at a new epoch, as a timeout would (rule
        5), so the producer that holds it is fenced.  A decided transaction
        is finishing already (CONCURRENT_TRANSACTIONS); none open is
        INVALID_TXN_STATE."""
        txn = self.txns.get(txn_id)
        if txn is None:
            return TxnError.INVALID_PRODUCER_ID_MAPPING, None
        if txn.state in _PREPARING:
            return TxnError.CONCURRENT_TRANSACTIONS, None
        if txn.state != State.ONGOING:
            return TxnError.INVALID_TXN_STATE, None
        return TxnError.NONE, self._abort(txn)

    def _decide(self, txn: Txn, commit: bool) -> Markers:
        txn.state = State.PREPARE_COMMIT if commit else State.PREPARE_ABORT
        return _markers(txn, commit)

    def _abort(self, txn: Txn) -> Markers:
        """Rules 4 and 5: abort the open transaction at a new epoch."""
        self._bump(txn)
        return self._decide(txn, commit=False)

    def markers_written(self, markers: Markers) -> None:
        """Rule 3: every marker of ``markers`` is in its log."""
        txn = self.txns.get(markers.transactional_id)
        if txn is None or txn.state not in _PREPARING or txn.producer_id != markers.producer_id:
            return
        txn.state = State.COMPLETE_COMMIT if markers.commit else State.COMPLETE_ABORT
        txn.logs, txn.groups, txn.started = set(), set(), None
        for log_id, seq in markers.seqs:
            txn.marks[log_id] = max(txn.marks.get(log_id, 0), seq + 1)

    def pending(self) -> list[Markers]:
        """The markers of every decided transaction not complete yet: what a
        coordinator that took the ids over writes first (rule 2)."""
        return [
            _markers(t, t.state == State.PREPARE_COMMIT)
            for t in self.txns.values()
            if t.state in _PREPARING
        ]

    # -- time ----------------------------------------------------------------------------

    def _wake(self, txn: Txn, at: float) -> None:
        heapq.heappush(self._deadlines, (at, next(self._seq), txn.transactional_id))

    def next_deadline(self) -> float | None:
        """The next time ``tick`` or ``expire`` has something to look at."""
        times = [q[0][0] for q in (self._deadlines, self._idle) if q]
        return min(times, default=None)

    def use(self, txn_id: str, now: float) -> None:
        """A request of the id came (rule 7's clock)."""
        txn = self.txns.get(txn_id)
        if txn is not None:
            self._note_use(txn, now)

    def _note_use(self, txn: Txn, now: float) -> None:
        first = txn.used is None
        txn.used = now
        if first:
            heapq.heappush(self._idle, (now + self.expiry_s, next(self._seq), txn.transactional_id))

    def expire(self, now: float) -> list[str]:
        """Rule 7: the ids idle for ``expiry_ms`` with no transaction open,
        forgotten here; the shell removes their state.  An id in use is
        looked at again when it could be idle long enough: one entry per
        id, so this costs what expires, not every id."""
        out: list[str] = []
        while self._idle and self._idle[0][0] <= now:
            _, _, txn_id = heapq.heappop(self._idle)
            txn = self.txns.get(txn_id)
            if txn is None:
                continue
            due = (txn.used or 0.0) + self.expiry_s
            if due > now or txn.state not in _DONE:
                heapq.heappush(self._idle, (max(due, now + 1.0), next(self._seq), txn_id))
                continue
            del self.txns[txn_id]
            out.append(txn_id)
        return out

    def tick(self, now: float) -> list[Markers]:
        """Rule 5: abort the transactions whose time ran out."""
        out: list[Markers] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, txn_id = heapq.heappop(self._deadlines)
            txn = self.txns.get(txn_id)
            if txn is None or txn.state != State.ONGOING or txn.started is None:
                continue
            if txn.started + txn.timeout_ms / 1000 <= now:
                out.append(self._abort(txn))
        return out

    # -- written down and read back --------------------------------------------------------

    def restore(self, now: float, doc: dict[str, Any]) -> None:
        """A transactional id's state as written down (``Txn.to_json``); an
        open transaction's clock starts again at ``now``."""
        txn = Txn.from_json(doc)
        self.txns[txn.transactional_id] = txn
        self._note_use(txn, now)
        if txn.state == State.ONGOING:
            txn.started = now
            self._wake(txn, now + txn.timeout_ms / 1000)

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop every transactional id but those ``keep`` says (the ids of
        logs this coordinator no longer holds, or whose state it must read
        again after a write failed)."""
        self.txns = {k: t for k, t in self.txns.items() if keep(k)}


def _markers(txn: Txn, commit: bool) -> Markers:
    return Markers(
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        commit,
        frozenset(txn.logs),
        frozenset(txn.groups),
        tuple((log_id, txn.marks.get(log_id, 0)) for log_id in sorted(txn.logs)),
    )
