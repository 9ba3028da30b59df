"""Consumer groups as a resource of grants: the rules (``security.Grants``,
``storage._group_access``), the store's document, the CLI's arguments, and
the fronts' reading of them (``security.Access``: an unknown name costs one
read of the store per ``RECHECK_S``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from logstrand.batch import PackedBatch
from logstrand.epochstore import open_epoch_store
from logstrand.errors import InvalidArgumentError, NotFoundError
from logstrand.positions import (
    encode_key,
    encode_value,
    membership_key,
    txn_positions_key,
    txn_state_key,
)
from logstrand.records import LOG_ID_MAX, POSITIONS_LOGS
from logstrand.security import (
    Access,
    Grant,
    Grants,
    GroupGrant,
    TxnGrant,
    node_principal,
    parse_group_ops,
    parse_group_pattern,
    user_principal,
)
from logstrand.security._access import RECHECK_S
from logstrand.storage._group_access import POSITIONS_BATCH_BYTES_MAX, group_refusal
from logstrand.wire import Append, AppendMany, GroupHeartbeat, TxnOp, TxnRequest

if TYPE_CHECKING:
    from pathlib import Path

ANN = user_principal("ann")
GRANTS = Grants(
    logs=(Grant("root", 1, LOG_ID_MAX, frozenset({"admin"})),),
    groups=(
        GroupGrant("ann", "billing-*", frozenset({"read"})),
        GroupGrant("ann", "audit", frozenset({"delete"})),
        GroupGrant("bob", "*", frozenset({"describe"})),
    ),
)


def test_a_group_grant_names_a_group_a_prefix_or_every_group() -> None:
    assert GRANTS.may_group("ann", "read", "billing-eu")
    assert not GRANTS.may_group("ann", "read", "billing")  # "billing-" is the prefix
    assert not GRANTS.may_group("ann", "delete", "billing-eu")
    assert GRANTS.may_group("ann", "delete", "audit")
    assert not GRANTS.may_group("ann", "read", "audit")
    assert GRANTS.may_group("bob", "describe", "anything")
    assert not GRANTS.may_group("bob", "read", "anything")
    assert not GRANTS.may_group("carol", "describe", "audit")


def test_any_grant_on_a_group_lets_its_holder_describe_it() -> None:
    assert GRANTS.may_group("ann", "describe", "billing-eu")
    assert GRANTS.may_group("ann", "describe", "audit")
    assert not GRANTS.may_group("ann", "describe", "sales")


def test_admin_on_every_log_may_do_everything_to_every_group() -> None:
    for op in ("read", "describe", "delete"):
        assert GRANTS.may_group("root", op, "whatever")
    partial = Grants(logs=(Grant("ann", 1, 100, frozenset({"admin"})),))
    assert not partial.may_group("ann", "read", "g")


def _positions(group: str, *, tombstone: bool = False) -> PackedBatch:
    key = encode_key(group, 7)
    return PackedBatch.for_append([key], [None if tombstone else encode_value(5, 0)])


def test_a_member_and_a_committer_need_read_on_the_group() -> None:
    beat = GroupHeartbeat(1, "billing-eu", "", 0, None, True, (7,), None)
    assert group_refusal(ANN, GRANTS, beat) is None
    other = GroupHeartbeat(1, "sales", "", 0, None, True, (7,), None)
    why = group_refusal(ANN, GRANTS, other)
    assert why is not None
    assert "may not read group sales" in why
    assert "--group sales --ops read" in why  # and says what grant would do
    log = POSITIONS_LOGS[0]
    assert group_refusal(ANN, GRANTS, Append(1, log, _positions("billing-eu"))) is None
    assert group_refusal(ANN, GRANTS, Append(1, log, _positions("sales"))) is not None


def test_a_tombstone_in_a_positions_log_needs_delete() -> None:
    log = POSITIONS_LOGS[3]
    refused = group_refusal(ANN, GRANTS, Append(1, log, _positions("billing-eu", tombstone=True)))
    assert refused is not None
    assert "may not delete group billing-eu" in refused
    assert group_refusal(ANN, GRANTS, Append(1, log, _positions("audit", tombstone=True))) is None


def test_membership_records_count_as_their_group_and_other_keys_are_refused() -> None:
    log = POSITIONS_LOGS[0]
    member = PackedBatch.for_append([membership_key("billing-x")], [b"{}"])
    assert group_refusal(ANN, GRANTS, Append(1, log, member)) is None
    junk = PackedBatch.for_append([b"no group here"], [b"x"])
    why = group_refusal(ANN, GRANTS, Append(1, log, junk))
    assert why is not None
    assert "only records of groups" in why


def test_positions_a_transaction_holds_count_as_their_group() -> None:
    """``Transaction.commit_positions`` writes under ``txn_positions_key``:
    read on the group, like a commit; a transactional id's state is the
    coordinator's alone."""
    log = POSITIONS_LOGS[0]
    held = PackedBatch.for_append([txn_positions_key("billing-x", 7)], [b"{}"])
    assert group_refusal(ANN, GRANTS, Append(1, log, held)) is None
    other = PackedBatch.for_append([txn_positions_key("sales", 7)], [b"{}"])
    assert "may not read group sales" in str(group_refusal(ANN, GRANTS, Append(1, log, other)))
    state = PackedBatch.for_append([txn_state_key("t1")], [b"{}"])
    assert "only records of groups" in str(group_refusal(ANN, GRANTS, Append(1, log, state)))


