#!/bin/bash
# The quiet phase: every measurement of issue 29's closing run, one after the other.
set -x
cd /work/main
R=benchmarks/results/2026-12-06-issue29
mkdir -p $R
date -u
# 1. Interleaved A/B: e54a6f3 (the README's run of record) against HEAD, produce + e2e.
.venv/bin/python benchmarks/ab.py --a /work/wt-old --b /work/main --runs 3 \
  --bench-args "--only produce,e2e --sizes 100,1024,65536 --seconds 8 --no-charts" \
  --output $R/ab > $R/ab.log 2>&1
date -u
# 2. Idle CPU with 1,000 and 5,000 replicas per broker: before fetch sessions (915811b) and HEAD.
PYTHONPATH=/work/wt-base/src .venv/bin/python -m tidelog bench --only failover --no-charts --output $R/scale-915811b > $R/scale-915811b.log 2>&1
.venv/bin/python -m tidelog bench --only failover --no-charts --output $R/scale-head > $R/scale-head.log 2>&1
date -u
# 3. Scrape stall with 1,000 and 5,000 partitions: 915811b, HEAD, 915811b, HEAD.
for i in 1 2; do for t in wt-base main; do echo "== $t"; (PYTHONPATH=/work/$t/src /work/main/.venv/bin/python /work/main/benchmarks/bench_scrape.py --partitions 1000,5000 --scrapes 10 2>&1 | grep -v WARN); done; done > $R/scrape-ab.txt 2>&1
date -u
# 4. e2e at 10,000 records/s alone and beside a 64 KiB producer at ~100 MB/s: e54a6f3, HEAD.
cd /work/prof
for tree in /work/wt-old /work/main; do
  echo "== $tree"
  . ./cluster.sh $tree /tmp/q-e2e
  PYTHONPATH=/work/main/src $PY e2eload.py $BOOT e 10000 0 10
  PYTHONPATH=/work/main/src $PY e2eload.py $BOOT f 10000 1500 10
  PYTHONPATH=/work/main/src $PY e2eload.py $BOOT g 10000 1500 10
  $PY -m tidelog cluster down --dir /tmp/q-e2e >/dev/null
done > /work/main/$R/e2e-load.txt 2>&1
# 5. Where the cores go at full speed (RF=3 acks=all 100 B), HEAD.
. ./cluster.sh /work/main /tmp/q-cores
$PY -m tidelog topics create --dir /tmp/q-cores --topic t --partitions 3 --replication-factor 3 >/dev/null
$PY cores.py /tmp/q-cores 20 > /work/main/$R/cores.txt 2>&1
$PY -m tidelog cluster down --dir /tmp/q-cores >/dev/null
date -u
