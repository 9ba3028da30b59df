"""The client's transactions (``_transaction``): ``transaction`` and
``transactions``, a part of ``AsyncClient``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._transaction import Transaction, TxnProducer, new_producer
from ._txn_requests import Prepared, abort_transaction, end_prepared

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

    async def transaction_state(self, transactional_id: str) -> dict[str, Any] | None:
        """One transactional id's state (None: no such id): its producer id
        and epoch (``pid``, ``epoch``), its transaction's ``state``
        (Ongoing, PrepareCommit, CompleteCommit, ...), the ``logs`` and
        ``groups`` it wrote to, and the ``tag`` of its last commit."""
        return await self._groups.transaction_state(transactional_id)

    async def commit_prepared(self, prepared: Prepared, *, tag: str = "") -> None:
        """Commit a transaction that ``Transaction.prepare`` left open,
        from any client (two-phase commit: a Spark driver commits what its
        tasks wrote).  ``tag`` (at most 256 characters) is kept as the
        id's last commit's (``transaction_state``).  Committing it again is
        no error.

        Raises:
            FencedError: a newer producer of the id took over, or its
                timeout aborted it: nothing of it will be visible.
        """
        await end_prepared(self, prepared, commit=True, tag=tag)  # type: ignore[arg-type]

    async def abort_prepared(self, prepared: Prepared) -> None:
        """Abort a transaction that ``Transaction.prepare`` left open (one
        aborted or fenced already: nothing to do)."""
        await end_prepared(self, prepared, commit=False)  # type: ignore[arg-type]

    async def abort_transaction(self, transactional_id: str) -> None:
        """Abort the id's open transaction, whoever holds it (an operator's
        step, ``logstrand transactions abort``): its producer is fenced, and
        nothing of the transaction is ever visible to committed readers.

        Raises:
            NotFoundError: no such transactional id.
            InvalidArgumentError: it has no open transaction.
        """
        await abort_transaction(self, transactional_id)  # type: ignore[arg-type]
