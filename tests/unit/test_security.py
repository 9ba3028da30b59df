"""The pure rules of the trust boundary: principals and grants, what makes
sense to a node (``_admission``), the codec's item budget, users and grants in
the epoch store, and ZooKeeper's digest ACL."""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.batch import PackedBatch, make_batch
from logstrand.epochstore import open_epoch_store
from logstrand.errors import AccessDeniedError, InvalidArgumentError, ProtocolError, Status
from logstrand.records import CONTROL, LOG_ID_MAX, TRANSACTIONAL
from logstrand.security import (
    TRUSTED,
    Credentials,
    Grant,
    Grants,
    Principal,
    node_principal,
    parse_log_range,
    parse_ops,
    user_principal,
)
from logstrand.security import refusal as _refusal
from logstrand.spark._options import Auth
from logstrand.storage._admission import check
from logstrand.wire import (
    Append,
    AppendMany,
    CleanPoint,
    FrameDecoder,
    GetDigest,
    GetNodeStatus,
    GetTails,
    HelloAck,
    Ping,
    Release,
    Renew,
    Seal,
    StartRead,
    Store,
    Trim,
    TrimLog,
    count_items,
    encode_frame,
)

if TYPE_CHECKING:
    from pathlib import Path

    from logstrand.testing import ZooKeeperServer


def refusal(principal: Principal, grants: tuple[Grant, ...], msg: Any) -> str | None:
    """The rule on grants on logs alone."""
    return _refusal(principal, Grants(grants), msg)


ONE = make_batch([(1 << 32) | 1], [b"x"], timestamps_ms=0)
APPEND = PackedBatch.for_append([None], [b"x"])


# -- principals and grants ---------------------------------------------------------


def test_grants_cover_ops_per_log_range() -> None:
    grants = (Grant("ann", 1, 10, frozenset({"read"})), Grant("ann", 5, 5, frozenset({"append"})))
    ann = user_principal("ann")
    assert refusal(ann, grants, StartRead(1, 1, 3, 1, 10, 100, False, ())) is None
    assert refusal(ann, grants, Append(1, 5, APPEND)) is None
    assert refusal(ann, grants, Append(1, 6, APPEND)) == "user ann may not append on log 6"
    assert refusal(ann, grants, TrimLog(1, 3, 1)) == "user ann may not trim on log 3"
    assert refusal(ann, grants, GetNodeStatus(1)) == "user ann may not admin"
    assert refusal(ann, grants, Ping(1)) is None
    bob = user_principal("bob")  # another user's grants are not his
    assert refusal(bob, grants, StartRead(1, 1, 3, 1, 10, 100, False, ())) is not None


def test_a_transactions_marker_needs_admin_not_append() -> None:
    """A CONTROL batch ends producers' transactions for every reader: a user
    who may append may not write one; one with admin on the log may (a
    node's Kafka front writes them as a node)."""
    marker = PackedBatch.for_append([None], [b"m"], flags=CONTROL)
    flagged = PackedBatch.for_append([None], [b"x"], flags=TRANSACTIONAL)
    appender = (Grant("ann", 1, 10, frozenset({"append"})),)
    ann = user_principal("ann")
    assert refusal(ann, appender, Append(1, 5, flagged)) is None
    assert refusal(ann, appender, Append(1, 5, marker)) == "user ann may not admin on log 5"
    assert refusal(ann, appender, AppendMany(1, (5, 6), (APPEND, marker))) == (
        "user ann may not admin on log 5"
    )
    admin = (Grant("ann", 1, 10, frozenset({"admin"})),)
    assert refusal(ann, admin, Append(1, 5, marker)) is None
    assert refusal(node_principal(2), (), Append(1, 5, marker)) is None


def test_a_request_on_many_logs_needs_the_grant_on_each() -> None:
    grants = (Grant("ann", 1, 10, frozenset({"read"})), Grant("ann", 20, 20, frozenset({"read"})))
    ann = user_principal("ann")
    assert refusal(ann, grants, GetTails(1, (1, 10, 20))) is None
    assert refusal(ann, grants, GetTails(1, (1, 11, 20))) == "user ann may not read on log 11"
    assert refusal(ann, (), GetTails(1, (1,))) == "user ann may not read on log 1"
    assert refusal(node_principal(2), (), GetTails(1, (11,))) is None
    # ``logs rebalance`` moves sequencers: admin on each log it names.
    admin = (Grant("ann", 1, 10, frozenset({"admin"})),)
    assert refusal(ann, admin, Renew(1, (1, 10))) is None
    assert refusal(ann, grants, Renew(1, (1,))) == "user ann may not admin on log 1"
    assert refusal(ann, admin, Renew(1, (3, 11))) == "user ann may not admin on log 11"


