"""What the blocking and the asyncio clients' forwarded methods share: the
``AsyncClient`` method they stand for, its docstring and its signature less
``self`` (what ``help()`` and the twin tests read), and the check that the
name they are bound to is the method's."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._async import AsyncClient

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
