"""``Client`` (blocking) offers every public method of ``AsyncClient``, with
the same signature where it forwards (``client._sync._blocking``)."""

from __future__ import annotations

import inspect

from logstrand.client._async import AsyncClient
from logstrand.client._sync import Client, _blocking

#: Methods of AsyncClient that the blocking client offers in another form.
_RESHAPED = {
    "append": "through the producer's buffer, shared by every thread (append_async)",
    "read": "an iterator of records and gaps, pulled in batches",
    "read_many": "an iterator of (log, item) pairs",
    "subscribe": "an iterator of (log, item) pairs; closing it leaves the group",
    "transaction": "a BlockingTransaction: a context manager whose steps block",
    "aclose": "close()",
}


def _public(cls: type, *, mixins: bool = False) -> dict[str, object]:
    """The class's public methods; with ``mixins``, its bases' too (the
    nearest wins: the blocking client's reads are ``BlockingReads``')."""
    out: dict[str, object] = {}
    for klass in reversed(cls.__mro__[:-1]) if mixins else (cls,):  # (not object's)
        for name, value in vars(klass).items():
            if not name.startswith("_") and (callable(value) or isinstance(value, _blocking)):
                out[name] = value
    return out


def test_every_public_async_method_has_its_blocking_twin() -> None:
    mine = _public(Client, mixins=True)
    for name, method in _public(AsyncClient).items():
        if name == "aclose":
            assert callable(mine["close"])
            continue
        assert name in mine, f"Client has no twin of AsyncClient.{name}"
        twin = mine[name]
        if isinstance(twin, _blocking):
            assert twin.method is method
            continue
        if name in _RESHAPED:
            continue
        if inspect.iscoroutinefunction(method):
            raise AssertionError(f"Client.{name} repeats AsyncClient.{name}: use _blocking")
        # A plain method (no waiting): the same parameters.
        assert inspect.signature(twin) == inspect.signature(method), name  # type: ignore[arg-type]


def test_a_twin_has_the_signature_and_the_docstring_of_its_method() -> None:
    twin = vars(Client)["trim"]
    assert isinstance(twin, _blocking)
    assert twin.__doc__ == AsyncClient.trim.__doc__

    class Fake(Client):
        def __init__(self) -> None:  # no cluster: only the forwarding is looked at
            self.calls: list[object] = []

        def _call(self, fn: object, *args: object) -> object:
            self.calls.append(fn)
            return 7

        @property
        def async_client(self) -> AsyncClient:
            return None  # type: ignore[return-value]

    fake = Fake()
    bound = fake.trim
    assert inspect.signature(bound) == inspect.signature(AsyncClient.trim).replace(
        parameters=list(inspect.signature(AsyncClient.trim).parameters.values())[1:]
    )
    assert bound(3, 10) == 7
    assert fake.trim is bound  # made once per client
    assert len(fake.calls) == 1


def test_every_public_async_method_has_its_asyncio_twin() -> None:
    """``AsyncioClient`` (the client under asyncio) offers what ``AsyncClient``
    does, forwarded with the same signature, or reshaped for asyncio."""
    from logstrand.client._asyncio import AsyncioClient, _awaited

    reshaped = {
        "read": "an AsyncioReadStream: the same arguments, records crossing in batches",
        "read_many": "an AsyncioReadStream of pairs: the same arguments",
        "subscribe": "an AsyncioReadStream of pairs: the same arguments",
    }
    mine = vars(AsyncioClient)
    for name, method in _public(AsyncClient).items():
        assert name in mine, f"AsyncioClient has no twin of AsyncClient.{name}"
        twin = mine[name]
        if isinstance(twin, _awaited):
            assert twin.method is method
        elif name in reshaped:
            assert (
                list(inspect.signature(twin).parameters)[1:]
                == list(inspect.signature(method).parameters)[1:]
            )
        elif inspect.iscoroutinefunction(method) and name != "aclose":
            raise AssertionError(f"AsyncioClient.{name} repeats AsyncClient.{name}: use _awaited")