def test_the_positions_log_needs_its_own_grant_or_all() -> None:
    from logstrand.records import POSITIONS_LOG_ID, POSITIONS_LOGS
    from logstrand.security._model import parse_log_range

    commit = Append(1, POSITIONS_LOG_ID, APPEND)
    ann, ops = user_principal("ann"), frozenset({"read", "append"})
    below_the_top_bit = (Grant("ann", 1, 2**62, ops),)
    assert refusal(ann, below_the_top_bit, commit) is not None
    named = (Grant("ann", *parse_log_range("positions"), ops),)
    assert refusal(ann, named, commit) is None
    assert refusal(ann, named, Append(1, 5, APPEND)) is not None
    everything = (Grant("ann", *parse_log_range("all"), ops),)
    assert refusal(ann, everything, commit) is None
    # Every positions log is "positions", and a grant made when the first
    # was the only one covers them all.
    last = Append(1, POSITIONS_LOGS[-1], APPEND)
    assert refusal(ann, named, last) is None
    assert refusal(ann, (Grant("ann", POSITIONS_LOG_ID, POSITIONS_LOG_ID, ops),), last) is None


def test_node_messages_only_from_nodes() -> None:
    grants = (Grant("ann", 1, LOG_ID_MAX, frozenset({"read", "append", "trim", "admin"})),)
    ann = user_principal("ann")
    for msg in (
        Release(1, 5),
        Seal(1, 1, 0),
        GetDigest(1, 1, 1, 1, 0),
        Trim(1, 1, 1),
        CleanPoint(1, 1),
        Store.of(1, 1, 1, (1,), 0, True, ONE),
    ):
        why = refusal(ann, grants, msg)
        assert why is not None
        assert "only from a node" in why
        assert refusal(node_principal(2), (), msg) is None
        assert refusal(TRUSTED, (), msg) is None


def test_who_may_send_what_is_declared_with_each_message() -> None:
    """The access table is the messages' declarations (``wire.ACCESS``):
    every request has one, no reply has one, and this is what they say."""
    from logstrand.wire import ACCESS, MESSAGE_TYPES

    by_access: dict[str, set[str]] = {}
    for kind, access in ACCESS.items():
        by_access.setdefault(access, set()).add(kind.__name__)
    assert by_access == {
        "node": {"Store", "Release", "Seal", "GetDigest", "Gossip", "Trim", "DropCopies"}
        | {"CleanPoint", "Amend", "StoreMany", "ReleaseMany"},
        # TxnRequest: write on its transactional id (``_group_access``).
        "any": {"Ping", "GetClusterState", "ReadCredit", "StopRead", "TxnRequest"},
        "read": {"GetSeqState", "StartRead", "LogInfo", "FindTime", "GetLogDirectory"}
        | {"GetTails", "GroupHeartbeat", "TierRead"},
        "append": {"Append", "AppendMany"},
        "trim": {"TrimLog"},
        "admin": {"GetNodeStatus", "Compact", "Renew"},
    }
    replies = {k.__name__ for k in MESSAGE_TYPES.values()} - {k.__name__ for k in ACCESS}
    assert all(
        name.endswith(("Reply", "Ack"))
        or name in ("Hello", "Pong", "SeqState", "Digest")
        or name in ("ReadRecords", "NodeStatus", "LogDirectory", "ClusterState", "StoreReplies")
        for name in replies
    ), replies
    ann = user_principal("ann")
    assert refusal(ann, (), HelloAck(0, 3)) == "HelloAck is not a request"


def test_parse_ops_and_ranges() -> None:
    assert parse_ops("read, append") == {"read", "append"}
    assert parse_ops("all") == {"read", "append", "trim", "admin"}
    assert parse_log_range("1..100") == (1, 100)
    assert parse_log_range("7") == (7, 7)
    assert parse_log_range("all") == (1, LOG_ID_MAX)
    for bad in ("fly", ""):
        with pytest.raises(InvalidArgumentError):
            parse_ops(bad)
    for bad in ("0", "5..2", "x", "1..x"):
        with pytest.raises(InvalidArgumentError):
            parse_log_range(bad)


