"""Human units: durations like ``7d`` or ``500ms``, sizes like ``1.2 GiB``."""

from __future__ import annotations

import re

_DURATION_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d|w)\s*$")


def parse_duration_ms(text: str) -> int:
    """``"7d"`` → 604800000.  Units: ms, s, m (or min), h, d, w.

    Raises:
        ValueError: not a number followed by one of those units.
    """
    m = _DURATION_RE.match(text)
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number and a unit (ms, s, m, h, d, w)")
    return int(float(m.group(1)) * _DURATION_UNITS_MS[m.group(2)])


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_size(text: str) -> int:
    """``64MiB``, ``500kb``, ``1024`` → bytes."""
    t = text.strip().lower().replace(" ", "")
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num) :]
    if unit not in _SIZE_UNITS or not num:
        raise ValueError(f"{text!r} is not a size (e.g. 64MiB, 500kB, 1024)")
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 64MiB, 500kB, 1024)") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return int(value * _SIZE_UNITS[unit])


def format_duration_ms(ms: int) -> str:
    """The largest unit that divides ``ms`` exactly: 604800000 → ``"7d"``."""
    if ms == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        size = _DURATION_UNITS_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def parse_time_ms(text: str, *, now_ms: int | None = None) -> int:
    """A point in time: epoch milliseconds, ISO 8601 (``2026-11-22T10:00:00``,
    UTC unless it says otherwise), ``now``, or relative (``-10m``, ``10m ago``).

    Raises:
        ValueError: none of those.
    """
    import datetime
    import time

    text = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if text == "now":
        return now
    if text.endswith(" ago"):
        return now - parse_duration_ms(text[:-4])
    if text.startswith("-") and not text[1:].isdigit():
        return now - parse_duration_ms(text[1:])
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"bad time {text!r}: use epoch milliseconds, ISO 8601, 'now' or '10m ago'"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


def looks_like_time(text: str) -> bool:
    """Tell a time (for --from) from an LSN: times have a date, a unit or 'now'."""
    t = text.strip()
    return t == "now" or t.endswith(" ago") or "-" in t or ":" in t
