"""A name over several ranges (a topic that grew past another's ids) and
grants by name: the pure model (``epochstore._named``, ``security``), the
epoch store's operations on both stores, and the CLI's view of them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.batch import PackedBatch
from logstrand.cli import main
from logstrand.epochstore import LogAttributes, LogRange, NamedLogs, named_logs, open_epoch_store
from logstrand.epochstore._model import NodeConfig
from logstrand.errors import ExistsError, InvalidArgumentError, NotFoundError
from logstrand.security import Grants, TopicGrant, refusal, user_principal
from logstrand.wire import Append, GetTails

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from logstrand.epochstore import EpochStore

APPEND = PackedBatch.for_append([None], [b"x"])


def _named(*spans: tuple[int, int]) -> NamedLogs:
    return named_logs([LogRange(a, b, name="t") for a, b in spans])["t"]


def test_a_names_partitions_are_its_parts_logs_in_the_order_of_their_first_ids() -> None:
    # Given out of order, as a store may list them after a rewrite.
    t = named_logs(
        [LogRange(300, 301, name="t"), LogRange(10, 12, name="t"), LogRange(20, 20, name="u")]
    )["t"]
    assert (t.count, t.first, t.logs()) == (5, 10, [10, 11, 12, 300, 301])
    assert [t.log(i) for i in range(-1, 6)] == [None, 10, 11, 12, 300, 301, None]
    assert [t.index(x) for x in (10, 12, 300, 301, 13, 20)] == [0, 2, 3, 4, None, None]
    assert 301 in t
    assert 20 not in t


@given(st.lists(st.integers(1, 5), min_size=1, max_size=6))
def test_log_and_index_are_inverses(sizes: list[int]) -> None:
    spans, at = [], 1
    for size in sizes:
        spans.append((at, at + size - 1))
        at += size + 7  # another range's ids between the parts
    t = _named(*spans)
    assert t.count == sum(sizes)
    for i in range(t.count):
        log = t.log(i)
        assert log is not None
        assert t.index(log) == i


@pytest.fixture
def store(store_url: str) -> Iterator[EpochStore]:
    with open_epoch_store(store_url) as s:
        for i in (1, 2, 3):
            s.add_node(NodeConfig(i, f"127.0.0.1:{4000 + i}"))
        yield s


def test_a_name_grows_by_parts_above_its_own_and_changes_as_one(store: EpochStore) -> None:
    store.create_logs(10, 11, LogAttributes(replication_factor=2), name="t")
    store.create_logs(12, 13, LogAttributes(), name="u")
    with pytest.raises(ExistsError, match="overlap"):
        store.extend_logs(10, 11, 12)
    with pytest.raises(InvalidArgumentError, match="above its logs"):
        store.add_logs_part("t", 5, 6)
    with pytest.raises(ExistsError, match="overlap"):
        store.add_logs_part("t", 13, 14)
    with pytest.raises(NotFoundError):
        store.add_logs_part("nope", 20, 21)
    part = store.add_logs_part("t", 20, 21)
    assert (part.name, part.attributes.replication_factor) == ("t", 2)  # the name's attributes
    with pytest.raises(ExistsError, match="already named"):
        store.create_logs(30, 30, LogAttributes(), name="t")  # still one name per create
    changed = store.update_logs_named("t", retention_ms=60_000)
    assert [(r.first, r.attributes.retention_ms) for r in changed] == [(10, 60_000), (20, 60_000)]
    assert store.log_range(12).attributes.retention_ms != 60_000  # u is another name
    assert named_logs(store.log_ranges())["t"].logs() == [10, 11, 20, 21]
    removed = store.remove_logs_named("t")
    assert [(r.first, r.last) for r in removed] == [(10, 11), (20, 21)]
    assert [r.name for r in store.log_ranges()] == ["u"]
    with pytest.raises(NotFoundError):
        store.update_logs_named("t", retention_ms=1)


def test_a_grant_by_name_covers_every_part_and_a_prefix_covers_names_to_come() -> None:
    grants = Grants(
        topics=(
            TopicGrant("ann", "orders", frozenset({"append"})),
            TopicGrant("ann", "audit-*", frozenset({"read"})),
        )
    )
    names = {10: "orders", 300: "orders", 40: "audit-eu", 50: "other", 60: None}
    assert grants.may("ann", "append", 300, "orders")
    assert not grants.may("ann", "read", 300, "orders")
    assert grants.may("ann", "read", 40, "audit-eu")
    assert not grants.may("ann", "read", 50, "other")
    assert not grants.may("bob", "append", 10, "orders")
    assert not grants.may("ann", "append", None)  # by name is never "every log"
    assert grants.may_somewhere("ann", "read")
    ann = user_principal("ann")
    assert refusal(ann, grants, Append(1, 300, APPEND), names.get) is None
    assert refusal(ann, grants, Append(1, 50, APPEND), names.get) is not None
    assert refusal(ann, grants, Append(1, 60, APPEND), names.get) is not None
    # Without a way to name the log, a grant by name covers nothing.
    assert refusal(ann, grants, Append(1, 300, APPEND)) is not None
    # A request on many logs needs each of them.
    assert refusal(ann, grants, GetTails(1, (40,)), names.get) is None
    assert (
        refusal(ann, grants, GetTails(1, (40, 50)), names.get) == "user ann may not read on log 50"
    )


def test_topic_grants_in_the_store_and_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'c.db'}"
    with open_epoch_store(url, create=True) as store:
        store.add_user("ann", "00" * 32)
    grant = ["acl", "grant", "ann", "--topic", "orders-*", "--ops", "read", "--url", url]
    assert main(grant) == 0
    assert "ann may read on topic orders-*" in capsys.readouterr().out
    assert main(["acl", "grant", "ann", "--topic", "a b", "--ops", "read", "--url", url]) != 0
    assert main(["acl", "grant", "nobody", "--topic", "x", "--ops", "read", "--url", url]) != 0
    capsys.readouterr()
    assert main(["acl", "list", "--json", "--url", url]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"user": "ann", "topic": "orders-*", "ops": ["read"]}
    ]
    with open_epoch_store(url) as store:
        assert Grants.from_doc(store.security()).may("ann", "read", 7, "orders-eu")
        store.grant_topic("later", "x", frozenset({"append"}), user_to_come=True)
    assert main(["acl", "revoke", "ann", "--topic", "orders-*", "--ops", "read", "--url", url]) == 0
    assert "1 grant(s) of ann changed" in capsys.readouterr().out
    assert main(["users", "remove", "ann", "--url", url]) == 0
    with open_epoch_store(url) as store:
        assert store.security()["topic_grants"] == [
            {"user": "later", "topic": "x", "ops": ["append"]}
        ]


def test_the_cli_lists_changes_and_removes_a_name_of_several_parts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'c.db'}"
    with open_epoch_store(url, create=True) as store:
        store.add_node(NodeConfig(1, "127.0.0.1:4001"))
        store.create_logs(10, 11, LogAttributes(replication_factor=1), name="t")
        store.create_logs(12, 12, LogAttributes(replication_factor=1))
        store.add_logs_part("t", 20, 22)
    capsys.readouterr()
    assert main(["logs", "list", "--url", url]) == 0
    listed = capsys.readouterr().out
    assert "10..11 (t)" in listed
    assert "20..22 (t, partitions 2..4)" in listed
    assert main(["logs", "update", "t", "--retention", "1d", "--url", url]) == 0
    assert "updated logs 10..22: retention_ms" in capsys.readouterr().out
    assert main(["logs", "update", "t", "--name", "u", "--url", url]) != 0
    assert "spans 2 ranges" in capsys.readouterr().err
    with open_epoch_store(url) as store:
        assert {r.attributes.retention_ms for r in store.log_ranges() if r.name} == {86_400_000}
    assert main(["logs", "remove", "t", "--url", url]) == 0
    with open_epoch_store(url) as store:
        assert [(r.first, r.name) for r in store.log_ranges()] == [(12, None)]
