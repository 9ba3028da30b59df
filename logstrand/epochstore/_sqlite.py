"""The embedded epoch store: one SQLite file, safe for many processes on one machine.

Documents live in ``kv(path, value, version)``; a compare-and-set is one
``UPDATE ... WHERE version = ?`` (or ``INSERT OR IGNORE`` to create), atomic
under SQLite's write lock.  WAL mode lets readers go on while one writes, and
``synchronous=FULL`` makes every handed-out epoch durable before it is used.

Membership is a lease table: a registered node renews its row every third of
the lease from a background thread; a node whose process died stops renewing
and drops out when its lease runs out.  Leases run on one clock, the
machine's monotonic clock, which every process on the machine shares (the
store is for one machine), and which no process's wrong wall clock moves;
a row written before the machine restarted (another boot id) is no lease.
Each renewal also records the node's wall clock against that monotonic
clock, so that clocks can be compared (``_members``).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EpochStoreUnavailableError, ExistsError
from ._base import EpochStore
from ._members import Member, Members, MemberSession, Watch, cluster_offsets
from ._model import check_cluster_name
from ._watch import PollingWatch

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterator

LEASE_S_DEFAULT = 1.5
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    path TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS membership (
    node_id INTEGER PRIMARY KEY, session TEXT NOT NULL, boot TEXT NOT NULL,
    since REAL NOT NULL, expires REAL NOT NULL, clock_ms INTEGER NOT NULL,
    sequencer INTEGER NOT NULL, why TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@functools.cache
def boot_id() -> str:
    """This boot of the machine: the monotonic clock starts again at each."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _clocks() -> tuple[float, int]:
    """The machine's monotonic clock (s), and this process's wall clock
    minus it (ms), read together."""
    mono = time.monotonic()
    return mono, int(time.time() * 1000) - int(mono * 1000)


_TAKE = (
    "INSERT INTO membership VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(node_id) DO UPDATE "
    "SET session = excluded.session, boot = excluded.boot, since = excluded.since, "
    "expires = excluded.expires, clock_ms = excluded.clock_ms, "
    "sequencer = excluded.sequencer, why = excluded.why "
    "WHERE membership.boot != excluded.boot OR membership.expires <= ?"
)


