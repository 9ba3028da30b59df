"""The sequencer host core (routing, activation, recovery, stalls, retirement),
driven by hand with a fake clock."""

from __future__ import annotations

import random

from logstrand.batch import PackedBatch, make_batch
from logstrand.epochstore import LogAttributes
from logstrand.errors import Status
from logstrand.placement import CopysetSelector
from logstrand.records import CONTROL
from logstrand.sequencer import ReplyAppend, SendRelease, SendStore, SequencerCore
from logstrand.sequencer._host import (
    Activate,
    HostOptions,
    Recover,
    RecoveryStalled,
    ReplySeqState,
    SequencerHostCore,
)

ME = 1
LOG = 7
PLAIN = LogAttributes(replication_factor=2)


def batch(n: int = 1, payload: bytes | None = b"x", key: bytes | None = None) -> PackedBatch:
    return make_batch(range(n), [payload] * n, timestamps_ms=0, keys=[key] * n)


def core(epoch: int, *, recovered: bool) -> SequencerCore:
    sel = CopysetSelector((1, 2, 3), 2, rng=random.Random(1))
    return SequencerCore(LOG, epoch, sel, recovered=recovered)


def host(**options: object) -> SequencerHostCore:
    return SequencerHostCore(ME, HostOptions(**options))  # type: ignore[arg-type]


def append(h: SequencerHostCore, token: str, now: float = 0.0, **kw: object) -> list[object]:
    args: dict[str, object] = {"owner": ME, "attributes": PLAIN, **kw}
    return h.on_append(LOG, batch(), token, now, 1000, **args)  # type: ignore[arg-type]


def replies(actions: list[object]) -> list[ReplyAppend]:
    return [a for a in actions if isinstance(a, ReplyAppend)]


def store_all(h: SequencerHostCore, actions: list[object], now: float = 0.0) -> list[object]:
    out: list[object] = []
    for a in actions:
        if isinstance(a, SendStore):
            out += h.on_stored(LOG, a.message.store_id, a.node_id, Status.OK, now)
    return out


def active(
    h: SequencerHostCore, epoch: int, *, recovered: bool
) -> tuple[SequencerCore, list[object]]:
    """Take an append that activates the log, then report the activation."""
    assert append(h, "first") == [Activate(LOG)]
    c = core(epoch, recovered=recovered)
    return c, h.on_activated(LOG, c, 0.0, 1000)


def test_routing_and_refusals_before_any_store() -> None:
    h = host(payload_bytes_max=4)
    [r] = replies(append(h, "t", owner=2))
    assert (r.status, r.redirect) == (Status.REDIRECTED, 2)
    assert replies(append(h, "t", owner=None))[0].status == Status.NOSEQUENCER
    assert replies(append(h, "t", attributes=None))[0].status == Status.NOTFOUND
    big = h.on_append(LOG, batch(payload=b"12345"), "t", 0.0, 0, owner=ME, attributes=PLAIN)
    assert replies(big)[0].status == Status.TOOBIG
    compacted = LogAttributes(replication_factor=2, cleanup_policy="compact")
    keyless = h.on_append(LOG, batch(), "t", 0.0, 0, owner=ME, attributes=compacted)
    assert replies(keyless)[0].status == Status.NOKEY
    # A transaction's marker has no key, and is no refusal there (it must
    # end the transaction); a keyless record beside it in a batch still is.
    marker = make_batch([0], [b"m"], timestamps_ms=0, flags=CONTROL)
    assert h.on_append(LOG, marker, "t", 0.0, 0, owner=ME, attributes=compacted) == [Activate(LOG)]
    mixed = make_batch([0, 1], [b"m", b"x"], timestamps_ms=0, flags=[CONTROL, 0])
    mixed_reply = h.on_append(LOG, mixed, "t", 0.0, 0, owner=ME, attributes=compacted)
    assert replies(mixed_reply)[0].status == Status.NOKEY
    h = host(payload_bytes_max=4)
    assert h.logs() == []
    # A payload None is no refusal on any log (a Kafka record's null value):
    # it waits for the log's activation like any append.
    empty = h.on_append(LOG, batch(payload=None), "t", 0.0, 0, owner=ME, attributes=PLAIN)
    assert empty == [Activate(LOG)]


