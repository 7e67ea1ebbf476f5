# tidelog: the README's two commands are `make demo` and `make test`.
# Both bootstrap what they need (Debian packages when missing, .venv) and are idempotent.
SHELL := /bin/bash
BIN := .venv/bin
PYTEST_ARGS ?=

.PHONY: all venv lint test test-fast test-slow demo pipeline soak chaos bench bench-micro bench-storage clean

all: test

venv:
	@bash scripts/bootstrap.sh spark bench

lint: venv
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check --quiet src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# The contract: static checks, then every test not marked slow (unit, simulator seeds,
# integration against real processes).
test: lint
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test-fast: venv
	$(BIN)/pytest -m "not slow and not integration and not spark" $(PYTEST_ARGS)

demo: venv
	$(BIN)/python examples/demo.py

# The orders job as a Spark Declarative Pipeline (`spark-pipelines run`), verified (issue 6).
pipeline: venv
	@bash scripts/bootstrap.sh spark bench pipelines
	$(BIN)/python examples/pipelines/run.py

# Issue 7: the long fault run on real processes (kills, pauses, partitions, torn tails, full
# disks; about 10 s per fault), its report in docs/reliability.md, then the slow fault tests
# (unclean election measured, disk full, regressions).
chaos: venv
	$(BIN)/python -m tidelog.testing.faults --faults $${FAULTS:-500} --seed $${SEED:-43} --report docs/reliability.md
	$(BIN)/pytest -m slow tests/faults $(PYTEST_ARGS)

# Every test marked slow (long cluster, Spark and fault scenarios).
test-slow: venv
	$(BIN)/pytest -m slow $(PYTEST_ARGS)

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

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis build src/*.egg-info