class _SqliteMember(MemberSession):
    def __init__(
        self, store: SqliteEpochStore, node_id: int, session: str, sequencer: bool, why: str
    ) -> None:
        self.node_id = node_id
        self._store = store
        self._session = session
        self._sequencer = sequencer
        self._why = why
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{node_id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        store = self._store
        with store._tx() as db:
            mono, clock_ms = _clocks()
            cur = db.execute(
                "UPDATE membership SET expires = ?, clock_ms = ?, sequencer = ?, why = ? "
                "WHERE node_id = ? AND session = ?",
                (
                    mono + store.lease_s,
                    clock_ms,
                    int(self._sequencer),
                    self._why,
                    self.node_id,
                    self._session,
                ),
            )
            if cur.rowcount == 0:
                # Our lease ran out (a long pause): take it back if free.
                taken = db.execute(
                    _TAKE,
                    (
                        self.node_id,
                        self._session,
                        boot_id(),
                        mono,
                        mono + store.lease_s,
                        clock_ms,
                        int(self._sequencer),
                        self._why,
                        mono,
                    ),
                )
                if taken.rowcount == 1:
                    self.returns += 1

    def _renew(self) -> None:
        every_s = self._store.lease_s / 3
        while not self._stop.wait(every_s):
            try:
                self._beat()
            except EpochStoreUnavailableError:
                continue  # try again at the next beat

    def publish(self, *, sequencer: bool, why: str = "") -> None:
        self._sequencer, self._why = sequencer, why
        self._beat()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            with self._store._tx() as db:
                db.execute(
                    "DELETE FROM membership WHERE node_id = ? AND session = ?",
                    (self.node_id, self._session),
                )
        except EpochStoreUnavailableError:
            pass  # the lease runs out by itself


class SqliteEpochStore(EpochStore):
    """Epoch store in one SQLite file (the embedded default)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cluster: str | None = None,
        lease_s: float = LEASE_S_DEFAULT,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self.path = Path(path)
        self.url = f"sqlite://{self.path}"
        self.lease_s = lease_s
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        #: The thread running ``calls`` (its transaction is open).
        self._owner: int | None = None
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                self.path,
                timeout=busy_timeout_s,
                isolation_level=None,  # we BEGIN ourselves
                check_same_thread=False,
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            with self._tx() as db:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                row = db.execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()
                if row is None:
                    name = check_cluster_name(cluster or self.path.stem)
                    db.execute("INSERT INTO meta VALUES ('cluster', ?)", (name,))
                else:
                    name = row[0]
        except sqlite3.Error as exc:
            raise EpochStoreUnavailableError(f"cannot open epoch store {self.path}: {exc}") from exc
        self.cluster = name

    def read_calls(self, fns: list[Callable[[EpochStore], Any]]) -> list[tuple[bool, Any]]:
        # A deferred transaction that only reads is a WAL reader: one
        # snapshot for them all, no write lock taken or waited for, and
        # nothing to make durable.  (The guards' epoch checks of a burst of
        # new logs took the write lock the activations' own groups need.)
        return self.calls(fns, begin="BEGIN")

    def calls(
        self, fns: list[Callable[[EpochStore], Any]], begin: str = "BEGIN IMMEDIATE"
    ) -> list[tuple[bool, Any]]:
        # One IMMEDIATE transaction around them all: the reads and CAS writes
        # inside run on it (``_mine``), and one COMMIT makes them durable.
        with self._lock:
            if self._closed:
                raise EpochStoreUnavailableError("epoch store is closed")
            try:
                self._begin(begin)
            except sqlite3.OperationalError as exc:
                error = EpochStoreUnavailableError(f"epoch store {self.path}: {exc}")
                return [(False, error)] * len(fns)
            self._owner = threading.get_ident()
            try:
                out = [self._one_call(fn) for fn in fns]
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                error = EpochStoreUnavailableError(f"epoch store {self.path}: {exc}")
                return [(False, error)] * len(fns)
            finally:
                self._owner = None
            return out

    def _begin(self, begin: str = "BEGIN IMMEDIATE") -> None:
        """BEGIN IMMEDIATE, waiting for another process's write to end in
        steps of 0.2 to 5 ms.  (SQLite's own busy handler sleeps 1, 2, 5, 10,
        15, 20, 25 ms...: three nodes writing at once waited 20-30 ms per
        transaction for locks held under a millisecond.)"""
        db = self._db
        db.execute("PRAGMA busy_timeout = 0")
        try:
            deadline = time.monotonic() + self._busy_timeout_s
            pause = 0.0002
            while True:
                try:
                    db.execute(begin)
                    return
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() >= deadline:
                        raise
                time.sleep(pause)
                pause = min(pause * 2, 0.005)
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")

    def _one_call(self, fn: Callable[[EpochStore], Any]) -> tuple[bool, Any]:
        """One of ``calls``: all of it or, when it raises, none of its writes."""
        self._db.execute("SAVEPOINT call")
        try:
            value = fn(self)
        except Exception as exc:
            self._db.execute("ROLLBACK TO call")
            self._db.execute("RELEASE call")
            return False, exc
        self._db.execute("RELEASE call")
        return True, value

    def _mine(self) -> bool:
        """This thread runs ``calls``: it holds the lock and the transaction."""
        return self._owner == threading.get_ident()

    def _locked(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext() if self._mine() else self._lock

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: it takes the write lock at once, so a
        read-modify-write inside it cannot interleave with another process."""
        if self._mine():  # inside ``calls``: a savepoint of its transaction
            self._db.execute("SAVEPOINT one")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK TO one")
                self._db.execute("RELEASE one")
                raise
            self._db.execute("RELEASE one")
            return
        with self._lock:
            if self._closed:
                raise EpochStoreUnavailableError("epoch store is closed")
            try:
                self._begin()
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                raise EpochStoreUnavailableError(f"epoch store {self.path}: {exc}") from exc

    def _get_many(self, paths: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for lo in range(0, len(paths), 500):  # SQLite's bound on parameters
            chunk = paths[lo : lo + 500]
            marks = ",".join("?" * len(chunk))
            with self._locked():
                if self._closed:
                    raise EpochStoreUnavailableError("epoch store is closed")
                try:
                    rows = self._db.execute(
                        f"SELECT path, value FROM kv WHERE path IN ({marks})",
                        chunk,
                    ).fetchall()
                except sqlite3.OperationalError as exc:
                    raise EpochStoreUnavailableError(f"epoch store {self.path}: {exc}") from exc
            out.update((str(p), bytes(v)) for p, v in rows)
        return out

    def _get(self, path: str) -> tuple[bytes, int] | None:
        with self._locked():
            if self._closed:
                raise EpochStoreUnavailableError("epoch store is closed")
            try:
                row = self._db.execute(
                    "SELECT value, version FROM kv WHERE path = ?", (path,)
                ).fetchone()
            except sqlite3.OperationalError as exc:
                raise EpochStoreUnavailableError(f"epoch store {self.path}: {exc}") from exc
        return None if row is None else (bytes(row[0]), int(row[1]))

    def _cas(self, path: str, value: bytes, version: int | None) -> bool:
        with self._tx() as db:
            if version is None:
                cur = db.execute("INSERT OR IGNORE INTO kv VALUES (?, ?, 0)", (path, value))
            else:
                cur = db.execute(
                    "UPDATE kv SET value = ?, version = version + 1 WHERE path = ? AND version = ?",
                    (value, path, version),
                )
            return cur.rowcount == 1

    def register_member(
        self, node_id: int, *, wait_s: float = 30.0, sequencer: bool = True, why: str = ""
    ) -> MemberSession:
        session = uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        while True:
            with self._tx() as db:
                mono, clock_ms = _clocks()
                cur = db.execute(
                    _TAKE,
                    (
                        node_id,
                        session,
                        boot_id(),
                        mono,
                        mono + self.lease_s,
                        clock_ms,
                        int(sequencer),
                        why,
                        mono,
                    ),
                )
                if cur.rowcount == 1:
                    return _SqliteMember(self, node_id, session, sequencer, why)
            if time.monotonic() >= deadline:
                raise ExistsError(f"node {node_id} is registered by another live process")
            time.sleep(min(0.1, self.lease_s / 10))

    def members(self) -> Members:
        with self._locked():
            if self._closed:
                raise EpochStoreUnavailableError("epoch store is closed")
            try:
                rows = self._db.execute(
                    "SELECT node_id, since, clock_ms, sequencer, why FROM membership "
                    "WHERE boot = ? AND expires > ?",
                    (boot_id(), time.monotonic()),
                ).fetchall()
            except sqlite3.OperationalError as exc:
                raise EpochStoreUnavailableError(f"epoch store {self.path}: {exc}") from exc
        # The monotonic clock has no date: the median of the members' clocks
        # is the cluster's (``_members``).
        offsets = cluster_offsets({int(r[0]): int(r[2]) for r in rows}, anchored=False)
        return {
            int(n): Member(int(n), offsets[int(n)], bool(seq), str(why), int(since * 1000))
            for n, since, _, seq, why in rows
        }

    def watch_members(
        self, callback: Callable[[Members], None], *, interval_s: float = 0.2
    ) -> Watch:
        return Watch(PollingWatch(self.members, callback, interval_s).cancel)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()