def test_one_activation_and_the_waiting_appends_go_to_the_new_core() -> None:
    h = host()
    assert append(h, "a") == [Activate(LOG)]
    assert append(h, "b") == []  # waits: one activation at a time
    c = core(1, recovered=True)
    actions = h.on_activated(LOG, c, 0.0, 1000)
    assert not any(isinstance(a, Recover) for a in actions)  # epoch 1: nothing to recover
    done = replies(store_all(h, actions))
    assert [(r.token, r.status) for r in done] == [("a", Status.OK), ("b", Status.OK)]
    assert h.logs() == [LOG]


def test_waiting_appends_are_bounded_and_get_the_activation_error() -> None:
    h = host(waiting_appends_max=2)
    append(h, "a")
    append(h, "b")
    [over] = replies(append(h, "c"))
    assert over.status == Status.OVERLOADED
    failed = replies(h.on_activation_failed(LOG, Status.NOSEQUENCER, "too few nodes sealed"))
    assert [(r.token, r.status) for r in failed] == [
        ("a", Status.NOSEQUENCER),
        ("b", Status.NOSEQUENCER),
    ]
    assert "too few nodes sealed" in failed[0].message
    assert append(h, "d") == [Activate(LOG)]  # the next append tries again


def test_a_sequencer_is_not_retired_before_its_recovery_released_what_it_acknowledged() -> None:
    """The failover stall: the log's owner moved (a node came back) while the
    new sequencer was still recovering, and retiring it lost the release."""
    h = host()
    c, actions = active(h, 2, recovered=False)
    assert Recover(LOG, c) in actions
    acked = replies(store_all(h, actions))
    assert acked[0].status == Status.OK  # acknowledged, not yet released
    assert c.idle
    # The owner moved to node 3: keep it while its recovery runs.
    assert h.tick(1.0, lambda _log: 3) == []
    assert h.sequencer(LOG) is c
    assert h.recovery_wanted(LOG, c)
    released = h.on_recovery_done(LOG, c, True)
    assert next(a for a in released if isinstance(a, SendRelease)).lsn == acked[0].first_lsn
    # Now everything it acknowledged is released: it may go.
    h.tick(2.0, lambda _log: 3)
    assert h.sequencer(LOG) is None


def test_a_recovered_sequencer_stays_while_this_node_owns_the_log() -> None:
    h = host()
    c, actions = active(h, 1, recovered=True)
    store_all(h, actions)
    h.tick(1.0, lambda _log: ME)
    assert h.sequencer(LOG) is c


def test_a_stalled_recovery_is_reported_once_and_appends_are_refused_until_done() -> None:
    h = host(recovery_stall_s=5.0)
    c, actions = active(h, 2, recovered=False)
    store_all(h, actions)
    h.on_recovery_error(LOG, c, "epoch 1: 1 release pointers, need 2")
    assert h.tick(4.9, lambda _log: ME) == []
    assert replies(store_all(h, append(h, "before", now=4.9)))[0].status == Status.OK
    [stall] = h.tick(5.0, lambda _log: ME)
    assert stall == RecoveryStalled(LOG, 2, 5.0, 1, "epoch 1: 1 release pointers, need 2")
    assert h.tick(6.0, lambda _log: ME) == []  # once
    [refused] = replies(append(h, "during", now=6.0))
    assert refused.status == Status.NOTREADY
    assert "need 2" in refused.message
    assert "in 6.0 s" in refused.message
    assert h.stalled_logs(6.0) == [LOG]
    state = h.state(LOG, 6.0)
    assert state is not None
    assert state.stalled
    assert state.attempts_failed == 1
    h.on_recovery_done(LOG, c, True)
    assert h.stalled_logs(7.0) == []
    assert replies(store_all(h, append(h, "after", now=7.0)))[0].status == Status.OK


def test_an_overtaken_recovery_fails_pending_appends_and_retires_the_core() -> None:
    h = host()
    c, actions = active(h, 2, recovered=False)
    assert [type(a) for a in actions].count(SendStore) == 2  # the append is in flight
    failed = replies(h.on_recovery_done(LOG, c, False))
    assert [(r.token, r.status) for r in failed] == [("first", Status.PREEMPTED)]
    assert c.preempted
    assert h.sequencer(LOG) is None
    assert append(h, "next") == [Activate(LOG)]


