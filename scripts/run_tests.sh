#!/usr/bin/env bash
# `make test`'s pytest part: every test not marked slow, as two sessions at once.
#
# The tests on real processes (markers `integration`, `spark`) spend most of their time
# waiting on brokers, ZooKeeper and Spark (load about 0.5 on the two CPUs), so the
# in-process tests (unit, simulator, protocol; about 2 min of mostly CPU) run beside them
# in a second session with its own base temp dir; its output is printed after the first
# session's. The two marker expressions split `not slow` exactly. The second session is
# stopped by its own PID if this script is interrupted. Exit status: 0 when both passed.
# Arguments go to both sessions (e.g. PYTEST_ARGS="--durations=60").
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
scratch=$(mktemp -d)
"$BIN/pytest" -m "not slow and not integration and not spark" --basetemp="$scratch/tmp" \
    -p no:cacheprovider "$@" >"$scratch/in-process.log" 2>&1 &
in_process=$!
cleanup() {
    if [ -n "$in_process" ]; then  # still running: this script was interrupted
        kill "$in_process" 2>/dev/null
        wait "$in_process" 2>/dev/null
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$BIN/pytest" -m "not slow and (integration or spark)" "$@"
processes=$?
wait "$in_process"
in_process_status=$?
in_process=""
echo
echo "==== in-process tests (unit, simulator, protocol), run alongside: exit $in_process_status ===="
cat "$scratch/in-process.log"
if [ "$processes" -ne 0 ] || [ "$in_process_status" -ne 0 ]; then
    echo "make test: FAILED (real-process session exit $processes, in-process session exit $in_process_status)"
    exit 1
fi
