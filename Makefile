# logstrand: make run | make check | make test | make lint | make bench | make bench-compare | make soak
#
# Everything installs into .venv from pyproject.toml: `make run` only what a
# cluster and the client need, `make test` the extras too (Spark, Arrow, the
# test and lint tools) and the Debian packages zookeeper and iptables when they
# are missing and we are root.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
PYTEST_ARGS ?=
# Test processes: each module's tests run on one of them (tests/conftest.py).
# Three on two cores: with two, the cores were 62% busy (the tests wait on
# clusters and subprocesses), and three took pytest from 1,175 s to 1,031 s
# here (`time make test`, 2026-11-29).
TEST_WORKERS ?= 3
SEEDS ?= 0:5000

.PHONY: venv venv-test zookeeper run check test lint format bench bench-compare soak faults fuzz clean

$(STAMP): pyproject.toml logstrand/kafka/_fastrecords.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e .
	@touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(TEST_STAMP)

# What `make run` needs; `venv-test` adds the extras every other target uses.
venv: $(STAMP)
venv-test: $(TEST_STAMP)

# ZooKeeper for the epoch store tests; Java for them and for Spark (tests/spark);
# iptables for the partition tests (hosts in network namespaces, as root);
# kcat for the Kafka front's tests.
zookeeper:
	@if [ -x /usr/share/zookeeper/bin/zkServer.sh ] && command -v java >/dev/null \
	    && command -v iptables >/dev/null && command -v kcat >/dev/null \
	    && command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing the Debian packages zookeeper, default-jre-headless, iptables, kcat and chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq zookeeper default-jre-headless iptables kcat chromium >/dev/null; \
	else \
	  echo "warning: not root: install the Debian packages 'zookeeper', 'default-jre-headless', 'iptables', 'kcat' and 'chromium'"; \
	fi

run: venv
	$(BIN)/logstrand dev demo --dir run-data/demo --keep

# The first signal, in under 3 minutes here: lint and types, then the unit
# tests and the seeded simulation (pure cores, fake clocks: no cluster, no
# ZooKeeper).  `make test` runs everything, and is what CI runs.
check: venv-test lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup tests/unit tests/sim $(PYTEST_ARGS)

test: venv-test zookeeper lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: venv-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tools/house.py logstrand

format: venv-test
	$(BIN)/ruff check --fix --unsafe-fixes .
	$(BIN)/ruff format .

bench: venv-test
	$(BIN)/python bench/logsdb.py
	$(BIN)/python bench/append.py
	$(BIN)/python bench/read.py

# logstrand and its peers (NATS JetStream, Redis Streams) on one workload, one table.
bench-compare: venv-test
	$(BIN)/python bench/compare.py --json bench/results/compare.json

# Coverage-guided fuzzing (atheris) of the codec, of the committer's
# handlers, of a whole node's dispatch over sessions (stateful: one node
# for the run, valid prefixes with mutated tails), of the Kafka front's
# decoder (every API and version served) and SASL exchange (stateful: a
# conversation an input), of the console's requests, and of the Kafka
# front's C record writer (hostile tables, and real batches against Python); FUZZ_S seconds
# each, corpora kept in fuzz-corpus/, the coverage in each last line
# ("cov:").  CI runs a short pass of each.
FUZZ_S ?= 300
FUZZ_TARGETS := codec dispatch node kafka sasl console fastrecords tier
fuzz: venv-test
	@for t in $(FUZZ_TARGETS); do mkdir -p fuzz-corpus/$$t; done
	$(BIN)/python tests/fuzz/fuzz_codec.py -max_total_time=$(FUZZ_S) fuzz-corpus/codec
	$(BIN)/python tests/fuzz/fuzz_dispatch.py -max_total_time=$(FUZZ_S) fuzz-corpus/dispatch
	$(BIN)/python tests/fuzz/fuzz_node.py -max_total_time=$(FUZZ_S) -max_len=4096 fuzz-corpus/node
	$(BIN)/python tests/fuzz/fuzz_kafka.py -max_total_time=$(FUZZ_S) -max_len=4096 fuzz-corpus/kafka
	$(BIN)/python tests/fuzz/fuzz_sasl.py -max_total_time=$(FUZZ_S) -max_len=1024 fuzz-corpus/sasl
	$(BIN)/python tests/fuzz/fuzz_console.py -max_total_time=$(FUZZ_S) -max_len=2048 fuzz-corpus/console
	$(BIN)/python tests/fuzz/fuzz_fastrecords.py -max_total_time=$(FUZZ_S) fuzz-corpus/fastrecords
	$(BIN)/python tests/fuzz/fuzz_tier.py -max_total_time=$(FUZZ_S) fuzz-corpus/tier

# Failovers at length: 100 back-to-back rounds (CI runs 8), idempotent
# appends across SIGKILLed sequencers, 104 partition and kill events across
# hosts in network namespaces with the history checker (CI runs 5), a
# SIGSTOPped sequencer watched for a minute after SIGCONT (CI: 40 s), and the
# examples on a standalone Spark cluster across hosts (not in CI).
faults: venv-test zookeeper
	LOGSTRAND_FAILOVER_ROUNDS=100 $(BIN)/python -m pytest -q tests/integration/test_failover.py tests/integration/test_idempotence.py
	LOGSTRAND_PARTITION_EVENTS=104 $(BIN)/python -m pytest -q -s tests/integration/test_partitions.py
	LOGSTRAND_PAUSE_HOLD_DOWN_S=0 LOGSTRAND_PAUSE_WATCH_S=60 LOGSTRAND_PAUSE_STORES=sqlite,zookeeper $(BIN)/python -m pytest -q -s tests/integration/test_pause.py
	LOGSTRAND_SPARK_CLUSTER=1 $(BIN)/python -m pytest -q tests/spark/test_standalone.py

# The seeded simulation over many more seeds than CI runs (tests/sim), then
# 20,000 logs' first appends and a restart, and a 5-million-key compaction.
soak: venv-test
	$(BIN)/python -m tests.sim --seeds $(SEEDS)
	$(BIN)/python -m tests.sim --maintenance --seeds 0:500
	$(BIN)/python -m tests.sim --many-logs --seeds 0:100
	$(BIN)/python -m tests.sim --tiering --seeds 0:1000
	LOGSTRAND_MANY_LOGS=20000 $(BIN)/python -m pytest -q -s tests/integration/test_many_logs.py -k burst
	LOGSTRAND_COMPACTION_KEYS=5000000 LOGSTRAND_COMPACTION_PART=524288 $(BIN)/python -m pytest -q -s tests/integration/test_compaction_keys.py

clean:
	rm -rf run-data .pytest_cache .mypy_cache .ruff_cache