def test_seq_state_activates_and_answers_once_active() -> None:
    h = host()
    assert h.on_seq_state(LOG, "q", owner=ME, attributes=PLAIN) == [Activate(LOG)]
    c = core(3, recovered=False)
    actions = h.on_activated(LOG, c, 0.0, 0)
    assert ReplySeqState("q", Status.OK) in actions
    assert h.on_seq_state(LOG, "q2", owner=ME, attributes=PLAIN) == [ReplySeqState("q2", Status.OK)]
    [redirect] = h.on_seq_state(LOG, "q3", owner=2, attributes=PLAIN)
    assert redirect.status == Status.REDIRECTED


def test_store_waves_retried_are_counted_across_cores() -> None:
    h = host()
    _, actions = active(h, 1, recovered=True)
    first = next(a for a in actions if isinstance(a, SendStore))
    h.on_stored(LOG, first.message.store_id, first.node_id, Status.FAILED, 0.0)
    assert h.waves_retried == 1


def test_an_epoch_out_of_esns_moves_the_log_to_a_new_epoch() -> None:
    """Rule 6: past ``esn_max`` the appends wait for the appends in flight,
    then for a new epoch, and none fails."""
    h = host()
    assert append(h, "first") == [Activate(LOG)]
    sel = CopysetSelector((1, 2, 3), 2, rng=random.Random(1))
    old = SequencerCore(LOG, 1, sel, recovered=True, esn_max=3)
    first = h.on_activated(LOG, old, 0.0, 1000)
    in_flight = append(h, "second") + append(h, "third")  # ESNs 2 and 3: still fit
    assert append(h, "fourth") == []  # out of ESNs: waits, no activation yet
    assert old.exhausted
    done = replies(store_all(h, first)) + replies(store_all(h, in_flight[:2]))
    assert [r.token for r in done] == ["first", "second"]
    # The last append in flight is done: now the new epoch.
    assert Activate(LOG) in store_all(h, in_flight[2:])
    assert append(h, "fifth") == []  # one activation at a time
    new = SequencerCore(LOG, 2, sel, recovered=False)
    actions = h.on_activated(LOG, new, 0.0, 1000)
    assert Recover(LOG, new) in actions
    done = replies(store_all(h, actions))
    assert [(r.token, r.status, r.first_lsn >> 32) for r in done] == [
        ("fourth", Status.OK, 2),
        ("fifth", Status.OK, 2),
    ]


def test_a_renewal_moves_the_log_to_a_new_epoch_with_or_without_appends_waiting() -> None:
    """Rule 8 (``logs rebalance``): an idle sequencer is activated again at
    once; a busy one first finishes its appends in flight, while new ones
    wait for the new epoch (none fails); a log with no sequencer here is
    left alone."""
    h = host()
    assert h.on_renew(LOG) == (0, [])  # nothing runs here
    _, first = active(h, 1, recovered=True)
    store_all(h, first)
    assert h.on_renew(LOG) == (1, [Activate(LOG)])
    assert h.on_renew(LOG) == (1, [])  # one activation at a time
    assert append(h, "waits") == []
    busy = core(2, recovered=True)
    actions = h.on_activated(LOG, busy, 0.0, 1000)
    [done] = replies(store_all(h, actions))
    assert (done.token, done.first_lsn >> 32) == ("waits", 2)
    assert h.tick(1.0, lambda _log: ME) == []  # the renewal is over: nothing more
    in_flight = append(h, "in flight")
    assert h.on_renew(LOG) == (2, [])  # waits for the append in flight
    assert append(h, "after") == []
    assert Activate(LOG) in store_all(h, in_flight)
    newest = core(3, recovered=False)
    actions = h.on_activated(LOG, newest, 0.0, 1000)
    assert Recover(LOG, newest) in actions
    assert [(r.token, r.first_lsn >> 32) for r in replies(store_all(h, actions))] == [("after", 3)]