def test_users_and_grants_in_the_epoch_store(tmp_path: Path) -> None:
    with open_epoch_store(f"sqlite://{tmp_path}/c.db", create=True) as store:
        store.add_user("ann", "00" * 32)
        with pytest.raises(Exception, match="exists"):
            store.add_user("ann", "11" * 32)
        store.grant("ann", 1, 100, frozenset({"read", "append"}))
        # Revoking append on 40..60 splits the grant; read stays everywhere.
        assert store.revoke("ann", 40, 60, frozenset({"append"})) == 1
        grants = {(g["first"], g["last"], tuple(g["ops"])) for g in store.security()["grants"]}
        assert grants == {
            (1, 39, ("append", "read")),
            (61, 100, ("append", "read")),
            (40, 60, ("read",)),
        }
        store.remove_user("ann")
        doc = store.security()
        assert (doc["users"], doc["grants"], doc["group_grants"]) == ({}, [], [])


def test_credentials_need_a_ca_for_tls() -> None:
    assert Credentials.build() is None
    with pytest.raises(InvalidArgumentError, match="CA"):
        Credentials.build(token="lst_x")
    with pytest.raises(InvalidArgumentError, match="key"):
        Credentials.build(ca="/nonexistent", cert="/c.pem")


def test_spark_takes_credentials_from_options_then_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOGSTRAND_TOKEN", "from-env")
    monkeypatch.setenv("LOGSTRAND_CA", "/env/ca.pem")
    auth = Auth.parse({"token": "from-option"})
    assert (auth.token, auth.ca) == ("from-option", "/env/ca.pem")
    assert "from-option" not in repr(auth)


# -- what makes sense to a node ------------------------------------------------------


@attrs.define
class Facts:
    logs: set[int] = attrs.field(factory=lambda: {1, 2})
    compacted_logs: set[int] = attrs.field(factory=lambda: {2})
    nodes: set[int] = attrs.field(factory=lambda: {1, 2, 3})
    next_epochs: dict[int, int] = attrs.field(factory=lambda: {1: 4, 2: 2})
    trims: dict[int, int] = attrs.field(factory=dict)
    lce: dict[int, int] = attrs.field(factory=lambda: {1: 1})

    def log_known(self, log_id: int) -> bool:
        return log_id in self.logs

    def compacted(self, log_id: int) -> bool:
        return log_id in self.compacted_logs

    def node_known(self, node_id: int) -> bool:
        return node_id in self.nodes

    def next_epoch(self, log_id: int) -> int:
        return self.next_epochs.get(log_id, 0)

    def trim_point(self, log_id: int) -> int:
        return self.trims.get(log_id, 0)

    def last_clean_epoch(self, log_id: int) -> int:
        return self.lce.get(log_id, 0)


def _store(lsn: int, *, seal: int = 0, copyset: tuple[int, ...] = (1, 2)) -> Store:
    return Store.of(1, 1, 1, copyset, 0, True, make_batch([lsn], [b"x"], timestamps_ms=1), seal)


def _why(msg: Any, facts: Facts | None = None) -> tuple[Status, str | None] | None:
    refused = check(msg, facts or Facts())
    return None if refused is None else (refused.status, refused.recheck)


def test_admission_rules() -> None:
    assert _why(Release(0, 5)) == (Status.INVALID_PARAM, None)
    assert _why(Release(9, 5)) == (Status.NOTFOUND, "config")
    assert _why(Release(1, (3 << 32) | 7)) is None
    assert _why(Release(1, (4 << 32) | 1)) == (Status.INVALID_PARAM, "epochs")
    assert _why(Seal(1, 1, 3)) is None
    assert _why(Seal(1, 1, 2**32 - 1)) == (Status.INVALID_PARAM, "epochs")
    assert _why(GetDigest(1, 1, 2, 1, 3)) is None
    assert _why(GetDigest(1, 1, 2, 1, 9)) == (Status.INVALID_PARAM, "epochs")
    assert _why(_store((3 << 32) | 1)) is None
    assert _why(_store((3 << 32) | 0)) == (Status.INVALID_PARAM, None)  # ESN 0
    assert _why(_store((5 << 32) | 1)) == (Status.INVALID_PARAM, "epochs")
    assert _why(_store((3 << 32) | 1, copyset=(1, 9))) == (Status.INVALID_PARAM, "config")
    # Recovery STOREs: seal handed out, recovery not finished, earlier epoch only.
    assert _why(_store((2 << 32) | 1, seal=3)) is None
    assert _why(_store((2 << 32) | 1, seal=9)) == (Status.INVALID_PARAM, "epochs")
    assert _why(_store((2 << 32) | 1, seal=2)) == (Status.PREEMPTED, None)  # LCE 1 = done
    assert _why(_store((3 << 32) | 1, seal=3)) == (Status.INVALID_PARAM, None)
    # Trims: never above what the epoch store records.
    assert _why(Trim(1, 1, 5)) == (Status.INVALID_PARAM, "trim")
    assert _why(Trim(1, 1, 5), Facts(trims={1: 5})) is None
    assert _why(TrimLog(1, 1, (3 << 32) | 9)) is None
    assert _why(TrimLog(1, 1, 2**64 - 1)) == (Status.INVALID_PARAM, "epochs")
    # Compaction messages only for compacted logs.
    assert _why(CleanPoint(1, 5)) == (Status.INVALID_PARAM, "config")
    assert _why(CleanPoint(2, 5)) is None
    assert _why(GetNodeStatus(1)) is None


