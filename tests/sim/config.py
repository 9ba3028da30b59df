"""The simulation's configuration, its constants, and the one exception it raises."""

from __future__ import annotations

import random

import attrs

from logstrand.records import ESN_MAX

#: The first log (and the only one unless ``Config.logs`` says more).
LOG = 1
CLIENT_BASE = 100
#: More events than this at one instant of simulated time is a livelock
#: (something retries at once, for ever).
SAME_INSTANT_EVENTS_MAX = 100_000
Address = tuple[int, int]  # (endpoint id, incarnation)


@attrs.frozen
class Config:
    nodes: int = 4
    replication: int = 2
    clients: int = 3
    #: Seconds of simulated time with appends and faults.
    duration_s: float = 8.0
    drop: float = 0.02
    duplicate: float = 0.02
    delay_mean_s: float = 0.002
    #: Chance that a message is held back 50-500 ms (reordering it).
    delay_tail: float = 0.03
    #: Mean seconds between faults (crash, pause).
    fault_every_s: float = 1.0
    #: Of the nodes taken down, the share told to stop (SIGTERM: their
    #: sequencers end their epochs first, ``sequencer._handoff``) rather
    #: than killed.
    stop_share: float = 0.0
    #: At most this many nodes down (crashed) at once.
    down_max: int = 1
    append_every_s: float = 0.02
    in_flight_max: int = 4
    #: Idempotent appends: a batch that timed out or failed is sent again
    #: (the same batch, same producer numbers) up to this many times.  The
    #: checker demands each payload once in the log all the same.
    retries: int = 3
    #: Membership: a crashed node stays a member until its lease runs out
    #: (up to this long); a change reaches each node's view up to
    #: ``watch_delay_s`` late.
    lease_s: float = 1.5
    watch_delay_s: float = 0.25
    #: The sequencer host's bound on a recovery (``--recovery-stall``).
    recovery_stall_s: float = 3.0
    #: Liveness: an acknowledged record must be readable this long after its
    #: acknowledgement, once enough nodes have been up (and none paused) for
    #: as long (``check_liveness``).
    liveness_s: float = 8.0
    #: The highest ESN of an epoch: low, logs move to new epochs while appends
    #: run (host rule 6), on top of the failovers.
    esn_max: int = ESN_MAX
    #: Nodes' clocks disagree by up to this much (node n is -1, 0 or +1 times
    #: it): timestamps in the log must still never go backwards.
    clock_skew_ms: int = 0
    #: Clients key their records with one of this many keys (0: no keys), so
    #: that a compaction pass has superseded records to remove.
    keys: int = 0
    #: Logs ``LOG .. LOG + logs - 1``, sharing the nodes; each client
    #: appends to one drawn at random, after a burst of first appends to
    #: every log at the start (their sequencers activate all at once).
    logs: int = 1
    #: Clients are transactional producers (``txn_client``) beside their
    #: plain appends, and committed readers are checked (``check_committed``).
    transactions: bool = False
    #: Tiered storage (``tiering``): the logs' old records go to a simulated
    #: object store with its own failures, the nodes drop their copies, and
    #: readers read them back from the objects (``tiering.check_tiered``).
    tiering: bool = False
    #: Tiering: how long the nodes keep tiered records (a long one: they
    #: still hold what an object the store loses held).
    local_retention_ms: int = 600
    #: Tiering: segments recorded before their object is stored.
    break_tier_order: bool = False
    #: Tiering: nodes' local floors not held below the tiered point.
    break_tier_floor: bool = False
    #: Tiering: readers deliver a lost object's gap even where the nodes
    #: still keep its records (the readers' rule before ``TierReads.first``).
    break_tier_loss: bool = False
    #: A node's activations running at once (``--activations-in-flight``);
    #: the rest wait in its queue.
    activations_in_flight: int = 64
    #: Bugs to plant on purpose, to show the checkers catch them.
    break_sealing: bool = False  # nodes take every STORE, sealed or not
    break_release: bool = False  # sequencers release before recovery is done
    break_store_ids: bool = False  # each sequencer core numbers its STOREs from 1
    #: Idle sequencers retire when the log's owner moves, recovered or not
    #: (the failover stall: acknowledged records unreadable for minutes).
    break_retire: bool = False
    #: Nodes never ask for a release that is overdue (``ReleaseWatch``).
    break_release_watch: bool = False
    #: A new sequencer stamps from its own clock alone, and the nodes' clocks
    #: are an hour apart (timestamps go back at a failover).
    break_timestamps: bool = False
    #: Clients retry as above but without producer numbers (idempotence off):
    #: a retried batch may be stored twice.
    break_idempotence: bool = False
    #: Maintenance: donors re-create no copies of a lost node's batches.
    break_rebuild: bool = False
    #: A stopping node ends the epochs of sequencers with appends in flight
    #: too, at their LNG (acknowledged records behind the bridge are lost).
    break_handoff: bool = False
    #: Transactions' markers are appended without the fence key's numbers:
    #: a timed-out producer's late batches are taken after its abort.
    break_txn_fence: bool = False
    #: A transaction whose batch was given up is aborted at its own epoch
    #: (the client before it aborted by INIT): the batch may land after the
    #: ABORT marker, which does not fence its own epoch.
    break_txn_abort: bool = False
    #: Maintenance: nodes drop superseded copies without moving the clean
    #: point first (readers cannot tell compaction from loss).
    break_clean_point: bool = False

    @classmethod
    def for_seed(cls, seed: int) -> Config:
        """A configuration drawn from the seed: runs differ in shape, not just in luck."""
        rng = random.Random(seed ^ 0x5EED)
        nodes = rng.choice([3, 4, 5])
        return cls(
            nodes=nodes,
            replication=rng.choice([2, 2, 3]) if nodes > 3 else 2,
            clients=rng.randint(1, 4),
            drop=rng.choice([0.0, 0.01, 0.05]),
            duplicate=rng.choice([0.0, 0.02, 0.1]),
            delay_tail=rng.choice([0.0, 0.03, 0.1]),
            fault_every_s=rng.choice([0.3, 1.0, 3.0]),
            down_max=rng.choice([1, 1, 2]),
            esn_max=rng.choice([ESN_MAX, ESN_MAX, 30]),
            clock_skew_ms=rng.choice([0, 0, 3_600_000]),
            stop_share=rng.choice([0.0, 0.5]),
        )

    @classmethod
    def many_logs(cls, seed: int) -> Config:
        """The shape of ``for_seed`` with hundreds of logs and a small
        activation bound, so the queue fills (``make soak`` and CI run it)."""
        rng = random.Random(seed ^ 0x1065)
        return attrs.evolve(
            cls.for_seed(seed),
            logs=rng.choice([100, 200, 300]),
            activations_in_flight=rng.choice([2, 4, 16]),
            clients=rng.randint(2, 4),
            in_flight_max=8,
            append_every_s=0.01,
        )

    @classmethod
    def with_transactions(cls, seed: int) -> Config:
        """The shape of ``for_seed`` with transactional producers over
        three logs (a transaction writes to one to three of them)."""
        return attrs.evolve(cls.for_seed(seed), transactions=True, logs=3)

    @classmethod
    def with_tiering(cls, seed: int) -> Config:
        """The shape of ``for_seed`` with tiered logs (one or two), an
        object store that fails, and more time to offload and drop."""
        rng = random.Random(seed ^ 0x71E2)
        return attrs.evolve(
            cls.for_seed(seed),
            tiering=True,
            logs=rng.choice([1, 2]),
            duration_s=10.0,
            local_retention_ms=rng.choice([600, 600, 60_000]),
        )

    @property
    def log_ids(self) -> range:
        return range(LOG, LOG + self.logs)


class Violation(AssertionError):
    pass