def test_many_logs_at_once_are_checked_each_and_other_logs_not_at_all() -> None:
    ok, bad = _positions("billing-a"), _positions("sales")
    user_log = PackedBatch.for_append([b"k"], [b"v"])
    mixed = AppendMany(1, (5, POSITIONS_LOGS[1]), (user_log, ok))
    assert group_refusal(ANN, GRANTS, mixed) is None
    assert group_refusal(ANN, GRANTS, AppendMany(1, (POSITIONS_LOGS[1],), (bad,))) is not None
    assert group_refusal(ANN, GRANTS, Append(1, 5, bad)) is None  # a user log: not a group's


def test_nodes_are_not_checked_and_big_batches_are_not_decoded() -> None:
    bad = _positions("sales")
    assert group_refusal(node_principal(2), GRANTS, Append(1, POSITIONS_LOGS[0], bad)) is None
    huge = PackedBatch.for_append([b"k" * 16], [b"x" * (POSITIONS_BATCH_BYTES_MAX + 1)])
    why = group_refusal(ANN, GRANTS, Append(1, POSITIONS_LOGS[0], huge))
    assert why is not None
    assert "at most 4 MiB" in why


def test_patterns_and_operations_are_parsed_strictly() -> None:
    assert parse_group_pattern("billing-eu") == "billing-eu"
    assert parse_group_pattern("billing-*") == "billing-*"
    assert parse_group_pattern("*") == "*"
    for bad in ("", "-x", "a b", "a*b", "**", "x" * 200):
        with pytest.raises(InvalidArgumentError):
            parse_group_pattern(bad)
    assert parse_group_ops("all") == frozenset({"read", "describe", "delete"})
    with pytest.raises(InvalidArgumentError, match="append"):
        parse_group_ops("read,append")


def test_group_grants_in_the_store(tmp_path: Path) -> None:
    with open_epoch_store(f"sqlite://{tmp_path / 'c.db'}", create=True) as store:
        store.add_user("ann", "00" * 32)
        with pytest.raises(NotFoundError):
            store.grant_group("nobody", "g", frozenset({"read"}))
        store.grant_group("ann", "g*", frozenset({"read", "delete"}))
        assert store.security()["group_grants"] == [
            {"user": "ann", "group": "g*", "ops": ["delete", "read"]}
        ]
        assert store.revoke_group("ann", "g", frozenset({"read"})) == 0  # not as granted
        assert store.revoke_group("ann", "g*", frozenset({"read"})) == 1
        assert store.security()["group_grants"][0]["ops"] == ["delete"]
        secret = store.sasl_secret()
        assert store.sasl_secret() == secret == store.security()["sasl_secret"]
        store.remove_user("ann")
        assert store.security()["group_grants"] == []


async def test_an_unknown_name_reads_the_store_at_most_every_recheck() -> None:
    reads = [0]

    async def read() -> dict[str, Any]:
        reads[0] += 1
        return {"users": {"ann": {"sha256": "00"}}, "grants": [], "group_grants": []}

    access = Access(read)
    for i in range(100):
        assert await access.user(f"nobody{i}") is None
    assert reads[0] == 1
    await trio.sleep(RECHECK_S)
    assert await access.user("nobody-else") is None
    assert reads[0] == 2
    assert await access.user("ann") is not None
    assert reads[0] == 2


