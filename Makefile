# tidelog: the README's two commands are `make demo` and `make test`.
# Both bootstrap what they need (Debian packages when missing, .venv) and are idempotent.
SHELL := /bin/bash
BIN := .venv/bin
PYTEST_ARGS ?=

.PHONY: all venv lint test test-fast test-slow test-spark-cluster demo pipeline soak chaos chaos-txn chaos-hosts bench bench-micro bench-storage bench-scrape clean

all: test

venv:
	@bash scripts/bootstrap.sh spark bench

lint: venv
	$(BIN)/ruff check src tests benchmarks examples scripts
	$(BIN)/ruff format --check --quiet src tests benchmarks examples scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_circles.py

# The contract: static checks, then every test not marked slow (unit, simulator seeds,
# integration against real processes). The tests that start processes run one at a time;
# the others run beside them on the second core (scripts/run_tests.sh).
test: lint
	@bash scripts/run_tests.sh $(PYTEST_ARGS)

test-fast: venv
	$(BIN)/pytest -n 2 -m "not slow and not integration and not spark" $(PYTEST_ARGS)

demo: venv
	$(BIN)/python examples/demo.py

# The orders job as a Spark Declarative Pipeline (`spark-pipelines run`), verified (issue 6).
pipeline: venv
	@bash scripts/bootstrap.sh spark bench pipelines
	$(BIN)/python examples/pipelines/run.py

# Issues 7 and 18: the long fault runs on real processes (about 10 s per fault). First the
# restart-heavy mix (kill+restart, kill and restart at once, pause past the session, clean
# and rolling restarts; RESTART_FAULTS) with its report in docs/reliability.md, then every
# kind (kills, pauses, partitions, torn tails, full disks; FAULTS) in
# docs/reliability-mixed.md, then the slow fault tests (unclean election measured, disk
# full, regressions), then the transactional run (chaos-txn). Each step runs even when one
# before failed (a lost record or a client-visible error); the target fails if any did.
chaos: venv
	status=0; \
	$(BIN)/python -m tidelog.testing.faults --mix restarts --faults $${RESTART_FAULTS:-300} --seed $${SEED:-43} --report docs/reliability.md || status=1; \
	$(BIN)/python -m tidelog.testing.faults --faults $${FAULTS:-500} --seed $${SEED:-43} --report docs/reliability-mixed.md || status=1; \
	$(BIN)/pytest -m slow tests/faults $(PYTEST_ARGS) || status=1; \
	$(MAKE) --no-print-directory chaos-txn || status=1; \
	exit $$status

# Issue 19: transactional producers (commits, aborts, zombies fenced) and read_committed
# consumers under the restart-heavy kinds plus kill_txn_coordinator (TXN_FAULTS, default
# 100; about 7 s per fault); report in docs/reliability-transactions.md.
chaos-txn: venv
	$(BIN)/python -m tidelog.testing.faults --workload transactions --faults $${TXN_FAULTS:-100} --seed $${SEED:-43} --report docs/reliability-transactions.md

# Issue 33: real partitions and ZooKeeper ensemble faults on three network-namespace hosts
# (links down on the leader's and the controller's host, a host cut from its peers but not
# from the clients, a ZooKeeper member killed, the quorum lost and regained; HOST_FAULTS,
# default 100, about 20 s per fault); report in docs/reliability-hosts.md. Needs root (network
# namespaces) and `ip`: skipped with the reason otherwise.
chaos-hosts: venv
	@if [ "$$(id -u)" -ne 0 ]; then \
		echo "make chaos-hosts: skipped: network namespaces need root (run it as root)"; exit 0; \
	fi; \
	if ! command -v ip >/dev/null 2>&1; then \
		echo "make chaos-hosts: skipped: \`ip\` (iproute2) is not installed"; exit 0; \
	fi; \
	$(BIN)/python -m tidelog.testing.faults.host_run --faults $${HOST_FAULTS:-100} --seed $${SEED:-43} --report docs/reliability-hosts.md

# Every test marked slow (long cluster, Spark and fault scenarios).
test-slow: venv
	$(BIN)/pytest -m slow $(PYTEST_ARGS)

# Issue 31 point 4: the Spark connector on a standalone cluster (two workers, one SIGKILLed
# mid-query, exactlyOnce) and through a Spark Connect server; 6-17 minutes on 2 cores.
test-spark-cluster: venv
	$(BIN)/pytest -s -m slow tests/spark/test_cluster.py $(PYTEST_ARGS)

# Long simulator sweep (issue 4): many seeds; prints any failing seed with its replay command.
soak: venv
	$(BIN)/python -m tidelog.testing.soak --seeds $${SEEDS:-100000}

# Issue 8: tidelog side by side with NATS JetStream, RabbitMQ Streams and the machine's
# limits (installs the peers from Debian's packages when absent); BENCH_ARGS=--quick for a
# short run. Results under benchmarks/results/.
bench: venv
	$(BIN)/tidelog bench $${BENCH_ARGS:-}

# Micro-benchmarks: storage append/read, one broker, protocol encoders.
bench-micro: venv
	$(BIN)/python benchmarks/run.py

bench-storage: venv
	$(BIN)/python benchmarks/bench_storage.py

# What a /metrics scrape costs the event loop with 1,000 and 5,000 hosted partitions.
bench-scrape: venv
	$(BIN)/python benchmarks/bench_scrape.py

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis build src/*.egg-info
