"""``logstrand node --config`` (a TOML file under the command line),
``--print-config``, ``--version``, shell completion, and ``logstrand tls``."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from typing import TYPE_CHECKING

import pytest
import typer

from logstrand.cli import main

if TYPE_CHECKING:
    from pathlib import Path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_file_gives_options_and_the_command_line_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(
        "id = 3\n"
        'url = "zk://10.0.0.9:2181/prod"\n'
        'data-dir = "/var/lib/logstrand"\n'
        'listen = "0.0.0.0:4440"\n'
        'advertise = "10.0.0.3:4440"\n'
        'metrics = "10.0.0.3:9100"\n'
        "rebuild_rate = 1048576\n"  # a number where the option takes a size
        "recovery_stall = 20\n"
        'log_format = "json"\n'
    )
    code, out, err = run(
        capsys, "node", "--config", str(cfg), "--print-config", "--recovery-stall", "7"
    )
    assert code == 0, err
    doc = tomllib.loads(out)  # what it prints is a configuration file itself
    assert doc["id"] == 3
    assert doc["data_dir"] == "/var/lib/logstrand"
    assert doc["advertise"] == "10.0.0.3:4440"
    assert doc["rebuild_rate"] == "1048576"
    assert doc["recovery_stall"] == 7.0  # the command line over the file
    assert doc["log_format"] == "json"
    assert doc["idle_timeout"] == 600.0  # the default, shown
    # Printed again, it gives the same configuration.
    again = tmp_path / "again.toml"
    again.write_text(out)
    code, out2, _ = run(capsys, "node", "--config", str(again), "--print-config")
    assert code == 0
    assert tomllib.loads(out2) == doc


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("id = [1]\n", "must be a string, number or boolean"),
        ("id = \n", "is not TOML"),
        ('id = 1\nlisten = "nowhere"\n', "--listen: 'nowhere' is not HOST:PORT"),
        ('id = 1\nlog_level = "chatty"\n', "--log-level"),
        ('id = "one"\n', "Invalid value for '--id'"),
    ],
)
def test_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(text)
    code, _, err = run(capsys, "node", "--config", str(cfg), "--print-config")
    assert code == 2
    assert message in " ".join(err.split())
    code, _, err = run(capsys, "node", "--config", str(tmp_path / "missing.toml"))
    assert code == 2
    assert "cannot read" in err


def test_version_and_completion() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.startswith("logstrand ")
    env = {**os.environ, "_LOGSTRAND_COMPLETE": "complete_bash", "COMP_WORDS": "logstrand gro",
           "COMP_CWORD": "1"}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "logstrand"], capture_output=True, text=True,
                         env=env)  # fmt: skip
    assert out.stdout.split() == ["groups"]


def test_tls_issues_node_and_user_certificates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography import x509

    ca = tmp_path / "tls"
    code, _, _ = run(capsys, "tls", "node", str(ca), "--id", "2", "--host", "10.0.0.2",
                       "--host", "n2.example")  # fmt: skip
    assert code == 0
    cert = x509.load_pem_x509_certificate((ca / "node2.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "logstrand:node:2" in sans.get_values_for_type(x509.UniformResourceIdentifier)
    assert "n2.example" in sans.get_values_for_type(x509.DNSName)
    assert oct((ca / "node2.key").stat().st_mode & 0o777) == "0o600"
    ca_before = (ca / "ca.pem").read_bytes()
    assert run(capsys, "tls", "user", str(ca), "--name", "etl")[0] == 0
    assert (ca / "ca.pem").read_bytes() == ca_before  # the same CA, kept
    assert run(capsys, "tls", "user", str(ca), "--name", "no spaces")[0] == 2


def test_the_shipped_example_configuration_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "deploy" / "node.toml.example"
    code, out, err = run(capsys, "node", "--config", str(example), "--print-config")
    assert code == 0, err
    assert tomllib.loads(out)["advertise"] == "10.0.0.21:4440"


def test_json_logs_are_one_object_a_line() -> None:
    import json
    import logging

    from logstrand.cli._node_setup import JsonFormatter as _JsonFormatter

    record = logging.LogRecord(
        "logstrand.node", logging.WARNING, "x", 1, "node %d: %s", (3, "up"), None
    )
    doc = json.loads(_JsonFormatter(3).format(record))
    assert (doc["level"], doc["node"], doc["logger"], doc["msg"]) == (
        "warning", 3, "logstrand.node", "node 3: up"
    )  # fmt: skip
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    line = _JsonFormatter(3).format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc"]


def test_every_declared_node_option_reaches_the_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``NodeOptions``'s declared fields are ``node``'s options: each one, set
    on the command line, is the value the node is made with."""
    import logstrand.storage
    from logstrand._units import format_duration_ms, format_size
    from logstrand.cli import _node
    from logstrand.storage._options import declared

    made: list[object] = []

    class FakeNode:
        def __init__(self, *args: object, options: object, **kwargs: object) -> None:
            made.append(options)

        async def run(self) -> None:
            return None

    monkeypatch.setattr(logstrand.storage, "Node", FakeNode)
    monkeypatch.setattr(_node, "setup_logging", lambda *a: None)
    args, want = [], {}
    for field in declared():
        meta, default = field.metadata, field.default
        kind = meta["kind"]
        if kind == "seconds":
            value: object = default + 0.5
            text = str(value)
        elif kind == "int":
            value = default - 1 if default - 1 >= (meta["low"] or 0) else default + 1
            text = str(value)
        elif kind == "duration":
            value = default + 1000
            text = format_duration_ms(value)  # type: ignore[arg-type]
        else:
            value = default + 1024
            text = format_size(value)  # type: ignore[arg-type]
        args += [meta["flag"], text]
        want[field.name] = value
    assert len(want) >= 25
    code, _, err = run(capsys, "node", "--id", "1", "--url", "sqlite:///nowhere.db", *args)
    assert code == 0, err
    [options] = made
    assert {name: getattr(options, name) for name in want} == want
    # A value out of its bounds is one line naming the flag, and exit 2.
    code, _, err = run(capsys, "node", "--id", "1", "--url", "sqlite:///x.db", "--send-queue", "1")
    assert code == 2
    assert "--send-queue must be at least 1KiB" in err


