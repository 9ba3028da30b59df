"""Users and grants, one document (``security``) of the epoch store.

    security   {"users": {name: {"sha256": hex, "created_ms": ms, "scram": {...}}},
                "grants": [{"user", "first", "last", "ops"}, ...],
                "group_grants": [{"user", "group", "ops"}, ...],
                "topic_grants": [{"user", "topic", "ops"}, ...],
                "txn_grants": [{"user", "transactional_id", "ops"}, ...],
                "sasl_secret": base64}

Only a token's SHA-256 is kept (``logstrand.security.hash_token``), and for
SASL/SCRAM over the Kafka front a salt and the keys derived from the token
(``security._sasl.scram_credentials``); the token itself is shown once, to
whoever created the user.  Nodes read this document
to authenticate tokens and to check each request against the grants.
Group grants name a group, ``PREFIX*`` or ``*`` (``security.GroupGrant``);
topic grants name a range's name or ``PREFIX*`` (``security.TopicGrant``),
and cover its logs whenever they are, even if they do not exist yet.
Grants on transactional ids name an id, ``PREFIX*`` or ``*``
(``security.TxnGrant``).
``sasl_secret`` is made once, by the first front that needs it: SCRAM's
made-up salts for names that are not users derive from it, so that they
are the same on every node and after restarts.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import TYPE_CHECKING, Any

from ..errors import ExistsError, InvalidArgumentError, NotFoundError
from ..records import GROUP_OPS, OPS, TXN_OPS

if TYPE_CHECKING:
    from collections.abc import Callable


class SecurityDocs:
    """Mixed into ``EpochStore``: needs its ``_doc`` and ``_update``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]

    def security(self) -> dict[str, Any]:
        """The whole document: ``users`` (name → hash, creation time),
        ``grants`` on logs, ``group_grants``, ``topic_grants``, and ``sasl_secret`` (or None)."""
        doc = self._doc("security") or {}
        return {
            "users": dict(doc.get("users", {})),
            "grants": list(doc.get("grants", [])),
            "group_grants": list(doc.get("group_grants", [])),
            "topic_grants": list(doc.get("topic_grants", [])),
            "txn_grants": list(doc.get("txn_grants", [])),
            "sasl_secret": doc.get("sasl_secret"),
        }

    def sasl_secret(self) -> str:
        """The cluster's secret for SCRAM's made-up salts (base64), made the
        first time it is asked for (by whichever node asks first)."""

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            doc.setdefault("sasl_secret", base64.b64encode(secrets.token_bytes(32)).decode())
            return doc

        secret = (self._doc("security") or {}).get("sasl_secret")
        if secret is None:
            self._update("security", change)
            secret = self._doc("security")["sasl_secret"]
        return str(secret)

    def grant_group(
        self, name: str, pattern: str, ops: frozenset[str], *, user_to_come: bool = False
    ) -> None:
        """Let ``name`` do ``ops`` (``GROUP_OPS``) on the groups ``pattern``
        names (a group, ``PREFIX*`` or ``*``), added to what it has.
        ``user_to_come``: ``name`` need not be a user yet (``grant``)."""
        _check_ops(ops, GROUP_OPS)
        self._grant_named("group_grants", "group", name, pattern, ops, user_to_come)

    def revoke_group(self, name: str, pattern: str, ops: frozenset[str]) -> int:
        """Take ``ops`` on ``pattern`` (as it was granted) away from ``name``;
        returns how many grants changed."""
        _check_ops(ops, GROUP_OPS)
        return self._revoke_named("group_grants", "group", name, pattern, ops)

    def grant_txn(
        self, name: str, pattern: str, ops: frozenset[str], *, user_to_come: bool = False
    ) -> None:
        """Let ``name`` do ``ops`` (``TXN_OPS``) on the transactional ids
        ``pattern`` names (an id, ``PREFIX*`` or ``*``); ``user_to_come`` as
        for ``grant``."""
        _check_ops(ops, TXN_OPS)
        self._grant_named("txn_grants", "transactional_id", name, pattern, ops, user_to_come)

    def revoke_txn(self, name: str, pattern: str, ops: frozenset[str]) -> int:
        """Take ``ops`` on ``pattern`` (as it was granted) away from ``name``;
        returns how many grants changed."""
        _check_ops(ops, TXN_OPS)
        return self._revoke_named("txn_grants", "transactional_id", name, pattern, ops)

    def grant_topic(
        self, name: str, pattern: str, ops: frozenset[str], *, user_to_come: bool = False
    ) -> None:
        """Let ``name`` do ``ops`` on the logs of the named ranges (topics)
        ``pattern`` names: a name, or ``PREFIX*``, whether such ranges
        exist yet or not; a range made or grown later is covered at once
        (Kafka's ACLs on a topic name or a prefix).  ``user_to_come`` as
        for ``grant``."""
        _check_ops(ops)
        self._grant_named("topic_grants", "topic", name, pattern, ops, user_to_come)

    def revoke_topic(self, name: str, pattern: str, ops: frozenset[str]) -> int:
        """Take ``ops`` on the topic ``pattern`` (as it was granted) away from
        ``name``; returns how many grants changed."""
        _check_ops(ops)
        return self._revoke_named("topic_grants", "topic", name, pattern, ops)

    def _grant_named(
        self, key: str, field: str, name: str, pattern: str, ops: frozenset[str], to_come: bool
    ) -> None:
        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            if name not in doc["users"] and not to_come:
                raise NotFoundError(f"no user {name!r}")
            doc[key].append({"user": name, field: pattern, "ops": sorted(ops)})
            return doc

        self._update("security", change)

    def _revoke_named(
        self, key: str, field: str, name: str, pattern: str, ops: frozenset[str]
    ) -> int:
        changed = [0]

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            kept: list[dict[str, Any]] = []
            changed[0] = 0
            for g in doc[key]:
                if g["user"] != name or g[field] != pattern or not set(g["ops"]) & ops:
                    kept.append(g)
                    continue
                changed[0] += 1
                rest = sorted(set(g["ops"]) - ops)
                if rest:
                    kept.append({**g, "ops": rest})
            doc[key] = kept
            return doc

        self._update("security", change)
        return changed[0]

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
            doc["group_grants"] = [g for g in doc["group_grants"] if g["user"] != name]
            doc["topic_grants"] = [g for g in doc["topic_grants"] if g["user"] != name]
            doc["txn_grants"] = [g for g in doc["txn_grants"] if g["user"] != name]
            return doc

        self._update("security", change)

    def grant(
        self, name: str, first: int, last: int, ops: frozenset[str], *, user_to_come: bool = False
    ) -> None:
        """Let ``name`` do ``ops`` on logs ``first..last`` (added to what it has).

        ``user_to_come``: ``name`` need not be a user yet, as a Kafka ACL
        names any principal; the grant applies once ``add_user`` makes it
        (and goes with ``remove_user``, as every grant of the user does).
        Without it an unknown name is refused: an operator's typo."""
        _check_ops(ops)

        def change(doc: Any) -> Any:
            doc = _fresh(doc)
            if name not in doc["users"] and not user_to_come:
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
    fresh.setdefault("group_grants", [])
    fresh.setdefault("topic_grants", [])
    fresh.setdefault("txn_grants", [])
    return fresh


def _check_ops(ops: frozenset[str], known: tuple[str, ...] = OPS) -> None:
    if not ops or not ops <= set(known):
        raise InvalidArgumentError(f"operations must be among {', '.join(known)}")
