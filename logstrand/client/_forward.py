"""What the blocking and the asyncio clients' forwarded methods share: the
``AsyncClient`` method they stand for, its docstring and its signature less
``self`` (what ``help()`` and the twin tests read), and the check that the
name they are bound to is the method's."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._async import AsyncClient


class _Blocking(Protocol):
    """What ``_blocking`` needs of the blocking client (``Client``)."""

    @property
    def async_client(self) -> AsyncClient: ...

    def _call(self, fn: Any, *args: Any) -> Any: ...


P = ParamSpec("P")
R = TypeVar("R")


class Forward(Generic[P, R]):
    """A twin of an ``AsyncClient`` method on another client class; the
    subclass's ``__get__`` makes the bound call (once per client: it is then
    kept in the instance's ``__dict__``)."""

    def __init__(self, method: Callable[Concatenate[AsyncClient, P], Awaitable[R]]) -> None:
        self.method = method
        self.name = method.__name__
        self.__doc__ = method.__doc__
        whole = inspect.signature(method)
        self.signature = whole.replace(parameters=list(whole.parameters.values())[1:])

    def __set_name__(self, owner: type, name: str) -> None:
        assert name == self.name, f"{owner.__name__}.{name} forwards to AsyncClient.{self.name}"

    def keep(self, client: Any, call: Any) -> Any:
        """``call`` as the client's own attribute, with the method's signature."""
        call.__signature__ = self.signature
        client.__dict__[self.name] = call  # later lookups find it first
        return call


class _blocking(Forward[P, R]):
    """``Client``'s twin of an ``AsyncClient`` method: the same signature and
    docstring (mypy checks calls against them), run on the client's trio
    thread and waited for.  Made once per client and method, on first use."""

    @overload
    def __get__(self, client: None, owner: type) -> _blocking[P, R]: ...
    @overload
    def __get__(self, client: _Blocking, owner: type) -> Callable[P, R]: ...
    def __get__(self, client: _Blocking | None, owner: type) -> _blocking[P, R] | Callable[P, R]:
        if client is None:
            return self
        method = self.method

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            target = client.async_client
            result: R = client._call(lambda: method(target, *args, **kwargs))
            return result

        return self.keep(client, call)  # type: ignore[no-any-return]
