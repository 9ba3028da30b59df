"""Human units: durations like ``7d`` or ``500ms``, sizes like ``1.2 GiB``.

Numbers are ASCII digits only (``int()`` would read ``𝟙`` or ``١`` as 1),
exact (no float on the way: ``1.1s`` is 1100 ms, not 1100.0000000000002),
whole (``0.5ms`` is no duration), and bounded: a duration fits in
``DURATION_MS_MAX`` milliseconds, a size in ``SIZE_MAX`` bytes.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: The longest duration anything takes (2^53 - 1 ms: 285,616 years; a JSON
#: reader with doubles keeps it exact).
DURATION_MS_MAX = 2**53 - 1
#: The largest size (a signed 64-bit byte count).
SIZE_MAX = 2**63 - 1
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


def parse_uint(text: str, what: str, *, low: int = 0, high: int = 2**64 - 1) -> int:
    """A whole number in ASCII digits, ``low`` to ``high``.

    Raises:
        ValueError: anything else, saying what ``what`` must be.
    """
    t = text.strip()
    if not t.isascii() or not t.isdigit():
        raise ValueError(f"bad {what} {text!r}: use digits 0-9")
    value = int(t)
    if not low <= value <= high:
        raise ValueError(f"bad {what} {text!r}: must be {low} to {high}")
    return value


_DURATION_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}
_DURATION_RE = re.compile(r"^\s*" + _NUMBER + r"\s*(ms|s|min|m|h|d|w)\s*$", re.ASCII)


def parse_duration_ms(text: str) -> int:
    """``"7d"`` → 604800000.  Units: ms, s, m (or min), h, d, w.

    Raises:
        ValueError: not a number followed by one of those units, not a whole
            number of milliseconds, or longer than ``DURATION_MS_MAX``.
    """
    m = _DURATION_RE.match(text)
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number and a unit (ms, s, m, h, d, w)")
    return _whole(
        m.group(1), _DURATION_UNITS_MS[m.group(2)], DURATION_MS_MAX, f"duration {text!r}", "ms"
    )


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


_SIZE_RE = re.compile(r"^" + _NUMBER + r"([a-z]*)$", re.ASCII)


def parse_size(text: str) -> int:
    """``64MiB``, ``500kb``, ``1024`` → bytes.

    Raises:
        ValueError: not a number and a unit, not a whole number of bytes, or
            more than ``SIZE_MAX``.
    """
    t = text.strip().lower().replace(" ", "")
    m = _SIZE_RE.match(t)
    if not m or m.group(2) not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 64MiB, 500kB, 1024)")
    return _whole(m.group(1), _SIZE_UNITS[m.group(2)], SIZE_MAX, f"size {text!r}", "bytes")


def _whole(number: str, unit: int, most: int, what: str, base: str) -> int:
    """``number`` times ``unit``, exactly: a whole number of ``base`` from 0
    to ``most`` (a ValueError about ``what`` otherwise)."""
    value = Fraction(number) * unit
    if value.denominator != 1:
        raise ValueError(f"bad {what}: not a whole number of {base}")
    if value > most:
        raise ValueError(f"bad {what}: more than {most} {base}")
    return int(value)


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
    if text.startswith("-") and not (text[1:].isascii() and text[1:].isdigit()):
        return now - parse_duration_ms(text[1:])
    if text.isascii() and text.isdigit():
        return parse_uint(text, "time")
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


def format_size(n: int) -> str:
    """The largest binary unit that divides ``n`` exactly: 67108864 → ``64MiB``."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
