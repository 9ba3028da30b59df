"""``logstrand node``'s options made from ``NodeOptions``'s declarations
(``storage._options.option``): one typer option per declared field, named
by its flag, typed and checked by its kind and bounds, and the values turned
back into ``NodeOptions`` fields.  A duration or size is typed as text
(``5s``, ``64MiB``) and checked here, with the flag in the message."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from .._units import format_duration_ms, format_size, parse_duration_ms, parse_size
from ..storage._options import declared
from ._common import fail


def _name(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def parameters() -> list[inspect.Parameter]:
    """One keyword parameter per declared option, for ``node``'s signature."""
    out = []
    for field in declared():
        meta = field.metadata
        kind, low, high = meta["kind"], meta["low"], meta["high"]
        fixed: Any = field.default
        if kind in ("duration", "size"):
            text = format_duration_ms if kind == "duration" else format_size
            default: Any = text(fixed)
            annotation: Any = Annotated[str, typer.Option(meta["flag"], help=meta["help"])]
        else:
            cast = float if kind == "seconds" else int
            default = cast(fixed)
            annotation = Annotated[
                cast, typer.Option(meta["flag"], help=meta["help"], min=low, max=high)
            ]
        out.append(
            inspect.Parameter(
                _name(meta["flag"]),
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=annotation,
            )
        )
    return out


def values(params: dict[str, Any]) -> dict[str, Any]:
    """The ``NodeOptions`` fields the command line (or file) gave: durations
    and sizes parsed, bounds checked (one line and exit 2 when one is not)."""
    out: dict[str, Any] = {}
    for field in declared():
        meta = field.metadata
        flag, kind, low = meta["flag"], meta["kind"], meta["low"]
        value = params[_name(flag)]
        if kind in ("duration", "size"):
            try:
                value = parse_duration_ms(value) if kind == "duration" else parse_size(value)
            except ValueError as exc:
                fail(f"{flag}: {exc}")
            if low is not None and value < low:
                shown = format_duration_ms(int(low)) if kind == "duration" else format_size(low)
                fail(f"{flag} must be at least {shown}")
        out[field.name] = value
    return out
