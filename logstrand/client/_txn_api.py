"""The client's transactions (``_transaction``): ``transaction`` and
``transactions``, a part of ``AsyncClient``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._transaction import Transaction, TxnProducer, abort_transaction, new_producer

if TYPE_CHECKING:
    from ..positions._client import Groups


class TxnApi:
    """``AsyncClient``'s transactions."""

    _groups: Groups
    #: Transactional id -> its producer in this client (``AsyncClient``
    #: makes it empty).
    _txn_producers: dict[str, TxnProducer]

    def transaction(self, transactional_id: str, *, timeout_s: float = 60.0) -> Transaction:
        """A transaction of ``transactional_id``: appends to any logs and
        positions of consumer groups that committed readers see all at once
        or not at all (docs/transactions.md)::

            async with client.transaction("billing-1") as tx:
                await tx.append(orders, b"...")
                await tx.append(audit, b"...")
                await tx.commit_positions("billing", {inbox: lsn})

        The block's end commits; an exception out of it aborts.  The first
        transaction of an id in a client fences every other producer of the
        id (Kafka's ``init_transactions``); the client's later ones go on
        with that producer, one at a time.  A transaction open for longer
        than ``timeout_s`` is aborted by its coordinator.

        Raises (in the block): FencedError (another producer of the id took
        over), InvalidArgumentError (a bad id, log or position),
        TransientError (no coordinator took the request in time).
        """
        wanted = new_producer(transactional_id, timeout_s)  # checks both
        producer = self._txn_producers.get(transactional_id)
        if producer is None or producer.fenced or producer.timeout_ms != wanted.timeout_ms:
            producer = self._txn_producers[transactional_id] = wanted
        return Transaction(self, producer)  # type: ignore[arg-type]

    async def transactions(self) -> dict[str, dict[str, Any]]:
        """Every transactional id's state, by id (docs/transactions.md)."""
        return await self._groups.transactions()

    async def abort_transaction(self, transactional_id: str) -> None:
        """Abort the id's open transaction, whoever holds it (an operator's
        step, ``logstrand transactions abort``): its producer is fenced, and
        nothing of the transaction is ever visible to committed readers.

        Raises:
            NotFoundError: no such transactional id.
            InvalidArgumentError: it has no open transaction.
        """
        await abort_transaction(self, transactional_id)  # type: ignore[arg-type]
