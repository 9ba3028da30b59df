"""``logstrand node``'s tiered-storage options: a bad one is one line and
exit 2, before the node touches its cluster or its disk."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from logstrand.cli import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tier-orphan-age", "soon"), "--tier-orphan-age: bad duration 'soon'"),
        (("--tier-object-size", "10"), "--tier-object-size: at least 1KiB"),
        (("--tier-cache", "lots"), "--tier-cache: 'lots' is not a size"),
        (("--tier-url", "http://bucket/x"), "s3://BUCKET"),
    ],
)
def test_a_bad_tier_option_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    url = f"sqlite:///{tmp_path}/none.db"
    argv = ["node", "--id", "1", "--url", url, "--data-dir", str(tmp_path / "d")]
    argv += ["--tier-url", "s3://bucket/p", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split())
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
    assert not (tmp_path / "none.db").exists()


def test_tier_endpoint_without_a_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["node", "--id", "1", "--url", f"sqlite:///{tmp_path}/none.db"]
    assert main([*argv, "--tier-endpoint", "http://127.0.0.1:1"]) == 2
    assert "need --tier-url" in capsys.readouterr().err
