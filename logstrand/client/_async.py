"""The trio client: one facade over the client's parts.

* ``AppendApi`` (``_append_api.py``) over ``Appender`` (``_appender.py``):
  appends, coalesced, routed and retried;
* ``Admin`` (``_admin.py``): questions to the epoch store and to the nodes;
* ``ReadStream`` (``_reader.py``, over the pure ``ReaderCore``): readers;
* ``Links`` and ``ClusterView`` (``logstrand.rpc``): one connection per node,
  and the cluster's configuration and membership.

``open_client(url)`` makes one; ``logstrand.connect(url)`` wraps it for
threaded code.
"""

from __future__ import annotations

import contextlib
import os
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack

import trio

from ..epochstore import open_epoch_store
from ..errors import InvalidArgumentError, collapse
from ..positions._client import Groups
from ..rpc import ClusterView, Links
from ..security import Credentials, credentials_from_env
from ..types import LSN_OLDEST, TAIL, _Tail
from ._admin import Admin
from ._append_api import AppendApi
from ._appender import Appender
from ._committed import CommittedStream
from ._groups_api import GroupsApi
from ._many import ManyReader
from ._names import Names
from ._nodewatch import NodeWatch
from ._options import ISOLATIONS, ConnectOptions, ManyOptions, ReadOptions, SubscribeOptions
from ._reader import ReadStream
from ._rebalance import RebalanceReport, rebalance
from ._settings import ClientSettings
from ._subscribe import Subscription
from ._tails import tail_lsns
from ._txn_api import TxnApi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence

    from ..epochstore import EpochEnd, LogAttributes
    from ..wire import LogInfoReply, NodeStatus, SeqState
    from ._admin import LogPlacement
    from ._transaction import TxnProducer
    from ._views import LogSegment


