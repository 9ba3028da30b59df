"""What ``logstrand node`` reads before it runs a node: the TOML file of
its options, addresses, the free-space floor, and its logging."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path  # typer reads the callback's annotations at run time
from typing import Any

import typer

from ._common import fail, size_option

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
#: Keys of the file that are not the parameter's name.
_KEYS = {"id": "node_id"}
_NOT_IN_FILE = ("config", "print_config")


def load_config(ctx: typer.Context, value: Path | None) -> Path | None:
    """``--config``: the file's values become the options' defaults."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        doc = tomllib.loads(value.read_text())
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {value}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{value} is not TOML: {exc}") from exc
    names = {p.name for p in ctx.command.params} - set(_NOT_IN_FILE)
    defaults: dict[str, Any] = {}
    for key, v in doc.items():
        name = _KEYS.get(key, key.replace("-", "_"))
        if name not in names:
            raise typer.BadParameter(f"{value}: unknown key {key!r} (see logstrand node --help)")
        if not isinstance(v, (str, int, float, bool)):
            raise typer.BadParameter(f"{value}: {key} must be a string, number or boolean")
        defaults[name] = v  # converted and checked as the option's own value is
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def config_toml(params: dict[str, Any]) -> str:
    """The effective options as a configuration file (unset ones left out)."""
    lines = []
    for name, value in params.items():
        if name in _NOT_IN_FILE or value is None:
            continue
        key = next((k for k, n in _KEYS.items() if n == name), name)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        else:
            text = json.dumps(str(value))  # a TOML basic string is a JSON string
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def host_port(text: str | None, option: str) -> tuple[str, int] | None:
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"{option}: {text!r} is not HOST:PORT")
    return host, int(port)


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "node": self.node_id,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def setup_logging(node_id: int, level: int, fmt: str) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter(node_id))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s node{node_id} %(levelname)s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kazoo").setLevel(max(level, logging.WARNING))


def parse_min_free(text: str) -> tuple[int, float]:
    """``--min-free``: (bytes, 0.0) for a size, (0, fraction) for a percentage."""
    t = text.strip()
    if t.endswith("%"):
        try:
            pct = float(t[:-1])
        except ValueError:
            fail(f"--min-free: {text!r} is not a size (1GiB) or a percentage (5%)")
        if not 0 <= pct < 100:
            fail(f"--min-free: {text!r} must be at least 0% and below 100%")
        return 0, pct / 100
    return size_option(t, "--min-free"), 0.0
