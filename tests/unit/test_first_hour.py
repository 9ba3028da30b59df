"""What a newcomer meets first, without a cluster: the read command's lines,
credentials from the environment, the Spark source's token file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from logstrand.cli._read import _escaped, _formatter
from logstrand.client._async import resolve_connection
from logstrand.errors import InvalidArgumentError
from logstrand.records import POSITIONS_LOG_ID, log_name
from logstrand.spark._options import Auth
from logstrand.types import Record, compose_lsn

if TYPE_CHECKING:
    from pathlib import Path


def test_a_record_is_one_line_whatever_its_bytes() -> None:
    assert _escaped(b"plain text") == "plain text"
    assert _escaped(b"two\nlines\tand a tab") == "two\\nlines\\tand a tab"
    assert _escaped(b"\x00\xff caf\xc3\xa9") == "\\x00\\xff café"
    assert _escaped(None) == "(tombstone)"
    line = _formatter(None)(7, Record(compose_lsn(1, 5), 1000, b"a\nb", None))
    assert line == b"e1n5\t1000\ta\\nb\n"


def test_a_format_as_kcat_writes_fields_as_they_are() -> None:
    r = Record(compose_lsn(2, 3), 1234, b"p\x00y", b"k")
    out = _formatter("%l %o %O %T %k=%s (%S/%K) 100%%\\n")(9, r)
    assert out == f"9 {compose_lsn(2, 3)} e2n3 1234 k=p\x00y (3/1) 100%\n".encode()


def test_credentials_and_url_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("LOGSTRAND_URL", "LOGSTRAND_TOKEN", "LOGSTRAND_CA", "LOGSTRAND_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidArgumentError, match="LOGSTRAND_URL"):
        resolve_connection(None, {})
    monkeypatch.setenv("LOGSTRAND_URL", "zk://127.0.0.1:2181/x")
    assert resolve_connection(None, {}) == ("zk://127.0.0.1:2181/x", None, None)
    monkeypatch.setenv("LOGSTRAND_TOKEN", "lst_x")
    with pytest.raises(InvalidArgumentError, match="LOGSTRAND_CA"):  # a token needs the CA
        resolve_connection(None, {})
    token = tmp_path / "admin.token"
    token.write_text("lst_from_file\n")
    monkeypatch.delenv("LOGSTRAND_TOKEN")
    monkeypatch.setenv("LOGSTRAND_TOKEN_FILE", str(token))
    assert Auth.parse({}).token == "lst_from_file"  # the Spark source, as `dev up --secure` says
    assert Auth.parse({"token": "lst_option"}).token == "lst_option"


def test_internal_logs_are_shown_by_name() -> None:
    assert log_name(POSITIONS_LOG_ID) == "positions"
    assert log_name(7) == "7"


class _FakeSession:
    """What ``logstrand.spark.register`` touches of a SparkSession."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.registered: list[object] = []
        session = self

        class Conf:
            def get(self, name: str) -> str | None:
                return conf.get(name)

        class Context:
            pythonExec = "python3"  # what PySpark takes when nothing names one

            def getConf(self) -> Conf:
                return Conf()

        class Sources:
            def register(self, source: object) -> None:
                session.registered.append(source)

        self.sparkContext = Context()
        self.dataSource = Sources()


def test_spark_workers_run_this_interpreter_unless_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without it the workers started `python3` from PATH, which had neither
    pyarrow nor logstrand (ModuleNotFoundError deep in a Py4J trace)."""
    import sys

    pytest.importorskip("pyspark")
    import logstrand.spark

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    fake = _FakeSession({})
    logstrand.spark.register(fake)  # type: ignore[arg-type]
    assert fake.sparkContext.pythonExec == sys.executable
    assert fake.registered == [logstrand.spark.LogstrandDataSource]
    named = _FakeSession({"spark.pyspark.python": "/opt/py/bin/python"})
    logstrand.spark.register(named)  # type: ignore[arg-type]
    assert named.sparkContext.pythonExec == "python3"  # named: left alone
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    by_env = _FakeSession({})
    logstrand.spark.register(by_env)  # type: ignore[arg-type]
    assert by_env.sparkContext.pythonExec == "python3"
