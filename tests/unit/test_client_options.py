"""The client's faces take their options from one declaration each
(``client._options``): a face that declared an option of its own again,
or dropped one on the way to the trio client, fails here."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from logstrand import InvalidArgumentError
from logstrand.client import (
    AsyncClient,
    AsyncioClient,
    Client,
    ConnectOptions,
    ManyOptions,
    ReadOptions,
    SubscribeOptions,
    connect,
    open_client,
)
from logstrand.client import _options as options_module
from logstrand.client._async import resolve_connection
from logstrand.client._sync_reads import BlockingReads

FACES = (AsyncClient, AsyncioClient, Client)
SHARED = {
    "read": ReadOptions,
    "read_many": ManyOptions,
    "subscribe": SubscribeOptions,
}


def _options_of(fn: Any) -> Any:
    """The TypedDict that ``fn``'s ``**options`` is typed with (None: no
    ``**options``).  Read from the annotation's text: the faces import the
    TypedDicts for mypy only, as they do every other type."""
    params = inspect.signature(fn).parameters.values()
    kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    if not kw:
        return None
    text = fn.__annotations__[kw[0].name]
    match = re.fullmatch(r"Unpack\[(\w+)\]", text)
    assert match, f"{fn.__qualname__}: **{kw[0].name}: {text}"
    return getattr(options_module, match[1])


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("method", sorted(SHARED))
def test_every_face_takes_the_options_of_one_declaration(face: type, method: str) -> None:
    fn = getattr(face, method)
    assert _options_of(fn) is SHARED[method]
    declared = SHARED[method].__annotations__.keys()
    own = {p.name for p in inspect.signature(fn).parameters.values()}
    assert not own & declared, f"{face.__name__}.{method} declares {own & declared} again"


@pytest.mark.parametrize("method", ["read_batches", "read_columns", "read_arrow"])
def test_the_blocking_columnar_reads_take_the_read_options(method: str) -> None:
    assert _options_of(getattr(Client, method)) is ReadOptions


@pytest.mark.parametrize("fn", [connect, open_client], ids=lambda f: f.__name__)
def test_both_ways_to_open_take_the_connect_options(fn: Any) -> None:
    assert _options_of(fn) is ConnectOptions
    assert list(inspect.signature(fn).parameters) == ["url", "options"]


def test_an_unknown_option_is_a_clear_error_not_ignored() -> None:
    with pytest.raises(InvalidArgumentError, match=r"read: unknown options \['single_cpy'\]"):
        AsyncClient.read(None, 1, single_cpy=False)  # type: ignore[arg-type,call-arg]
    with pytest.raises(InvalidArgumentError, match=r"connect: unknown options \['tokn'\]"):
        resolve_connection("sqlite:///x.db", {"tokn": "t"})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(InvalidArgumentError, match="subscribe: unknown options"):
        AsyncClient.subscribe(None, "g", [1], auto_commit=False)  # type: ignore[arg-type,call-arg]


class _Recording:
    """A trio client that records what its reads were asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def read(self, *args: Any, **options: Any) -> Any:
        self.asked.append((args, options))
        raise _Stop


class _Stop(Exception):
    pass


class _Blocking(BlockingReads):
    def __init__(self) -> None:
        self.inner = _Recording()

    @property
    def async_client(self) -> Any:
        return self.inner


@pytest.mark.parametrize("method", ["read", "read_batches", "read_columns", "read_arrow"])
def test_the_blocking_reads_pass_every_option_on_unchanged(method: str) -> None:
    face = _Blocking()
    options: ReadOptions = {
        "single_copy": False,
        "show_compacted": True,
        "group": None,
        "autocommit": False,
        "access_gaps": True,
        "isolation": "committed",
    }
    with pytest.raises(_Stop):
        next(iter(getattr(face, method)(7, 3, None, **options)))
    assert face.inner.asked == [((7, 3, None), options)]
