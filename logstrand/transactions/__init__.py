"""Transactions (KIP-98): a transactional id's producer, its transaction's
states and the markers that end it (``_coordinator``, pure).  The shells
that run it on a node, write its markers and serve it to Kafka clients and
logstrand's own are to come (issue 58)."""

from ._coordinator import EPOCH_MAX, Markers, State, Txn, TxnCoordinator, TxnError

__all__ = ["EPOCH_MAX", "Markers", "State", "Txn", "TxnCoordinator", "TxnError"]
