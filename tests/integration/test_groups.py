"""Consumer groups with real node processes: commit, committed and
read(group=...) across a restart of every node, autocommit, lag figures
after known appends (client, CLI and metrics), resets with and without
--dry-run, delete, and clear errors (docs/groups.md)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand import Record
from logstrand.cli import main
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import InvalidArgumentError, NotFoundError
from logstrand.positions import Position, encode_key, encode_value, positions_log_of
from logstrand.records import POSITIONS_LOG_ID, POSITIONS_LOGS
from logstrand.testing import LocalCluster
from logstrand.types import lsn_epoch

if TYPE_CHECKING:
    from collections.abc import Iterator

FAST_METRICS = ("--group-metrics-interval", "0.5")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups"), nodes=3, node_args=FAST_METRICS) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 9, LogAttributes(replication_factor=2))
        yield c


def cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["groups", *args, "--url", url])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> object:
    code, out, err = cli(capsys, url, *args, "--json")
    assert code == 0, (args, out, err)
    return json.loads(out)


def payloads(items: Iterator[object]) -> list[bytes]:
    return [x.payload for x in items if isinstance(x, Record) and x.payload is not None]


def group_metrics(c: LocalCluster) -> dict[str, float]:
    """The group samples of every node (only the positions log's sequencer has any)."""
    out: dict[str, float] = {}
    for cfg in c.nodes.values():
        url = f"http://127.0.0.1:{cfg.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("logstrand_consumer_group_"):
                    name, _, value = line.rpartition(" ")
                    out[name] = float(value)
    return out


def test_positions_survive_a_restart_of_every_node_and_lag_is_counted(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster
    with logstrand.connect(c.url) as client:
        first = client.append_batch(1, [b"a%d" % i for i in range(10)])
        assert client.committed("g", 1) is None
        # Autocommit: what was handed out counts as processed once more is asked for.
        assert payloads(client.read(1, group="g", autocommit=True)) == [
            b"a%d" % i for i in range(10)
        ]
        assert client.committed("g", 1) == first[-1]
        second = client.append_batch(1, [b"b%d" % i for i in range(5)])
        # A reader that stops after two records never commits past what it
        # was asked beyond: the rest is read again (at least once).
        reader = client.read(1, group="g", autocommit=True)
        assert [next(reader).payload for _ in range(2)] == [b"b0", b"b1"]
        reader.close()
        committed = client.committed("g", 1)
        assert committed is not None
        assert committed < second[2]
        client.commit("g", 1, second[1])
        assert client.committed("g", 1) == second[1]

    for node in list(c.nodes):
        c.stop_node(node)
    for node in list(c.nodes):
        c.start_node(node)

    with logstrand.connect(c.url) as client:
        assert client.committed("g", 1) == second[1]
        assert payloads(client.read(1, group="g")) == [b"b2", b"b3", b"b4"]
        # Four more in the new epoch: the lag counts the three unread of the
        # old epoch (up to its bridge) and these.
        third = client.append_batch(1, [b"c%d" % i for i in range(4)])
        assert lsn_epoch(third[0]) > lsn_epoch(second[1])
        time.sleep(0.05)
        (lag,) = client.describe_group("g")
        assert (lag.committed, lag.lag_records) == (second[1], 7)
        assert lag.lag_ms >= 50
        tail = client.tail_lsn(1)
        # Many groups at once (what the metrics use) say the same.
        (many,) = client.group_lags(client.group_positions())["g"]
        assert (many.committed, many.lag_records, many.tail) == (second[1], 7, tail)
        assert many.lag_ms >= 50
        # A position on a log that does not exist is said, not taken as empty.
        with pytest.raises(NotFoundError):
            client.group_lags({"g": [Position("g", 987_654, 1, 0)]})
        assert client.group_lags({}) == {}

    (described,) = cli_json(capsys, c.url, "describe", "g")  # type: ignore[misc]
    assert (described["committed"], described["lag_records"], described["tail"]) == (
        second[1],
        7,
        tail,
    )
    assert cli_json(capsys, c.url, "list") == [
        {"group": "g", "logs": [1], "last_commit_ms": described["committed_ms"]}
    ]
    code, out, _ = cli(capsys, c.url, "describe", "g")
    assert code == 0
    assert "lag (records)" in out

    # The node that sequences the positions log exports the same figures.
    deadline = time.monotonic() + 20
    labels = '{group="g",log="1"}'
    while True:
        samples = group_metrics(c)
        if samples.get(f"logstrand_consumer_group_lag_records{labels}") == 7:
            break
        assert time.monotonic() < deadline, samples
        time.sleep(0.3)
    assert samples[f"logstrand_consumer_group_committed_lsn{labels}"] == second[1]
    assert samples[f"logstrand_consumer_group_lag_seconds{labels}"] > 0


def test_resets_dry_runs_and_delete(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster
    with logstrand.connect(c.url) as client:
        lsns = client.append_batch(2, [b"r%d" % i for i in range(6)])
        client.commit("reset-me", 2, lsns[3])
        middle = client.read(2, lsns[2], lsns[2])
        (third,) = [x for x in middle if isinstance(x, Record)]

    def reset(*args: str) -> dict[str, object]:
        out = cli_json(capsys, c.url, "reset", "reset-me", "--log", "2", *args)
        assert isinstance(out, dict)
        return out

    with logstrand.connect(c.url) as client:
        dry = reset("--to-earliest", "--dry-run")
        assert (dry["before"], dry["after"], dry["dry_run"]) == (lsns[3], 0, True)
        assert client.committed("reset-me", 2) == lsns[3]
        code, out, _ = cli(
            capsys, c.url, "reset", "reset-me", "--log", "2", "--to-earliest", "--dry-run"
        )
        assert code == 0
        assert "dry run: nothing changed" in out
        assert client.committed("reset-me", 2) == lsns[3]

        assert reset("--to-earliest")["after"] == 0
        assert payloads(client.read(2, group="reset-me"))[:1] == [b"r0"]
        assert reset("--to-lsn", str(lsns[1]))["after"] == lsns[1] - 1
        assert client.committed("reset-me", 2) == lsns[1] - 1
        assert payloads(client.read(2, group="reset-me")) == [b"r%d" % i for i in range(1, 6)]
        assert reset("--to-time", str(third.timestamp))["after"] <= lsns[2] - 1
        assert reset("--to-latest")["after"] == client.tail_lsn(2)
        assert payloads(client.read(2, group="reset-me")) == []

        assert cli_json(capsys, c.url, "delete", "reset-me") == {"group": "reset-me", "logs": [2]}
        assert client.committed("reset-me", 2) is None
        assert "reset-me" not in client.group_positions()
        # The positions logs are ordinary (compacted) logs to read.
        assert all(client.log_attributes(p).compacted for p in POSITIONS_LOGS)

        # Clear errors, nothing changed.
        with pytest.raises(InvalidArgumentError, match="bad group name"):
            client.commit("no spaces", 2, 1)
        with pytest.raises(NotFoundError):
            client.commit("g2", 77, 1)
        with pytest.raises(InvalidArgumentError, match="not both"):
            list(client.read(2, 5, group="g2"))
        with pytest.raises(InvalidArgumentError, match="needs a group"):
            list(client.read(2, autocommit=True))
    assert cli(capsys, c.url, "describe", "nobody")[0] == 1
    code, _, err = cli(capsys, c.url, "reset", "g", "--log", "2")
    assert code == 2
    assert "exactly one of --to-lsn" in err
    assert cli(capsys, c.url, "reset", "bad name", "--log", "2", "--to-latest")[0] == 2
    assert cli(capsys, c.url, "reset", "g", "--log", "2", "--to-lsn", "e1nX")[0] == 2


def test_columns_and_arrow_readers_commit_too(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(3, [b"x%d" % i for i in range(100)])
        batches = list(client.read_columns(3, group="cols", autocommit=True))
        assert sum(len(b.lsns) for b in batches) == 100
        assert client.committed("cols", 3) == lsns[-1]
        more = client.append_batch(3, [b"y"])
        rows = list(client.read_arrow(3, group="cols", autocommit=True))
        assert sum(r.num_rows for r in rows) == 1
        assert client.committed("cols", 3) == more[0]


def test_positions_committed_when_there_was_one_positions_log_are_still_read(
    cluster: LocalCluster,
) -> None:
    """Before groups were spread over 16 positions logs, every group's
    positions were in the first.  A group that now lives in another one
    still finds them there until it commits anew, and delete removes both."""
    group = next(
        g for g in (f"old-{i}" for i in range(100)) if positions_log_of(g) != POSITIONS_LOG_ID
    )
    with logstrand.connect(cluster.url) as client:
        client.commit("warm-up", 3, 1)  # the positions logs exist
        lsn = client.append(3, b"x")
        # As an earlier version wrote it.
        client.append(POSITIONS_LOG_ID, encode_value(lsn, 1), key=encode_key(group, 3))
        assert client.committed(group, 3) == lsn
        assert [p.log_id for p in client.group_positions()[group]] == [3]
        client.commit(group, 4, 0)
        assert {p.log_id for p in client.group_positions()[group]} == {3, 4}
        client.commit(group, 3, lsn - 1)  # the group's own log wins from now on
        assert client.committed(group, 3) == lsn - 1
        client.delete_group(group)
    with logstrand.connect(cluster.url) as fresh:  # reads both logs from their start
        assert fresh.committed(group, 3) is None
        assert group not in fresh.group_positions()
