"""docs/cli.md is the CLI's own description of itself, and stays so."""

from __future__ import annotations

from pathlib import Path

from logstrand.cli._docs import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/cli.md is out of date: .venv/bin/python -m logstrand.cli._docs > docs/cli.md"
    )


def test_every_command_is_documented() -> None:
    text = render()
    for command in ("trim", "info", "status", "read", "append", "logs create", "dev up", "compact"):
        assert f"`logstrand {command}`" in text, command