def test_acl_commands_take_one_of_logs_or_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from logstrand.cli import main

    url = f"sqlite://{tmp_path / 'c.db'}"
    with open_epoch_store(url, create=True) as store:
        store.add_user("ann", "00" * 32)
    assert main(["acl", "grant", "ann", "--group", "etl-*", "--ops", "read", "--url", url]) == 0
    assert "ann may read on group etl-*" in capsys.readouterr().out
    both = ["acl", "grant", "ann", "--group", "g", "--logs", "1", "--ops", "read", "--url", url]
    assert main(both) == 2
    assert "one of --logs, --topic, --group or --transactional-id" in capsys.readouterr().err
    assert main(["acl", "grant", "ann", "--ops", "read", "--url", url]) == 2
    capsys.readouterr()
    assert main(["acl", "grant", "ann", "--group", "a b", "--ops", "read", "--url", url]) != 0
    assert main(["acl", "grant", "ann", "--group", "g", "--ops", "trim", "--url", url]) != 0
    capsys.readouterr()
    assert main(["acl", "list", "--json", "--url", url]) == 0
    assert '"group": "etl-*"' in capsys.readouterr().out
    assert main(["acl", "revoke", "ann", "--group", "etl-*", "--ops", "read", "--url", url]) == 0
    assert "1 grant(s) of ann changed" in capsys.readouterr().out
    txn = ["acl", "grant", "ann", "--transactional-id", "etl-*", "--ops", "write", "--url", url]
    assert main(txn) == 0
    assert "ann may write on transactional id etl-*" in capsys.readouterr().out
    assert main(["acl", "list", "--url", url]) == 0
    assert "transactional id etl-*" in capsys.readouterr().out
    bad = ["acl", "grant", "ann", "--transactional-id", "etl-*", "--ops", "read", "--url", url]
    assert main(bad) == 2
    assert "operations on a transactional id" in capsys.readouterr().err
    txn[1] = "revoke"
    assert main(txn) == 0
    assert "1 grant(s) of ann changed" in capsys.readouterr().out


def test_a_transactional_id_is_written_by_whom_a_grant_names() -> None:
    """``TxnRequest`` needs write on its transactional id (a grant on it, a
    prefix or every id; admin on every log covers all); an operator's
    FORCE_ABORT needs admin.  Write implies describe, as in Kafka."""
    grants = Grants(
        logs=(Grant("root", 1, LOG_ID_MAX, frozenset({"admin"})),),
        txns=(
            TxnGrant("ann", "app-*", frozenset({"write"})),
            TxnGrant("bob", "app-1", frozenset({"describe"})),
        ),
    )
    assert grants.may_txn("ann", "write", "app-1")
    assert grants.may_txn("ann", "describe", "app-1")
    assert not grants.may_txn("ann", "write", "other")
    assert not grants.may_txn("bob", "write", "app-1")
    assert grants.may_txn("bob", "describe", "app-1")
    assert grants.may_txn("root", "write", "anything")
    init = TxnRequest(1, TxnOp.INIT, "app-1")
    assert group_refusal(ANN, grants, init) is None
    why = group_refusal(ANN, grants, TxnRequest(1, TxnOp.COMMIT, "other", 5, 0))
    assert why is not None
    assert "--transactional-id other --ops write" in why
    assert group_refusal(user_principal("bob"), grants, init) is not None
    force = TxnRequest(1, TxnOp.FORCE_ABORT, "app-1")
    assert group_refusal(ANN, grants, force) is not None  # an operator's
    assert group_refusal(user_principal("root"), grants, force) is None
    assert group_refusal(node_principal(1), Grants(), force) is None


def test_grants_on_transactional_ids_in_the_store(tmp_path: Path) -> None:
    with open_epoch_store(f"sqlite://{tmp_path}/c.db", create=True) as store:
        store.grant_txn("ann", "app-*", frozenset({"write"}), user_to_come=True)
        with pytest.raises(NotFoundError):
            store.grant_txn("nobody", "x", frozenset({"write"}))
        with pytest.raises(InvalidArgumentError):
            store.grant_txn("ann", "x", frozenset({"read"}), user_to_come=True)
        assert Grants.from_doc(store.security()).may_txn("ann", "write", "app-9")
        assert store.revoke_txn("ann", "app-*", frozenset({"write"})) == 1
        assert store.security()["txn_grants"] == []