def test_the_kafka_front_and_console_options_reach_their_extensions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logstrand.storage
    from logstrand.cli import _node

    made: list[tuple[object, ...]] = []

    class FakeNode:
        def __init__(self, *args: object, extensions: tuple[object, ...], **kw: object) -> None:
            made.append(extensions)

        async def run(self) -> None:
            return None

    monkeypatch.setattr(logstrand.storage, "Node", FakeNode)
    monkeypatch.setattr(_node, "setup_logging", lambda *a: None)
    base = ["node", "--id", "1", "--url", "sqlite:///nowhere.db"]
    code, _, err = run(
        capsys,
        *base,
        "--kafka-port",
        "9092",
        "--kafka-budget",
        "64MiB",
        "--kafka-decode-budget",
        "32MiB",
        "--http-port",
        "8080",
        "--http-allowed-hosts",
        "logs.corp.example, 10.1.1.1",
    )
    assert code == 0, err
    kinds = {type(e).__name__: e for e in made[0]}
    limits = kinds["NodeKafkaFront"].options.limits  # type: ignore[attr-defined]
    assert (limits.budget_bytes, limits.decoded_bytes) == (64 << 20, 32 << 20)
    hosts = kinds["NodeConsole"].options.allowed_hosts  # type: ignore[attr-defined]
    assert hosts == ("logs.corp.example", "10.1.1.1")
    for bad, message in (
        (["--kafka-port", "9092", "--kafka-budget", "1KiB"], "--kafka-budget: at least 1MiB"),
        (["--kafka-port", "9092", "--kafka-decode-budget", "lots"], "--kafka-decode-budget"),
        (["--http-allowed-hosts", "x.example"], "--http-allowed-hosts needs --http-port"),
        (
            ["--kafka-port", "9092", "--kafka-max-transaction-timeout", "2h"],
            "--kafka-max-transaction-timeout: more than 0 and at most 1h",
        ),
    ):
        code, _, err = run(capsys, *base, *bad)
        assert code == 2
        assert message in err


def test_kafka_options_without_a_kafka_port_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A node told how to serve Kafka but not where says so (exit 2), and a
    partition count out of range is refused by the option itself."""
    from logstrand.cli._node_kafka import kafka_front

    base = {
        "kafka_port": None,
        "kafka_advertise": None,
        "kafka_auto_create": False,
        "kafka_transactions": False,
    }
    assert kafka_front({**base, "kafka_num_partitions": 1}, None) is None  # type: ignore[arg-type]
    for bad in ({"kafka_num_partitions": 3}, {"kafka_num_partitions": 1, "kafka_transactions": 1}):
        with pytest.raises(typer.Exit) as refused:
            kafka_front({**base, **bad}, None)  # type: ignore[arg-type]
        assert refused.value.exit_code == 2
        assert "need --kafka-port" in " ".join(capsys.readouterr().err.split())
    code, _, err = run(capsys, "node", "--kafka-port", "9092", "--kafka-num-partitions", "0")
    assert code == 2
    assert "--kafka-num-partitions" in err
