"""Idempotent appends, in one place (docs/delivery.md).

* ``_model``: the rules: a log's table of producers and the verdict on a new
  batch (``Producers``, ``Sent``, ``Verdict``), producer ids; pure.
* ``_client``: the client's numbering of its batches per log, and its
  producer id (``LogProducer``, ``ProducerIds``).
* ``_recovery``: what a new sequencer keeps of the producers of the epochs
  it recovers; pure.
* ``_stored``: a node's tables, written with the batches they name
  (LogsDB's ``ProducerTables``).
* ``_docs``: the epoch store's snapshot of the producers of clean epochs.

This face holds the pure model only: each part of the node and the client
imports the piece it uses, so that LogsDB pulls in no client, and the
client no storage.
"""

from ._model import (
    DERIVED_BIT,
    ENTRY_BYTES,
    EXPIRY_MS,
    PRODUCERS_MAX,
    WINDOW,
    Producers,
    Sent,
    Verdict,
    derived_id,
    pack_entries,
)

__all__ = [
    "DERIVED_BIT",
    "ENTRY_BYTES",
    "EXPIRY_MS",
    "PRODUCERS_MAX",
    "WINDOW",
    "Producers",
    "Sent",
    "Verdict",
    "derived_id",
    "pack_entries",
]
