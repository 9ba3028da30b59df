"""The keyword options that the client's faces share, declared once.

The trio client (``AsyncClient``), the asyncio one (``AsyncioClient``) and
the blocking one (``Client``) take the same options for a read and for
opening: each face types its ``**options`` with these, passes them on
unchanged, and only ``AsyncClient.read`` and ``resolve_connection`` look
inside.  A new option is therefore one line here (and its use there),
not one per face, and mypy checks every caller against this list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from ..security import Credentials
    from ._settings import ClientSettings

#: ``isolation``'s values: every record, or Kafka's read_committed.
ISOLATIONS = ("uncommitted", "committed")


class ReadOptions(TypedDict, total=False):
    """What a read of any face takes by keyword, besides ``log_id``,
    ``start`` and ``until`` (``read``, ``read_batches``, ``read_columns``,
    ``read_arrow``).  Each option's default is the first thing it says.

    ``single_copy`` (True): read one copy of each record, and ask the other
    copies only around a gap (LogDevice's single-copy delivery); False asks
    every copy, as rebuilding does.
    ``show_compacted`` (False): deliver the records compaction superseded
    but has not dropped yet, instead of COMPACTED gaps over them.
    ``group`` (None): start right after the group's committed LSN (at
    ``LSN_OLDEST`` when it has none) instead of at ``start``.
    ``autocommit`` (False): with ``group``, everything handed out before
    each request for more counts as processed and is committed, at most
    every ``settings.autocommit_interval_s`` and when the reader closes.
    ``access_gaps`` (False): a log the user may not read is an ACCESS gap
    over the range instead of ``AccessDeniedError``.
    ``isolation`` ("uncommitted"): "committed" delivers only records of
    committed transactions and records outside any, up to the log's last
    stable LSN (Kafka's read_committed; docs/transactions.md).
    """

    single_copy: bool
    show_compacted: bool
    group: str | None
    autocommit: bool
    access_gaps: bool
    isolation: str


class ConnectOptions(TypedDict, total=False):
    """What ``connect`` and ``open_client`` take by keyword besides the URL.

    ``settings``: the client's ``ClientSettings`` (timeouts, buffers).
    For a cluster with TLS (docs/security.md): ``ca`` is the cluster's CA
    certificate, and the client authenticates with ``token`` (from
    ``logstrand users add``) or a client certificate (``cert`` and
    ``key``); or ``credentials``, all of them made already.  What is not
    passed comes from the environment as for the CLI: ``LOGSTRAND_CA``,
    ``LOGSTRAND_TOKEN`` (or ``LOGSTRAND_TOKEN_FILE``), ``LOGSTRAND_CERT``,
    ``LOGSTRAND_KEY``.
    """

    settings: ClientSettings | None
    token: str | None
    ca: str | None
    cert: str | None
    key: str | None
    credentials: Credentials | None


class SubscribeOptions(TypedDict, total=False):
    """What ``subscribe`` of any face takes by keyword besides the group
    and its logs.

    ``autocommit`` (True): what was handed out is committed every
    ``settings.autocommit_interval_s``, before a log is given up (no record
    of a log is delivered after that), and when the member leaves.
    ``instance_id`` (None): makes a static member, which may come back
    within its session and get its logs again without a rebalance.
    ``isolation`` ("uncommitted"): "committed" for committed records only,
    as for a read (a position is committed up to what was handed out, so a
    member that takes a log over reads an open transaction's records again).
    """

    autocommit: bool
    instance_id: str | None
    isolation: str


class ManyOptions(TypedDict, total=False):
    """What ``read_many`` of any face takes by keyword besides the starts
    and ``until``.

    ``isolation`` ("uncommitted"): as for a read, each log by itself.
    ``buffer``: kept for callers of earlier versions and not used (the
    nodes' windows share ``settings.read_buffer_bytes``).
    """

    buffer: int
    isolation: str
