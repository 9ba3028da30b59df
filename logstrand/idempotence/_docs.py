"""Idempotent appends' documents in the epoch store (``logstrand.idempotence``).

    producer_ids        the next producer id to hand out
    producers/<log>     the log's producer table as of the end of an epoch:
                        {"epoch": e, "entries": base64 of Producers.pack}

A recovery writes the table of every epoch up to ``e`` before it makes ``e``
the last clean epoch, so the table always covers at least the last clean
epoch; a new sequencer starts from it and adds the unclean epochs' batches.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from ._model import DERIVED_BIT, Producers

if TYPE_CHECKING:
    from collections.abc import Callable


class ProducerDocs:
    """Mixed into ``EpochStore``: needs its ``_doc`` and ``_update``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]

    def allocate_producer_id(self) -> int:
        """A producer id no other caller ever gets (ids with the top bit set
        are left to ``producers.derived_id``)."""
        doc = self._update("producer_ids", lambda d: {"next": int((d or {"next": 1})["next"]) + 1})
        pid = int(doc["next"]) - 1
        assert pid < DERIVED_BIT
        return pid

    def producer_snapshot(self, log_id: int) -> tuple[int, Producers]:
        """The epoch the log's producer table was last written for, and the table."""
        doc = self._doc(f"producers/{log_id}")
        if doc is None:
            return 0, Producers()
        out = Producers()
        out.update(Producers.unpack_entries(base64.b64decode(doc["entries"])))
        return int(doc["epoch"]), out

    def set_producer_snapshot(self, log_id: int, epoch: int, producers: Producers) -> int:
        """Record the table as of the end of ``epoch``, unless one for a later
        epoch is there already; returns the epoch recorded."""
        entries = base64.b64encode(producers.pack()).decode()

        def change(doc: Any) -> Any:
            if doc is not None and int(doc["epoch"]) > epoch:
                return doc
            return {"epoch": epoch, "entries": entries}

        return int(self._update(f"producers/{log_id}", change)["epoch"])
