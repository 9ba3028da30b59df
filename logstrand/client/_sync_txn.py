"""Transactions of the blocking client (``Client.transaction``): each step
of the trio client's ``Transaction`` carried out on the client's thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ._async import AsyncClient
    from ._transaction import Transaction
    from ._txn_requests import Prepared


class BlockingTransaction:
    """A transaction for blocking code::

        with client.transaction("billing-1") as tx:
            tx.append(orders, b"...")
            tx.commit_positions("billing", {inbox: lsn})

    The block's end commits; an exception out of it aborts (see
    ``AsyncClient.transaction``)."""

    def __init__(
        self,
        call: Callable[[Callable[[], Awaitable[Any]]], Any],
        client: AsyncClient,
        transactional_id: str,
        timeout_s: float,
    ) -> None:
        self._call = call

        # Made on the client's thread: the producers of its transactional
        # ids are the trio client's, which only its thread touches.  (The
        # id and the timeout are checked here, before any ``with``.)
        async def make() -> Transaction:
            return client.transaction(transactional_id, timeout_s=timeout_s)

        self._tx: Transaction = call(make)
        self._entered = False

    def __enter__(self) -> BlockingTransaction:
        self._call(self._tx.__aenter__)
        self._entered = True
        return self

    def __exit__(self, *exc: Any) -> None:
        tx = self._opened()
        self._call(lambda: tx.__aexit__(*exc))

    def _opened(self) -> Transaction:
        if not self._entered:
            raise InvalidArgumentError("use the transaction in 'with'")
        return self._tx

    @property
    def producer(self) -> tuple[int, int]:
        """(producer id, epoch) of the transaction's producer."""
        return self._opened().producer

    def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        """Append one record in the transaction; its LSN."""
        tx = self._opened()
        lsn: int = self._call(lambda: tx.append(log_id, payload, key=key))
        return lsn

    def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> int:
        """Append a batch in the transaction; its first LSN."""
        tx = self._opened()
        lsn: int = self._call(lambda: tx.append_batch(log_id, payloads, keys=keys))
        return lsn

    def commit_positions(self, group: str, positions: Mapping[int, int]) -> None:
        """Commit ``group``'s positions with the transaction."""
        tx = self._opened()
        self._call(lambda: tx.commit_positions(group, positions))

    def prepare(self) -> Prepared | None:
        """Leave the transaction open for another client to commit or abort
        (see ``Transaction.prepare``)."""
        tx = self._opened()

        async def prepare() -> Prepared | None:
            return tx.prepare()

        prepared: Prepared | None = self._call(prepare)
        return prepared

    def commit(self) -> None:
        tx = self._opened()
        self._call(tx.commit)

    def abort(self) -> None:
        tx = self._opened()
        self._call(tx.abort)
