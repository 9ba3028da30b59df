"""Per-log documents of the epoch store beside its epochs: trim points,
compaction state, and how recoveries ended epochs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..records import check_log_id
from ._model import EpochEnd

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


#: The epoch-store document of the trim feed (``LogDocs.trims_changed``).
TRIM_FEED = "trim-feed"
#: Trims the feed remembers; a node further behind reads every trim point.
TRIM_FEED_MAX = 256


def feed_append(doc: Any, log_id: int, keep: int) -> Any:
    """A feed document (the trim feed, the tier feed) with ``log_id`` added:
    the logs of the last ``keep`` changes, oldest first, the last one
    numbered ``seq``."""
    seq, logs = (0, []) if doc is None else (int(doc["seq"]), doc["logs"])
    return {"seq": seq + 1, "logs": [*logs[1 - keep :], log_id]}


def feed_since(doc: Any, since: int) -> tuple[int, list[int] | None]:
    """A feed's sequence number and the logs changed after ``since`` (None:
    the feed does not reach back that far, or ``since`` is -1)."""
    seq = 0 if doc is None else int(doc["seq"])
    if since == seq:
        return seq, []
    logs = [] if doc is None else doc["logs"]
    if since < 0 or since > seq or since < seq - len(logs):
        return seq, None
    return seq, sorted({int(log) for log in logs[len(logs) - (seq - since) :]})


def _check_log(log_id: int) -> None:
    check_log_id(log_id, internal=True)


class LogDocs:
    """Mixed into ``EpochStore``: needs its ``_doc``, ``_update`` and ``_get_many``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]
    _get_many: Callable[[list[str]], dict[str, bytes]]

    def trim_point(self, log_id: int) -> int:
        """The log's trim point as last set by ``set_trim_point`` (0: never trimmed)."""
        _check_log(log_id)
        doc = self._doc(f"trims/{log_id}")
        return 0 if doc is None else int(doc["lsn"])

    def trim_points(self, log_ids: Iterable[int]) -> dict[int, int]:
        """``trim_point`` of many logs at once (those never trimmed: 0)."""
        logs = list(log_ids)
        for log in logs:
            _check_log(log)
        docs = self._get_many([f"trims/{log}" for log in logs])
        return {
            log: int(json.loads(docs[f"trims/{log}"])["lsn"]) if f"trims/{log}" in docs else 0
            for log in logs
        }

    def set_trim_point(self, log_id: int, lsn: int) -> int:
        """Move the log's trim point up to ``lsn`` (never down); returns it.

        The authoritative copy: nodes apply it when they hear of it, and a
        node that missed it (down, a TRIM lost) catches up from here in its
        maintenance, by way of the trim feed (``trims_changed``).  The feed
        is written after the point, on every call, changed or not: a call
        that fails between the two was not acknowledged, and its retry
        writes the feed.
        """
        _check_log(log_id)

        def change(doc: Any) -> Any:
            cur = 0 if doc is None else int(doc["lsn"])
            return {"lsn": max(cur, lsn)}

        point = int(self._update(f"trims/{log_id}", change)["lsn"])

        self._update(TRIM_FEED, lambda doc: feed_append(doc, log_id, TRIM_FEED_MAX))
        return point

    def trims_changed(self, since: int) -> tuple[int, list[int] | None]:
        """The trim feed: (its sequence number now, the logs whose trim point
        was set after ``since``), or None for the logs when the feed no
        longer reaches back to ``since`` (-1: never read): then every log's
        point must be read.  A maintenance pass that finds no trim since the
        last one reads one document, not one per log."""
        return feed_since(self._doc(TRIM_FEED), since)

    def compaction(self, log_id: int) -> dict[str, Any] | None:
        """The log's compaction state: ``clean_point``, ``clean_bytes`` (one copy
        of what lies at or below it), ``passes`` and ``last_pass`` (its stats);
        None before the first pass."""
        _check_log(log_id)
        doc = self._doc(f"compaction/{log_id}")
        return None if doc is None else dict(doc)

    def record_compaction(
        self, log_id: int, clean_point: int, clean_bytes: int, last_pass: dict[str, Any]
    ) -> dict[str, Any]:
        """Record a finished pass.  The clean point only moves up: a pass that
        ended below a later one's point leaves it (and its byte count) alone."""
        _check_log(log_id)

        def change(doc: Any) -> Any:
            cur = doc or {"clean_point": 0, "clean_bytes": 0, "passes": 0}
            out = dict(cur)
            out["passes"] = int(cur.get("passes", 0)) + 1
            out["last_pass"] = last_pass
            if clean_point >= int(cur.get("clean_point", 0)):
                out["clean_point"] = clean_point
                out["clean_bytes"] = clean_bytes
            return out

        result: dict[str, Any] = self._update(f"compaction/{log_id}", change)
        return result

    def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None:
        """How recovery ended ``epoch`` (None: not recovered, or nothing to recover)."""
        _check_log(log_id)
        doc = self._doc(f"ends/{log_id}/{epoch}")
        return None if doc is None else EpochEnd.from_json(doc)

    def record_epoch_end(self, log_id: int, epoch: int, end: EpochEnd) -> EpochEnd:
        """Record how a recovery ended ``epoch``; a recovery with a higher seal wins.
        (The seal of ``epoch`` itself: its sequencer ended it as it stopped.)

        Returns the end in force afterwards: ``end``, or one recorded by a
        recovery with a seal at least as high (which then stands).
        """
        _check_log(log_id)
        if epoch > end.seal:
            raise InvalidArgumentError(
                f"log {log_id}: epoch {epoch} recovered with seal {end.seal}"
            )

        def change(doc: Any) -> Any:
            if doc is not None and EpochEnd.from_json(doc).seal >= end.seal:
                return doc
            return end.to_json()

        return EpochEnd.from_json(self._update(f"ends/{log_id}/{epoch}", change))

    # -- Kafka offsets ----------------------------------------------------------------

    def offset_bases(self, log_id: int) -> list[tuple[int, int]]:
        """``(epoch, base)`` of the log, by epoch: the Kafka offset of ESN 1
        of ``epoch`` and of every later epoch up to the next entry, whose
        records have offsets ``base + esn - 1`` (``logstrand.kafka._offsets``).
        Epoch 1 starts at offset 0 without an entry."""
        _check_log(log_id)
        doc = self._doc(f"offsets/{log_id}")
        return [] if doc is None else [(int(e), int(b)) for e, b in doc]

    def set_offset_base(self, log_id: int, epoch: int, base: int) -> int:
        """Record that ``epoch`` starts at Kafka offset ``base``, unless its
        base is recorded already: the first recovery to finish the epoch
        before it decides it, and every later one decides the same.  Returns
        the base in force."""
        _check_log(log_id)
        if epoch < 2 or base < 0:
            raise InvalidArgumentError(f"log {log_id}: bad offset base {base} for epoch {epoch}")
        found: list[int] = []

        def change(doc: Any) -> Any:
            entries = [(int(e), int(b)) for e, b in doc or []]
            for e, b in entries:
                if e == epoch:
                    found.append(b)
                    return doc
            entries.append((epoch, base))
            entries.sort()
            return [list(x) for x in entries]

        self._update(f"offsets/{log_id}", change)
        return found[0] if found else base
