"""The epoch store contract, and the logic both stores share.

Theory of operation
-------------------
Everything but membership is kept as a few JSON documents, each with a
version number:

    nodes           {node_id: NodeConfig}
    logs            [LogRange, ...]
    epochs/<log>    LogEpochs (next epoch, placement history)
    lce/<log>       last clean epoch
    producers/<log> idempotent producers up to an epoch (``_producers``)
    security        users (token hashes) and grants (``_security``)
    rebuilding      nodes rebuilt or drained, and the run (``_rebuilding``)

Every change is a read-modify-write closed by a compare-and-set on the
version (``_cas``): two writers racing on one document never both succeed,
and the loser re-reads and tries again.  That is what makes ``take_epoch``
hand out each epoch exactly once, in increasing order, across processes and
machines.  A backend only has to provide versioned get, compare-and-set and
membership; ZooKeeper gives versioned znodes and ephemeral nodes, SQLite a
``kv`` table with a version column and a lease table.
"""

from __future__ import annotations

import abc
import json
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import (
    ExistsError,
    InvalidArgumentError,
    NotFoundError,
    StaleError,
    TransientError,
)
from ..idempotence._docs import ProducerDocs
from ..records import EPOCH_MAX, check_log_id
from ._log_docs import LogDocs
from ._model import EpochMetadata, LogAttributes, LogEpochs, LogRange, NodeConfig
from ._name_docs import NameDocs
from ._rebuilding import RebuildingDocs
from ._security import SecurityDocs
from ._tier_docs import TierDocs

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._members import Members, MemberSession, Watch

#: A read-modify-write gives up (AGAIN) after this many lost races in a row.
CAS_ATTEMPTS_MAX = 10_000


@attrs.frozen
class Placement:
    """The nodeset and replication a sequencer asks for with a new epoch."""

    nodeset: tuple[int, ...]
    replication_factor: int
    replicate_across: str = "node"