class AsyncClient(AppendApi, GroupsApi, TxnApi):
    """A logstrand client for trio code.  Make one with ``open_client(url)``."""

    def __init__(
        self,
        view: ClusterView,
        nursery: trio.Nursery,
        settings: ClientSettings,
        credentials: Credentials | None = None,
    ) -> None:
        self.view = view
        self.nursery = nursery
        self.settings = settings
        self.cluster = view.cluster
        self.credentials = credentials
        self.links = Links(view, nursery, credentials=credentials)
        self._appender = Appender(
            view, self.links, nursery, settings, NodeWatch(view, self.links, nursery)
        )
        self._admin = Admin(view, self.links)
        self.names = Names(view)
        self._txn_producers: dict[str, TxnProducer] = {}
        self._groups = Groups(
            self._admin,
            self._appender,
            lambda log, start, until: ReadStream(self._admin, self.links, log, start, until),
        )

    # -- reads ----------------------------------------------------------------

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ReadOptions],
    ) -> ReadStream:
        """Read a log in LSN order: an async iterator of ``Record`` and ``Gap``.

        ``until``: an LSN (included), ``TAIL`` (the tail when reading starts)
        or None (follow the log forever).  Use it as a context manager so the
        node streams stop when you are done::

            async with client.read(log) as reader:
                async for item in reader:
                    ...

        ``options``: ``single_copy``, ``show_compacted``, ``group``,
        ``autocommit``, ``access_gaps``, ``isolation``, as ``ReadOptions``
        says (every face's reads take the same).

        Raises:
            InvalidArgumentError: ``start`` together with ``group``, or
                ``autocommit`` without one, or an unknown ``isolation``, or
                an unknown option.
            AccessDeniedError: (while iterating) the user may not read the
                log; with ``access_gaps`` an ACCESS gap over the range instead.
        """
        _check_options("read", options, ReadOptions)
        group = options.get("group")
        autocommit = options.get("autocommit", False)
        cursor = None
        if group is not None:
            if start != LSN_OLDEST:
                raise InvalidArgumentError("read from a start LSN or a group's position, not both")
            cursor = self._groups.cursor(
                group,
                log_id,
                autocommit=autocommit,
                interval_s=self.settings.autocommit_interval_s,
            )
        elif autocommit:
            raise InvalidArgumentError("autocommit needs a group")
        isolation = options.get("isolation", "uncommitted")
        _check_isolation(isolation)
        kind = CommittedStream if isolation == "committed" else ReadStream
        return kind(
            self._admin,
            self.links,
            log_id,
            start,
            until,
            single_copy=options.get("single_copy", True),
            show_compacted=options.get("show_compacted", False),
            cursor=cursor,
            access_gaps=options.get("access_gaps", False),
        )

    def read_many(
        self,
        starts: dict[int, int] | str,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ManyOptions],
    ) -> ManyReader:
        """Read many logs at once (a consumer of many partitions): an async
        iterator of ``(log, item)`` pairs as records arrive, each log in LSN
        order; ``starts`` maps each log to the LSN to start at (or names a
        range: all its logs from the oldest), ``until`` is as for ``read``,
        for all of them.  One loop drives every log (no task per log), the
        nodes' windows share ``settings.read_buffer_bytes``, and one client
        can follow tens of thousands of logs (up to the nodes'
        ``--read-streams-per-connection``, 16,384 by default)::

            async with client.read_many(dict.fromkeys(logs, LSN_OLDEST), None) as reader:
                async for log, item in reader:
                    ...

        Leaving the loop early is safe; closing stops the nodes' streams.
        ``options``: ``isolation``, as ``ManyOptions`` says.

        Raises (while iterating): NotFoundError (a log or name that does not
        exist), AccessDeniedError, LogstrandError(OVERLOADED): a node takes no
        more read streams from this client.
        """
        _check_options("read_many", options, ManyOptions)
        isolation = options.get("isolation", "uncommitted")
        _check_isolation(isolation)
        return ManyReader(
            self._admin,
            self.links,
            {} if isinstance(starts, str) else dict(starts),
            until,
            self.settings.read_buffer_bytes,
            self.tail_lsns,
            resolve=partial(self.names.starts, starts) if isinstance(starts, str) else None,
            isolation=isolation,
        )

    # -- consumer groups ----------------------------------------------------------

    def subscribe(
        self,
        group: str,
        logs: list[int] | tuple[int, ...] | range | str,
        **options: Unpack[SubscribeOptions],
    ) -> Subscription:
        """Join ``group`` as a member and read the logs it gives this member:
        an async iterator of ``(log, item)`` pairs, each log in LSN order.
        ``logs`` (ids, or a range's name) is the subscription; every member
        of a group subscribes to the same logs, and the group's coordinator
        spreads them over its members, moving them when one joins, leaves or
        is silent for a session (docs/groups.md)::

            async with client.subscribe("billing", "orders") as sub:
                async for log, item in sub:
                    ...

        A log given is read from after the group's committed position.  What
        was handed out counts as processed once the next pair is asked for.
        ``options``: ``autocommit``, ``instance_id``, ``isolation``, as
        ``SubscribeOptions`` says.

        Raises (while iterating): InvalidArgumentError (no logs, or other
        logs than the group's members read), AccessDeniedError (no read grant
        on a log or on the group's positions log), NotSupportedError (the
        coordinator's node is of a version without groups).
        """
        _check_options("subscribe", options, SubscribeOptions)
        return Subscription(
            self,
            group,
            logs,
            autocommit=options.get("autocommit", True),
            instance_id=options.get("instance_id"),
            interval_s=self.settings.autocommit_interval_s,
            isolation=options.get("isolation", "uncommitted"),
        )

    @property
    def groups(self) -> Groups:
        """The positions part (docs/groups.md), for the Kafka front's coordinator."""
        return self._groups

    # -- the log ----------------------------------------------------------------

    async def log_attributes(self, log_id: int) -> LogAttributes:
        """The log's attributes: replication, retention, cleanup policy, ...

        Raises:
            NotFoundError: the log does not exist.
        """
        return await self._admin.log_attributes(log_id)

    async def placement(self, log_id: int) -> LogPlacement:
        """Every node that holds or may hold the log's copies, and its replication."""
        return await self._admin.placement(log_id)

    def sequencer_node(self, log_id: int) -> int | None:
        """The live node that runs the log's sequencer, as this client sees it."""
        return self.view.sequencer_node(log_id)

    async def tail_lsn(self, log_id: int) -> int:
        """An LSN at or above every acknowledged and released append (0: none yet).

        Makes sure the log has a sequencer first (as LogDevice's GET_SEQ_STATE
        does): a newly activated one brings the nodes' release pointers up to date.
        """
        return await self._admin.tail_lsn(log_id)

    async def tail_lsns(self, log_ids: Sequence[int]) -> dict[int, int]:
        """``tail_lsn`` of many logs at once: ``{log: tail}``, in one round
        of requests per node for up to 4,096 logs (``_tails``); a log whose
        sequencer is not running and whose nodes hold unreleased copies is
        asked alone, as ``tail_lsn`` asks.

        Raises:
            NotFoundError: a log does not exist.
        """
        return await tail_lsns(self._admin, log_ids)

    async def rebalance(
        self,
        log_ids: Sequence[int],
        *,
        step: int = 100,
        dry_run: bool = False,
        timeout_s: float = 30.0,
        on_step: Callable[[RebalanceReport], None] | None = None,
    ) -> RebalanceReport:
        """Move the logs whose latest nodeset is not the one they would get
        among the storage nodes there are now (after nodes were added) to a
        new epoch, ``step`` logs at a time (``_rebalance``).  Logs with no
        sequencer running move at their next activation anyway.  Copies
        already written stay; readers follow the placement history.

        Raises:
            InvalidArgumentError: ``step`` out of 1..4096.
            NotFoundError: a log does not exist.
            LogstrandError: a node does not speak protocol 5, or the user
                may not ``admin`` one of the logs.
        """
        return await rebalance(
            self._admin, log_ids, step=step, dry_run=dry_run, timeout_s=timeout_s, on_step=on_step
        )

    async def ensure_sequencer(self, log_id: int) -> int:
        """Have the log's owner node activate its sequencer, if none runs.

        Returns the sequencer's acknowledged tail (0 if it did not answer).
        """
        return await self._admin.ensure_sequencer(log_id)

    async def sequencer_state(self, log_id: int) -> SeqState | None:
        """The log's sequencer as its node sees it (activating one if none
        runs): tail, epoch, and how the recovery of earlier epochs stands.
        None when no node answered.
        """
        return await self._admin.sequencer_state(log_id)

    async def trim_point(self, log_id: int) -> int:
        """The log's trim point: records at or below it are gone (0: never trimmed)."""
        return max(r.trim_point for r in await self._admin.log_info(log_id))

    async def trim(self, log_id: int, lsn: int) -> int:
        """Trim the log up to ``lsn``: records at or below it go, readers see TRIM.

        The trim point is recorded in the epoch store first (a node that is down
        now applies it when it comes back), then sent to every node of all the
        log's nodesets.  Returns the log's trim point afterwards.

        Raises:
            InvalidArgumentError: ``lsn`` is past the log's tail (nothing above
                the tail exists to trim, and a later record must not be).
            NotFoundError: the log does not exist.
        """
        return await self._admin.trim(log_id, lsn)

    async def find_time(self, log_id: int, timestamp_ms: int) -> int:
        """The first LSN with a timestamp at or after ``timestamp_ms``.

        With no record that recent, the LSN after the tail.
        """
        return await self._admin.find_time(log_id, timestamp_ms)

    async def log_info(self, log_id: int) -> list[LogInfoReply]:
        """What each answering node of the log knows of it."""
        return await self._admin.log_info(log_id)

    async def log_directory(self, log_id: int) -> list[LogSegment]:
        """The partition directories of the nodes that answered: what each of
        their partitions holds of the log (LSN range, timestamps, bytes,
        records), oldest first per node.  Every record is in R nodes' entries;
        planners use this to cut a log into ranges of similar size."""
        return await self._admin.log_directory(log_id)

    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None:
        """How recovery ended an epoch of the log (None: it never did)."""
        return await self._admin.epoch_end(log_id, epoch)

    async def is_empty(self, log_id: int) -> bool:
        """True when no record is left above the trim point."""
        return all(r.records == 0 for r in await self._admin.log_info(log_id))

    async def data_size(self, log_id: int) -> int:
        """Approximate bytes of the log's records (one copy of each)."""
        return await self._admin.data_size(log_id)

    async def compact(self, log_id: int, *, timeout_s: float = 900.0) -> dict[str, Any]:
        """Run a compaction pass of a compacted log now, wait for it, and return
        its stats (``compaction.PassStats`` as a dict: the clean point before and
        after, records read and removed, keys, map size and fill, ...)."""
        return await self._admin.compact(log_id, timeout_s)

    async def compaction_state(self, log_id: int) -> dict[str, Any] | None:
        """The log's compaction state from the epoch store (None: never compacted)."""
        return await self._admin.compaction_state(log_id)

    # -- the nodes ----------------------------------------------------------------

    async def node_status(self, node_id: int) -> NodeStatus | None:
        """One node's state (None when it does not answer)."""
        return await self._admin.node_status(node_id)

    async def ask_nodes(
        self, log_id: int, make: Callable[[int], Any], *, timeout_s: float = 5.0
    ) -> dict[int, Any]:
        """Send the request ``make(request_id)`` to every node of the log at once;
        ``{node: reply}`` for those that answered in time (tools and the cleaner
        speak to the nodes of a log this way)."""
        return await self._admin.ask_nodes(log_id, make, timeout_s=timeout_s)

    async def ask_node(
        self, node_id: int, make: Callable[[int], Any], *, timeout_s: float = 5.0
    ) -> Any:
        """Send the request ``make(request_id)`` to one node; its reply, or None."""
        return await self.links.request(node_id, make, timeout_s)

    async def tell_nodes(self, log_id: int, message: Any) -> None:
        """Send a message that has no reply to every live node of the log."""
        await self._admin.tell_nodes(log_id, message)

    async def aclose(self) -> None:
        await self.links.aclose()


