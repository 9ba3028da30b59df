"""Users and grants, one document (``security``) of the epoch store.

    security   {"users": {name: {"sha256": hex, "created_ms": ms, "scram": {...}}},
                "grants": [{"user", "first", "last", "ops"}, ...]}

Only a token's SHA-256 is kept (``logstrand.security.hash_token``), and for
SASL/SCRAM over the Kafka front a salt and the keys derived from the token
(``security._sasl.scram_credentials``); the token itself is shown once, to
whoever created the user.  Nodes read this document
to authenticate tokens and to check each request against the grants.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import ExistsError, InvalidArgumentError, NotFoundError
from ..records import OPS

if TYPE_CHECKING:
    from collections.abc import Callable


class SecurityDocs:
    """Mixed into ``EpochStore``: needs its ``_doc`` and ``_update``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]

    def security(self) -> dict[str, Any]:
        """The whole document: ``users`` (name → hash, creation time) and ``grants``."""
        doc = self._doc("security") or {}
        return {"users": dict(doc.get("users", {})), "grants": list(doc.get("grants", []))}

    def add_user(self, name: str, token_sha256: str, scram: dict[str, Any] | None = None) -> None:
        """Raises ExistsError when the user exists (remove it first to change its token)."""

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            if name in doc["users"]:
                raise ExistsError(f"user {name!r} exists")
            user: dict[str, Any] = {"sha256": token_sha256, "created_ms": int(time.time() * 1000)}
            if scram:
                user["scram"] = scram
            doc["users"][name] = user
            return doc

        self._update("security", change)

    def remove_user(self, name: str) -> None:
        """Remove a user and every grant it had.  Raises NotFoundError."""

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            if name not in doc["users"]:
                raise NotFoundError(f"no user {name!r}")
            del doc["users"][name]
            doc["grants"] = [g for g in doc["grants"] if g["user"] != name]
            return doc

        self._update("security", change)

    def grant(self, name: str, first: int, last: int, ops: frozenset[str]) -> None:
        """Let ``name`` do ``ops`` on logs ``first..last`` (added to what it has)."""
        _check_ops(ops)

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            if name not in doc["users"]:
                raise NotFoundError(f"no user {name!r}")
            doc["grants"].append({"user": name, "first": first, "last": last, "ops": sorted(ops)})
            return doc

        self._update("security", change)

    def revoke(self, name: str, first: int, last: int, ops: frozenset[str]) -> int:
        """Take ``ops`` on ``first..last`` away from ``name``; returns how many
        grants changed.  Grants that only partly overlap the range are split."""
        _check_ops(ops)
        changed = [0]

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            kept: list[dict[str, Any]] = []
            changed[0] = 0
            for g in doc["grants"]:
                lo, hi = max(g["first"], first), min(g["last"], last)
                if g["user"] != name or lo > hi or not set(g["ops"]) & ops:
                    kept.append(g)
                    continue
                changed[0] += 1
                # The parts of the grant outside the range keep every op.
                if g["first"] < lo:
                    kept.append({**g, "last": lo - 1})
                if hi < g["last"]:
                    kept.append({**g, "first": hi + 1})
                rest = sorted(set(g["ops"]) - ops)
                if rest:
                    kept.append({**g, "first": lo, "last": hi, "ops": rest})
            doc["grants"] = kept
            return doc

        self._update("security", change)
        return changed[0]


def _fresh(doc: Any) -> dict[str, Any]:
    fresh: dict[str, Any] = dict(doc or {})
    fresh.setdefault("users", {})
    fresh.setdefault("grants", [])
    return fresh


def _check_ops(ops: frozenset[str]) -> None:
    if not ops or not ops <= set(OPS):
        raise InvalidArgumentError(f"operations must be among {', '.join(OPS)}")
