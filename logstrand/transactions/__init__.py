"""Transactions (KIP-98): a transactional id's producer, its transaction's
states and the markers that end it (``_coordinator``, pure); what a
reader knows of one log's transactions (``_index``, pure).  The Kafka
front runs it (``groups._txns``), its state kept in the positions logs;
the logs' own markers and read_committed readers are issue 58's next steps
(docs/transactions.md)."""

from ._coordinator import (
    EPOCH_MAX,
    EXPIRY_MS,
    MAX_TIMEOUT_MS,
    TXN_ID_RE,
    Markers,
    State,
    Txn,
    TxnCoordinator,
    TxnError,
)
from ._index import (
    ABORTED_KEPT_MAX,
    Aborted,
    TxnIndex,
    decode_marker,
    encode_marker,
    producer_key,
    producer_of,
)

__all__ = [
    "ABORTED_KEPT_MAX",
    "EPOCH_MAX",
    "EXPIRY_MS",
    "MAX_TIMEOUT_MS",
    "TXN_ID_RE",
    "Aborted",
    "Markers",
    "State",
    "Txn",
    "TxnCoordinator",
    "TxnError",
    "TxnIndex",
    "decode_marker",
    "encode_marker",
    "producer_key",
    "producer_of",
]
