"""Field validators for wire messages.

Messages validate at construction (h11's rule: an invalid event cannot exist),
so the decoder only has to build the message and turn any ``TypeError`` or
``ValueError`` into a ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import attrs

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _uint(bits: int) -> Validator:
    top = (1 << bits) - 1

    def check(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not int or not 0 <= value <= top:
            raise ValueError(f"{attr.name} must be a u{bits}, got {value!r:.40}")

    return check


u8 = _uint(8)
u16 = _uint(16)
u32 = _uint(32)
u64 = _uint(64)


def i64(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or not -(2**63) <= value < 2**63:
        raise ValueError(f"{attr.name} must be an i64")


def text(max_len: int = 4096) -> Validator:
    def check(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not str or len(value) > max_len:
            raise ValueError(f"{attr.name} must be a str of at most {max_len} chars")

    return check


def blob(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bytes:
        raise ValueError(f"{attr.name} must be bytes")


def boolean(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bool:
        raise ValueError(f"{attr.name} must be a bool")


def optional(inner: Validator) -> Validator:
    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            inner(inst, attr, value)

    return check


def tuple_of(inner: Validator, max_len: int = 1 << 20) -> Validator:
    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not tuple or len(value) > max_len:
            raise ValueError(f"{attr.name} must be a tuple of at most {max_len} items")
        for item in value:
            inner(inst, attr, item)

    return check


def to_tuple(value: Any) -> Any:
    """Converter: CBOR arrays decode as lists; messages hold tuples."""
    return tuple(value) if type(value) is list else value