def resolve_connection(
    url: str | None, options: ConnectOptions
) -> tuple[str, ClientSettings | None, Credentials | None]:
    """The cluster URL, settings and credentials of a client, as the CLI
    finds them: what is passed, else ``LOGSTRAND_URL``, ``LOGSTRAND_CA``,
    ``LOGSTRAND_TOKEN`` (or ``LOGSTRAND_TOKEN_FILE``), ``LOGSTRAND_CERT``,
    ``LOGSTRAND_KEY``."""
    _check_options("connect", options, ConnectOptions)
    url = url or os.environ.get("LOGSTRAND_URL") or None
    if url is None:
        raise InvalidArgumentError("no cluster URL: pass one or set LOGSTRAND_URL")
    credentials = options.get("credentials")
    if credentials is None:
        credentials = credentials_from_env(
            token=options.get("token"),
            ca=options.get("ca"),
            cert=options.get("cert"),
            key=options.get("key"),
        )
    return url, options.get("settings"), credentials


@contextlib.asynccontextmanager
async def open_trio_client(
    url: str, settings: ClientSettings | None, credentials: Credentials | None
) -> AsyncIterator[AsyncClient]:
    """An ``AsyncClient`` in this trio run, until the block ends."""
    store = await trio.to_thread.run_sync(open_epoch_store, url)
    try:
        view = ClusterView(store)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(view.run)
                client = AsyncClient(view, nursery, settings or ClientSettings(), credentials)
                try:
                    yield client
                finally:
                    await client.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The nursery wraps what the caller's block raised: give it back
            # as it was raised (an error of ours, not a group of one).
            raise collapse(group) from None
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(store.close)


def _check_isolation(isolation: str) -> None:
    if isolation not in ISOLATIONS:
        raise InvalidArgumentError("isolation: 'uncommitted' or 'committed'")


def _check_options(call: str, options: Mapping[str, object], kind: type) -> None:
    """An option ``kind`` (a TypedDict) does not declare: mypy stops these
    in typed code; untyped callers get this instead of a silent ignore."""
    unknown = options.keys() - kind.__annotations__.keys()
    if unknown:
        raise InvalidArgumentError(f"{call}: unknown options {sorted(unknown)}")
