# usage: . cluster.sh TREE DIR  -> exports BOOT, PID1
export PYTHONPATH=$1/src; PY=/work/main/.venv/bin/python; D=$2; rm -rf $D
$PY -m tidelog cluster up --dir $D --brokers 3 --override min.insync.replicas=2 >/dev/null
for t in e e-bg f f-bg g g-bg; do $PY -m tidelog topics create --dir $D --topic $t --partitions 3 --replication-factor 3 >/dev/null; done
export BOOT=$($PY -c "import json;s=json.load(open('$D/cluster.json'));print(','.join(f\"127.0.0.1:{b['port']}\" for b in s['brokers']))")
export PID1=$($PY -c "import json;s=json.load(open('$D/cluster.json'));print(s['brokers'][0]['pid'])")