@given(
    log=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**32 - 1),
    esn=st.integers(0, 2**32 - 1),
    seal=st.integers(0, 2**32 - 1),
)
def test_nothing_beyond_the_handed_out_epochs_is_admitted(
    log: int, epoch: int, esn: int, seal: int
) -> None:
    facts = Facts()
    lsn = (epoch << 32) | esn
    for msg in (_store(lsn, seal=seal), Release(log, lsn), Seal(1, log, epoch)):
        msg = attrs.evolve(msg, log_id=log)
        if check(msg, facts) is None:
            assert log in facts.logs
            assert epoch < facts.next_epoch(log)


# -- the codec's item budget -----------------------------------------------------------


def _bomb(items: int, item: bytes = b"\xa0") -> bytes:
    return b"\x9a" + struct.pack(">I", items) + item * items


def test_count_items_stops_a_bomb_without_decoding_it() -> None:
    body = _bomb(4_000_000, b"\x00")
    t0 = time.perf_counter()
    with pytest.raises(ProtocolError, match="more than 16384 items"):
        count_items(body, 16_384)
    assert time.perf_counter() - t0 < 0.5
    for bad in (
        b"\x9f\x00\xff",
        b"\xa1\x00\x00",
        b"\xc1\x00",
        b"\x82\x00",
        b"\x81\x81\x81\x81\x00",
    ):
        with pytest.raises(ProtocolError):
            count_items(bad, 100)


def test_decoder_item_budget_applies_per_frame() -> None:
    frame = encode_frame(Ping(7))
    dec = FrameDecoder(items_max=2)  # [3, 7] is three items
    dec.feed(frame)
    with pytest.raises(ProtocolError):
        dec.next_message()
    dec = FrameDecoder(items_max=3)
    dec.feed(frame)
    assert dec.next_message() == Ping(7)


# -- ZooKeeper's digest ACL ---------------------------------------------------------------


def test_zookeeper_digest_acl(zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = f"acl{time.monotonic_ns()}"
    with open_epoch_store(f"zk://ops:s3cret@{zookeeper.address}/{cluster}") as store:
        store.set_trim_point(1, 5)
    # Anyone may read the cluster's documents; nobody without the password writes.
    with open_epoch_store(f"zk://{zookeeper.address}/{cluster}") as anon:
        assert anon.trim_point(1) == 5
        with pytest.raises(AccessDeniedError, match="digest ACL"):
            anon.set_trim_point(1, 9)
        with pytest.raises(AccessDeniedError):
            anon.set_trim_point(2, 9)  # creating a document under the cluster's root
    monkeypatch.setenv("LOGSTRAND_ZK_AUTH", "ops:s3cret")
    with open_epoch_store(f"zk://{zookeeper.address}/{cluster}") as store:
        assert store.set_trim_point(1, 9) == 9
    with pytest.raises(InvalidArgumentError):
        open_epoch_store(f"zk://nopassword@{zookeeper.address}/{cluster}")


def test_a_cluster_with_a_digest_acl_leaves_other_clusters_room(tmp_path: Path) -> None:
    """The first store on a fresh ZooKeeper makes ``/logstrand``, the parent
    every cluster's root sits under.  Made with a cluster's digest ACL, it
    let no other cluster create its root (NoAuth): a full ``make test`` met
    it when this file's ACL test ran first on a worker's ZooKeeper.  It is
    made open to read and create in, whoever makes it."""
    from logstrand.testing import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed (Debian package 'zookeeper')")
    with ZooKeeperServer(tmp_path / "zk") as zk:
        with open_epoch_store(f"zk://ops:s3cret@{zk.address}/first", create=True) as store:
            store.set_trim_point(1, 5)
        with open_epoch_store(f"zk://{zk.address}/second", create=True) as other:
            assert other.set_trim_point(1, 3) == 3
        with open_epoch_store(f"zk://{zk.address}/first") as anon:
            assert anon.trim_point(1) == 5
            with pytest.raises(AccessDeniedError):
                anon.set_trim_point(1, 9)  # the cluster's own root keeps its ACL