class EpochStore(LogDocs, NameDocs, SecurityDocs, RebuildingDocs, ProducerDocs, TierDocs, abc.ABC):
    """Per-log epochs, the cluster configuration and membership.

    Every method is blocking and thread-safe; trio code calls them through
    ``AsyncEpochStore`` (worker threads).  Any method may raise
    ``EpochStoreUnavailableError`` when the store cannot be reached.
    """

    url: str
    cluster: str

    # -- backend primitives -------------------------------------------------

    @abc.abstractmethod
    def _get(self, path: str) -> tuple[bytes, int] | None:
        """The document at ``path`` and its version, or None."""

    def read_calls(self, fns: list[Callable[[EpochStore], Any]]) -> list[tuple[bool, Any]]:
        """``calls`` of functions that only read: a backend may run them
        without the write lock (SQLite: one read transaction, a WAL reader)."""
        return self.calls(fns)

    def calls(self, fns: list[Callable[[EpochStore], Any]]) -> list[tuple[bool, Any]]:
        """Run ``fns`` one after another: for each, (True, its result) or
        (False, the exception it raised); one failing does not stop the
        others.  A backend may make them one durable write (SQLite: one
        transaction, so a burst of activations pays one fsync, not one each);
        if that write fails, every one of them gets its error, results and
        all: nothing it decided is used unless it is stored."""
        out: list[tuple[bool, Any]] = []
        for fn in fns:
            try:
                out.append((True, fn(self)))
            except Exception as exc:
                out.append((False, exc))
        return out

    def _get_many(self, paths: list[str]) -> dict[str, bytes]:
        """The documents that exist among ``paths`` (a backend may read them
        in fewer round trips than one each)."""
        out = {}
        for path in paths:
            got = self._get(path)
            if got is not None:
                out[path] = got[0]
        return out

    @abc.abstractmethod
    def _cas(self, path: str, value: bytes, version: int | None) -> bool:
        """Write ``value`` if the version is still ``version`` (None: create only if absent).

        Returns False when another writer got there first.
        """

    @abc.abstractmethod
    def register_member(
        self, node_id: int, *, wait_s: float = 30.0, sequencer: bool = True, why: str = ""
    ) -> MemberSession:
        """Announce that ``node_id`` is alive, until the session is closed or lost.

        Waits up to ``wait_s`` for a previous session of the same node (a
        process that died) to expire.  ``sequencer``, ``why``: what the node
        says of itself at first (``MemberSession.publish``).

        Raises:
            ExistsError: another live session holds ``node_id``.
        """

    @abc.abstractmethod
    def members(self) -> Members:
        """The members with a live session now: their clocks and what they say."""

    def alive_nodes(self) -> frozenset[int]:
        """The node ids with a live membership session now."""
        return frozenset(self.members())

    @abc.abstractmethod
    def watch_members(self, callback: Callable[[Members], None]) -> Watch:
        """Call ``callback(members)`` now and on every change of who is a
        member or of what one says (a clock moving by less than a second is
        no change), from another thread."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> EpochStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- shared logic -------------------------------------------------------

    def _doc(self, path: str) -> Any:
        got = self._get(path)
        return None if got is None else json.loads(got[0])

    def _update(self, path: str, change: Callable[[Any], Any]) -> Any:
        """Read-modify-write of one document, retried until its CAS wins."""
        for _ in range(CAS_ATTEMPTS_MAX):
            got = self._get(path)
            old = None if got is None else json.loads(got[0])
            new = change(old)
            body = json.dumps(new, sort_keys=True).encode()
            if self._cas(path, body, None if got is None else got[1]):
                return new
        raise TransientError(f"lost {CAS_ATTEMPTS_MAX} races in a row on {path}")

    # epochs

    def take_epoch(
        self, log_id: int, placement: Placement | None = None, *, expect_next: int | None = None
    ) -> tuple[int, EpochMetadata]:
        """Take the log's next epoch; no other caller, anywhere, ever gets the same one.

        ``placement`` is recorded as the nodeset of this epoch on if it differs
        from the current one; it is required for a log's first epoch.  With
        ``expect_next``, the call only succeeds if the next epoch is still that
        one (a sequencer that finds it taken was preempted).

        Returns the epoch and the placement in force for it.

        Raises:
            StaleError: ``expect_next`` no longer holds.
            InvalidArgumentError: no placement for a log's first epoch; epochs exhausted.
        """
        _check_log(log_id)
        result: list[Any] = []

        def change(doc: Any) -> Any:
            state = LogEpochs() if doc is None else LogEpochs.from_json(doc)
            epoch = state.next_epoch
            if expect_next is not None and epoch != expect_next:
                raise StaleError(f"log {log_id}: next epoch is {epoch}, not {expect_next}")
            if epoch >= EPOCH_MAX:
                raise InvalidArgumentError(f"log {log_id} has used every epoch")
            history = state.history
            cur = state.current
            if placement is not None and (
                cur is None
                or (cur.nodeset, cur.replication_factor, cur.replicate_across)
                != (placement.nodeset, placement.replication_factor, placement.replicate_across)
            ):
                meta = EpochMetadata(
                    epoch,
                    tuple(placement.nodeset),
                    placement.replication_factor,
                    placement.replicate_across,
                )
                history = (*history, meta)
            elif cur is None:
                raise InvalidArgumentError(f"log {log_id}: the first epoch needs a placement")
            result[:] = [epoch, history[-1]]
            return LogEpochs(epoch + 1, history).to_json()

        self._update(f"epochs/{log_id}", change)
        return result[0], result[1]

    def log_epochs(self, log_id: int) -> LogEpochs:
        """The next epoch and placement history of a log (empty for a new log)."""
        _check_log(log_id)
        doc = self._doc(f"epochs/{log_id}")
        return LogEpochs() if doc is None else LogEpochs.from_json(doc)

    def log_epochs_many(self, log_ids: list[int]) -> dict[int, LogEpochs]:
        """``log_epochs`` of many logs, in as few round trips as the backend can."""
        for log in log_ids:
            _check_log(log)
        docs = self._get_many([f"epochs/{log}" for log in log_ids])
        return {
            log: LogEpochs.from_json(json.loads(doc))
            if (doc := docs.get(f"epochs/{log}")) is not None
            else LogEpochs()
            for log in log_ids
        }

    def set_epoch_start(self, log_id: int, epoch: int, timestamp_ms: int) -> None:
        """Record the timestamp an epoch's sequencer stamps from: recovery of an
        earlier epoch stamps nothing above it (entries at or below the last
        clean epoch, no longer needed, are dropped)."""
        _check_log(log_id)
        lce = self.last_clean_epoch(log_id)

        def change(doc: Any) -> Any:
            starts = {k: v for k, v in (doc or {}).items() if int(k) > lce}
            starts[str(epoch)] = int(timestamp_ms)
            return starts

        self._update(f"epoch_starts/{log_id}", change)

    def epoch_starts(self, log_id: int) -> dict[int, int]:
        """Epoch -> the timestamp its sequencer started from (``set_epoch_start``)."""
        _check_log(log_id)
        doc = self._doc(f"epoch_starts/{log_id}")
        return {} if doc is None else {int(k): int(v) for k, v in doc.items()}

    def last_clean_epoch(self, log_id: int) -> int:
        _check_log(log_id)
        doc = self._doc(f"lce/{log_id}")
        return 0 if doc is None else int(doc["lce"])

    def set_last_clean_epoch(self, log_id: int, epoch: int) -> int:
        """Move the last clean epoch forward to ``epoch`` (the same value again is a no-op).

        Raises:
            StaleError: ``epoch`` is below the current last clean epoch.
            InvalidArgumentError: ``epoch`` was never handed out.
        """
        _check_log(log_id)
        if epoch >= self.log_epochs(log_id).next_epoch:
            raise InvalidArgumentError(f"log {log_id}: epoch {epoch} was never handed out")

        def change(doc: Any) -> Any:
            cur = 0 if doc is None else int(doc["lce"])
            if epoch < cur:
                raise StaleError(f"log {log_id}: last clean epoch is {cur}, cannot go to {epoch}")
            return {"lce": epoch}

        return int(self._update(f"lce/{log_id}", change)["lce"])

    # nodes

    def nodes(self) -> dict[int, NodeConfig]:
        doc = self._doc("nodes") or {}
        return {int(k): NodeConfig.from_json(v) for k, v in doc.items()}

    def node(self, node_id: int) -> NodeConfig:
        found = self.nodes().get(node_id)
        if found is None:
            raise NotFoundError(f"node {node_id} is not in the configuration")
        return found

    def add_node(self, config: NodeConfig) -> None:
        """Raises: ExistsError when the id or the address is taken."""

        def change(doc: Any) -> Any:
            doc = dict(doc or {})
            if str(config.node_id) in doc:
                raise ExistsError(f"node {config.node_id} already exists")
            if any(v["address"] == config.address for v in doc.values()):
                raise ExistsError(f"address {config.address} is already used by another node")
            doc[str(config.node_id)] = config.to_json()
            return doc

        self._update("nodes", change)

    def update_node(self, config: NodeConfig) -> None:
        def change(doc: Any) -> Any:
            doc = dict(doc or {})
            if str(config.node_id) not in doc:
                raise NotFoundError(f"node {config.node_id} is not in the configuration")
            doc[str(config.node_id)] = config.to_json()
            return doc

        self._update("nodes", change)

    def remove_node(self, node_id: int) -> None:
        def change(doc: Any) -> Any:
            doc = dict(doc or {})
            if doc.pop(str(node_id), None) is None:
                raise NotFoundError(f"node {node_id} is not in the configuration")
            return doc

        self._update("nodes", change)

    # logs

    def log_ranges(self) -> list[LogRange]:
        return [LogRange.from_json(d) for d in self._doc("logs") or []]

    def log_range(self, log_id: int) -> LogRange:
        for r in self.log_ranges():
            if log_id in r:
                return r
        raise NotFoundError(f"log {log_id} is not in the configuration")

    def log_range_named(self, name: str) -> LogRange:
        """Raises: NotFoundError when no range has that name."""
        for r in self.log_ranges():
            if r.name == name:
                return r
        raise NotFoundError(f"no log range is named {name!r}")

    def log_attributes(self, log_id: int) -> LogAttributes:
        """Raises: NotFoundError for a log in no range."""
        return self.log_range(log_id).attributes

    def _check_placeable(self, attributes: LogAttributes) -> None:
        storage = [n for n in self.nodes().values() if "storage" in n.roles]
        domains = {n.domain(attributes.replicate_across) for n in storage}
        if attributes.replication_factor > len(domains):
            where = (
                f"{len(storage)} storage nodes"
                if attributes.replicate_across == "node"
                else f"{len(domains)} {attributes.replicate_across}s"
            )
            raise InvalidArgumentError(
                f"replication factor {attributes.replication_factor} is larger than the cluster "
                f"({where})"
            )

    def create_logs(
        self, first: int, last: int, attributes: LogAttributes, *, name: str | None = None
    ) -> LogRange:
        """Raises: ExistsError (overlap, a name taken), InvalidArgumentError
        (bad range or name, R too large)."""
        new = LogRange(first, last, attributes, name)
        self._check_placeable(attributes)

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            for r in ranges:
                if r.overlaps(new):
                    raise ExistsError(
                        f"logs {first}..{last} overlap the existing range {r.first}..{r.last}"
                    )
                _check_name_free(r, name)
            ranges.append(new)
            ranges.sort(key=lambda r: r.first)
            return [r.to_json() for r in ranges]

        self._update("logs", change)
        return new

    def update_logs(self, first: int, last: int, **changes: Any) -> LogRange:
        """Change attributes of the existing range ``first..last``.

        Raises:
            NotFoundError: no range is exactly ``first..last``.
            InvalidArgumentError: an unknown attribute or a bad value.
        """
        result: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            for i, r in enumerate(ranges):
                if (r.first, r.last) == (first, last):
                    merged = {**r.attributes.to_json(), **changes}
                    attrs_new = LogAttributes.from_json(merged)
                    self._check_placeable(attrs_new)
                    ranges[i] = LogRange(first, last, attrs_new, r.name)
                    result[:] = [ranges[i]]
                    return [x.to_json() for x in ranges]
            raise NotFoundError(f"no log range {first}..{last}")

        self._update("logs", change)
        return result[0]

    def name_logs(self, first: int, last: int, name: str | None) -> LogRange:
        """Name the existing range ``first..last`` (None: take its name away).

        Raises:
            NotFoundError: no range is exactly ``first..last``.
            ExistsError: another range has that name.
        """
        result: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            for i, r in enumerate(ranges):
                if (r.first, r.last) == (first, last):
                    for other in ranges:
                        if other is not r:
                            _check_name_free(other, name)
                    ranges[i] = result_range = LogRange(first, last, r.attributes, name)
                    result[:] = [result_range]
                    return [x.to_json() for x in ranges]
            raise NotFoundError(f"no log range {first}..{last}")

        self._update("logs", change)
        return result[0]

    def remove_logs(self, first: int, last: int) -> None:
        """Remove the range ``first..last``.  Epoch state stays: epochs never go back.

        Raises:
            NotFoundError: no range is exactly ``first..last``.
        """

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            kept = [r for r in ranges if (r.first, r.last) != (first, last)]
            if len(kept) == len(ranges):
                raise NotFoundError(f"no log range {first}..{last}")
            return [r.to_json() for r in kept]

        self._update("logs", change)


def _check_name_free(existing: LogRange, name: str | None) -> None:
    if name is not None and existing.name == name:
        raise ExistsError(f"logs {existing.first}..{existing.last} are already named {name!r}")


def _check_log(log_id: int) -> None:
    check_log_id(log_id, internal=True)