def test_ticks_cost_nothing_for_idle_logs_until_the_membership_changes() -> None:
    """Rule 7: 2,000 logs active and idle here; a tick asks nobody who owns
    them (no rendezvous per log per tick); a membership change makes the next
    ticks look at each once, a thousand a tick (a node with 100,000 logs
    stopped its loop for seconds looking at all in one), and the logs whose
    owner moved retire."""
    h = host()
    logs = range(1, 2001)
    for log in logs:
        assert h.on_append(log, batch(), "t", 0.0, 1000, owner=ME, attributes=PLAIN) == [
            Activate(log)
        ]
        sel = CopysetSelector((1, 2, 3), 2, rng=random.Random(log))
        acts = h.on_activated(log, SequencerCore(log, 1, sel, recovered=True), 0.0, 1000)
        for a in acts:
            if isinstance(a, SendStore):
                h.on_stored(log, a.message.store_id, a.node_id, Status.OK, 0.0)
    asked: list[int] = []

    def owner_of(log: int) -> int:
        asked.append(log)
        return ME if log % 3 else 2  # a third of the logs moved away

    h.tick(1.0, lambda log: ME)  # the first tick settles them
    for t in range(2, 12):
        assert h.tick(float(t), owner_of) == []
    assert asked == []  # ten ticks, not one owner looked up
    assert len(h.logs()) == 2000
    h.on_owners_changed()
    h.tick(12.0, owner_of)
    assert sorted(asked) == list(logs[:1000])  # at most sweep_per_tick a tick
    h.tick(12.05, owner_of)
    assert sorted(asked) == list(logs)  # each log looked at once
    assert h.logs() == [log for log in logs if log % 3]  # the moved ones retired
    asked.clear()
    h.tick(13.0, owner_of)
    assert asked == []


def test_logs_with_waves_in_flight_wait_for_their_deadline_not_for_each_tick() -> None:
    """Rule 7's timer queue: 1,000 logs each with a STORE unanswered cost the
    ticks before its deadline nothing; at the deadline each wave is sent
    again, and a log answered meanwhile leaves with no retry."""
    h = host()
    logs = range(1, 1001)
    stores: dict[int, list[SendStore]] = {}
    for log in logs:
        assert h.on_append(log, batch(), "t", 0.0, 1000, owner=ME, attributes=PLAIN) == [
            Activate(log)
        ]
        sel = CopysetSelector((1, 2, 3), 2, rng=random.Random(log))
        acts = h.on_activated(log, SequencerCore(log, 1, sel, recovered=True), 0.0, 1000)
        stores[log] = [a for a in acts if isinstance(a, SendStore)]
    deadline = min(h.sequencer(log).next_deadline() for log in logs)  # type: ignore[union-attr]
    assert deadline > 0.5
    asked: list[int] = []

    def owner_of(log: int) -> int:
        asked.append(log)
        return ME

    looked = 0
    original = h._tick_one

    def counting(*args: object) -> list[object]:
        nonlocal looked
        looked += 1
        return original(*args)  # type: ignore[arg-type]

    h._tick_one = counting  # type: ignore[method-assign]
    h.tick(0.05, owner_of)  # the first tick parks them
    assert looked == 1000
    looked = 0
    for i in range(2, 8):
        assert h.tick(i * 0.05, owner_of) == []
    assert looked == 0  # six ticks before the deadline: no log looked at
    for a in stores[1]:  # log 1 is answered: it gets one look, and leaves
        h.on_stored(1, a.message.store_id, a.node_id, Status.OK, 0.4)
    h.tick(0.45, owner_of)
    assert looked == 1
    resent: set[int] = set()
    t = 0.45
    while t < deadline + 5.0:  # timed out, then a new wave after a pause
        t += 0.05
        resent |= {a.message.log_id for a in h.tick(t, owner_of) if isinstance(a, SendStore)}
    assert resent == set(logs) - {1}


def test_a_host_with_nothing_to_look_at_says_when_its_next_tick_has_work() -> None:
    """Rule 7: an idle host's shell may sleep until ``next_tick_at`` (an idle
    node woke 20 times a second to tick nothing); ``wake`` is called when a
    log needs attention again or the membership changes."""
    h = host()
    woken: list[int] = []
    h.wake = lambda: woken.append(1)
    assert h.next_tick_at() == float("inf")
    c, acts = active(h, 1, recovered=True)
    assert woken == [1]  # the first append: from nothing to look at to a log
    assert h.next_tick_at() == 0.0  # tick at the usual pace
    store_all(h, acts)
    append(h, "second", now=0.01)  # attention already held: no second wake
    assert woken == [1]
    h.tick(0.05, lambda log: ME)  # its wave is never answered: the log parks
    deadline = c.next_deadline()
    assert deadline is not None
    assert h.next_tick_at() == deadline
    h.on_owners_changed()
    assert len(woken) >= 2
    assert h.next_tick_at() == 0.0
