"""The nodes' failure detector.  Pure: the node's gossip shell feeds it what
arrives and the time.

Theory of operation
-------------------
The membership in the epoch store says who has a session; a session lasts
the session timeout (10 s on ZooKeeper) after its process stops answering,
longer than a client waits for an append.  So the nodes also gossip: every
``gossip_s`` each node tells a few others how long ago it last had word of
every node (itself: now).  A node has *word* of another when that one's
gossip reaches it, or when a third node's gossip says it had word lately.
A member nobody has had word of for ``dead_after_s`` is *dead*: routing
leaves it out (sequencers move, STOREs go elsewhere) while the membership
still lists it.  Because word travels through any node, two nodes that
cannot reach each other but can both reach a third do not find each other
dead.

Two rules keep a node's own troubles from being taken for others':

* *Paused.*  When the node's own clock jumped by more than ``dead_after_s``
  between two looks (SIGSTOP, a long stall), it had no chance to hear
  anyone: it forgets its ages (everyone had word just now) and says so, so
  that the node holds down (others found it dead and took its logs).
* *Cut off.*  A node that has word of fewer than half of the other members
  is the one cut off, not they: it finds nobody dead.  When it has word of
  enough of them again after ``dead_after_s`` or more cut off, it says so
  too (it was dead to the others).

Members that join get the benefit of the doubt: word of them "now".
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


class FailureDetector:
    def __init__(
        self,
        node_id: int,
        *,
        dead_after_s: float = 2.5,
        fanout: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.dead_after_s = dead_after_s
        self.fanout = fanout
        self._rng = rng or random.Random()
        #: Member -> when this node last had word of it (its clock).
        self._word: dict[int, float] = {}
        #: Members that gossip they take no sequencers.
        self._unwilling: set[int] = set()
        self._last_look: float | None = None
        self._cut_off_since: float | None = None

    # -- input ------------------------------------------------------------------

    def set_members(self, members: Iterable[int], now: float) -> None:
        """The members the epoch store lists now (new ones: word now)."""
        members = set(members) - {self.node_id}
        self._word = {n: self._word.get(n, now) for n in members}
        self._unwilling &= members

    def on_gossip(
        self, sender: int, ages_ms: Mapping[int, int], sequencer: bool, now: float
    ) -> None:
        """A gossip from ``sender``: word of it now, and of each node it had
        word of ``ages_ms`` ago."""
        word = self._word
        if sender in word:
            word[sender] = now
            if sequencer:
                self._unwilling.discard(sender)
            else:
                self._unwilling.add(sender)
        for node, age_ms in ages_ms.items():
            if node in word and node != sender:
                word[node] = max(word[node], now - age_ms / 1000)

    def look(self, now: float) -> str | None:
        """Called often (every gossip).  Returns why this node should hold
        down, when it just found it had been paused or cut off."""
        last, self._last_look = self._last_look, now
        if last is not None and now - last > self.dead_after_s:
            self._forget(now)
            self._cut_off_since = None
            return f"paused for {now - last:.1f} s"
        cut_off = self.cut_off(now)
        if cut_off:
            if self._cut_off_since is None:
                self._cut_off_since = now
            return None
        since, self._cut_off_since = self._cut_off_since, None
        if since is not None and now - since >= self.dead_after_s:
            return f"cut off from the other nodes for {now - since:.1f} s"
        return None

    def _forget(self, now: float) -> None:
        for n in self._word:
            self._word[n] = now

    # -- output ------------------------------------------------------------------

    def is_member(self, node: int) -> bool:
        return node in self._word

    def cut_off(self, now: float) -> bool:
        """Word of fewer than half of the other members."""
        word = self._word
        if not word:
            return False
        heard = sum(1 for t in word.values() if now - t <= self.dead_after_s)
        return 2 * heard < len(word)

    def dead(self, now: float) -> frozenset[int]:
        """Members nobody has had word of for ``dead_after_s`` (none while
        this node is the one cut off)."""
        if self.cut_off(now):
            return frozenset()
        return frozenset(n for n, t in self._word.items() if now - t > self.dead_after_s)

    def unwilling(self) -> frozenset[int]:
        """Members whose last gossip said they take no sequencers."""
        return frozenset(self._unwilling)

    def ages_ms(self, now: float) -> dict[int, int]:
        """What this node's gossip says: itself now, each member when last heard."""
        out = {self.node_id: 0}
        for n, t in self._word.items():
            out[n] = min(2**32 - 1, max(0, int((now - t) * 1000)))
        return out

    def gossip_to(self) -> list[int]:
        """Whom to gossip to this time: ``fanout`` members at random."""
        members = sorted(self._word)
        if len(members) <= self.fanout:
            return members
        return self._rng.sample(members, self.fanout)
