"""``logstrand logs`` and ``logstrand nodes``: results, JSON, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from logstrand.cli import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    u = f"sqlite://{tmp_path}/cli.db"
    monkeypatch.setenv("LOGSTRAND_URL", u)
    for i in (1, 2, 3):
        assert main(["nodes", "add", "--id", str(i), "--address", f"127.0.0.1:{4440 + i}"]) == 0
    return u


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_list_show_update_remove(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "logs", "create", "1..100", "--replication", "2", "--nodeset", "3",
               "--retention", "7d")[0] == 0  # fmt: skip
    assert run(capsys, "logs", "create", "200", "--compact", "--delete-retention", "1h")[0] == 0
    code, out, _ = run(capsys, "logs", "list", "--json")
    assert code == 0
    ranges = json.loads(out)
    assert [(r["first"], r["last"]) for r in ranges] == [(1, 100), (200, 200)]
    assert ranges[0]["attributes"]["retention_ms"] == 7 * 86_400_000
    assert ranges[0]["attributes"]["nodeset_size"] == 3
    assert ranges[1]["attributes"]["cleanup_policy"] == "compact"
    assert ranges[1]["attributes"]["delete_retention_ms"] == 3_600_000
    code, out, _ = run(capsys, "logs", "show", "50", "--json")
    shown = json.loads(out)
    assert (shown["range"], shown["next_epoch"], shown["last_clean_epoch"]) == ([1, 100], 1, 0)
    code, out, _ = run(capsys, "logs", "show", "50")
    assert "retention      7d" in out
    assert (
        run(capsys, "logs", "update", "1..100", "--retention", "1d", "--durability", "fsync")[0]
        == 0
    )
    code, out, _ = run(capsys, "logs", "show", "1", "--json")
    attrs = json.loads(out)["attributes"]
    assert (attrs["retention_ms"], attrs["durability"], attrs["replication_factor"]) == (
        86_400_000,
        "fsync",
        2,
    )
    assert run(capsys, "logs", "remove", "200")[0] == 0
    code, out, _ = run(capsys, "logs", "list")
    assert "1..100" in out
    assert "200" not in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["logs", "create", "5..20"], 1, "overlap the existing range 1..10"),
        (["logs", "create", "11..20", "-r", "4"], 2, "larger than the cluster (3 storage nodes)"),
        (["logs", "create", "11..20", "-r", "abc"], 2, "--replication"),
        (["logs", "create", "x..20"], 2, "bad log range"),
        (["logs", "create", "20..11"], 2, "bad log range"),
        (["logs", "create", "11..20", "--retention", "7q"], 2, "bad duration"),
        (["logs", "create", "11..20", "--bogus"], 2, "No such option"),
        (["logs", "create", "11..20", "--replicate-across", "moon"], 2, "not one of"),
        (["logs", "create", "11", "--nodeset", "1"], 2, "bad nodeset size"),
        (["logs", "create", "11", "--delete-retention", "1d"], 2, "only apply with --compact"),
        (["logs", "update", "1..9", "--retention", "1d"], 1, "no log range 1..9"),
        (["logs", "update", "1..10"], 2, "nothing to change"),
        (["logs", "show", "99"], 1, "not in the configuration"),
        (["logs", "remove", "3..4"], 1, "no log range"),
        (["nodes", "add", "--id", "1", "--address", "127.0.0.1:1"], 1, "already exists"),
        (["nodes", "add", "--id", "9", "--address", "nowhere"], 2, "bad node address"),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(
    url: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    assert main(["logs", "create", "1..10"]) == 0
    got, out, err = run(capsys, *args)
    assert got == code, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_missing_url(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LOGSTRAND_URL", raising=False)
    code, _, err = run(capsys, "logs", "list")
    assert code == 2
    assert "no cluster URL" in err


def test_unreachable_store_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from logstrand.testing import free_port

    code, _, err = run(capsys, "logs", "list", "--url", f"zk://127.0.0.1:{free_port()}/x")
    assert code == 1
    assert "UNAVAILABLE" in err
    assert len(err.strip().splitlines()) == 1, err


def test_entry_point_has_no_traceback(url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "logstrand", "logs", "create", "1..5", "-r", "9"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: replication factor 9")
    assert "Traceback" not in proc.stderr


def test_nodes_list_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = run(capsys, "nodes", "list", "--json")
    nodes = json.loads(out)
    assert [(n["node_id"], n["address"], n["alive"]) for n in nodes] == [
        (1, "127.0.0.1:4441", False),
        (2, "127.0.0.1:4442", False),
        (3, "127.0.0.1:4443", False),
    ]


def test_a_retention_shorter_than_a_partition_is_warned_about(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "logs", "create", "300", "--retention", "10s")
    assert code == 0
    assert "warning:" in err
    assert "15m" in err
    code, _, err = run(capsys, "logs", "create", "301", "--retention", "7d")
    assert code == 0
    assert "warning" not in err


def test_named_ranges_through_the_cli(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "logs", "create", "100..115", "--name", "orders", "-r", "2")
    assert (code, out.strip()) == (0, "created logs 100..115 named orders")
    assert run(capsys, "logs", "create", "200", "-r", "2")[0] == 0
    code, out, _ = run(capsys, "logs", "list")
    assert "100..115" in out  # the table may wrap the cell on a narrow terminal
    assert "(orders)" in out
    code, out, _ = run(capsys, "logs", "list", "--json")
    assert [r.get("name") for r in json.loads(out)] == ["orders", None]
    code, out, _ = run(capsys, "logs", "show", "107", "--json")
    assert (json.loads(out)["name"], json.loads(out)["range"]) == ("orders", [100, 115])
    # The name stands for the range in update and remove.
    assert run(capsys, "logs", "update", "orders", "--retention", "1d")[0] == 0
    code, out, _ = run(capsys, "logs", "show", "100", "--json")
    assert json.loads(out)["attributes"]["retention_ms"] == 86_400_000
    code, _, err = run(capsys, "logs", "create", "300", "--name", "orders")
    assert code != 0
    assert "already named 'orders'" in err
    code, _, err = run(capsys, "logs", "create", "300", "--name", "12")
    assert code != 0
    assert "bad log range name '12'" in err
    code, _, err = run(capsys, "logs", "update", "payments", "--retention", "1d")
    assert code != 0
    assert "no log range is named 'payments'" in err
    assert run(capsys, "logs", "update", "200", "--name", "1st-audit")[0] == 0
    assert run(capsys, "logs", "update", "1st-audit", "--name", "audit")[0] == 0
    assert run(capsys, "logs", "update", "orders", "--name", "")[0] == 0
    code, out, _ = run(capsys, "logs", "list", "--json")
    assert [r.get("name") for r in json.loads(out)] == [None, "audit"]
    assert run(capsys, "logs", "remove", "audit")[0] == 0
    code, out, _ = run(capsys, "logs", "list", "--json")
    assert [(r["first"], r["last"]) for r in json.loads(out)] == [(100, 115)]
