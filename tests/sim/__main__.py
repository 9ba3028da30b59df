"""Run the simulation from the command line: many seeds (a soak), or one, traced.

python -m tests.sim --seeds 0:2000         # a soak: every seed in the range
python -m tests.sim --seed 1234 --trace    # replay one run, printing its events
python -m tests.sim --maintenance --seeds 0:500   # runs followed by trim, compaction, rebuilding
python -m tests.sim --many-logs --seeds 0:100     # hundreds of logs sharing the nodes
python -m tests.sim --transactions --seeds 0:500  # transactional producers, committed readers
python -m tests.sim --tiering --seeds 0:500       # tiered logs, an object store that fails
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from .maintenance import run_maintenance
from .world import Config, Violation, run_seed


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    parser.add_argument("--seeds", default="0:200", help="a range LO:HI of seeds")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the run's events")
    parser.add_argument(
        "--maintenance",
        action="store_true",
        help="after each run: a trim, a compaction pass, a lost disk rebuilt",
    )
    parser.add_argument(
        "--many-logs",
        action="store_true",
        help="hundreds of logs sharing the nodes (Config.many_logs)",
    )
    parser.add_argument(
        "--transactions",
        action="store_true",
        help="transactional producers beside plain ones (Config.with_transactions)",
    )
    parser.add_argument(
        "--tiering",
        action="store_true",
        help="tiered logs and an object store that fails and loses objects (Config.with_tiering)",
    )
    args = parser.parse_args()
    # Recovery retries log warnings by design; the run's own trace says more.
    logging.getLogger("logstrand").setLevel(logging.ERROR)
    # A lost object is an error a node logs at every read of it, by design.
    logging.getLogger("logstrand.tier").setLevel(logging.CRITICAL)
    if args.seed is not None:
        seeds = range(args.seed, args.seed + 1)
    else:
        lo, _, hi = args.seeds.partition(":")
        seeds = range(int(lo), int(hi))
    failed = []
    t0 = time.monotonic()
    for seed in seeds:
        try:
            if args.many_logs:
                world, summary = run_seed(seed, Config.many_logs(seed))
            elif args.transactions:
                world, summary = run_seed(seed, Config.with_transactions(seed))
            elif args.tiering:
                world, summary = run_seed(seed, Config.with_tiering(seed))
            else:
                world, summary = (run_maintenance if args.maintenance else run_seed)(seed)
        except Violation as exc:
            print(exc, file=sys.stderr)
            failed.append(seed)
            continue
        if args.trace:
            print("\n".join(world.trace))
        if args.seed is not None or seed % 50 == 0:
            print(f"seed {seed}: ok {summary} digest {world.digest[:16]}")
    took = time.monotonic() - t0
    print(f"{len(seeds) - len(failed)}/{len(seeds)} seeds passed in {took:.1f}s; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
