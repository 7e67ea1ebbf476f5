#!/usr/bin/env bash
# `make test`'s pytest runs: the tests that start processes (brokers, ZooKeeper, Spark; the
# `integration` mark) in the foreground on TEST_WORKERS pytest-xdist workers (default 2; 1:
# one at a time, in order), each test module whole on one worker (`--dist loadfile`: a
# module's cluster fixture starts once), and beside them the tests that start none (unit,
# simulator seeds, property tests), whose output is printed after. The exit status is the
# first failure's.
#
#   scripts/run_tests.sh [pytest args ...]    (make test passes PYTEST_ARGS)
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp -t tidelog-unit-tests.XXXXXX)
trap 'rm -f "$log"' EXIT
.venv/bin/pytest -m "not slow and not integration" -p no:cacheprovider "$@" >"$log" 2>&1 &
unit_pid=$!
# Stop the background run, by its PID, if this script is interrupted.
trap 'kill "$unit_pid" 2>/dev/null; rm -f "$log"' EXIT

# Only these folders hold process tests: the run collects nothing else.
workers=${TEST_WORKERS:-2}
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist loadfile)
else
  parallel=()
fi
.venv/bin/pytest "${parallel[@]}" -m "not slow and integration" tests/integration tests/spark tests/faults "$@"
processes=$?
wait "$unit_pid"
unit=$?

echo
echo "=== the tests that start no process (run beside the ones above) ==="
cat "$log"
if [ "$processes" -ne 0 ]; then exit "$processes"; fi
exit "$unit"
