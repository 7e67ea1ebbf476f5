"""Run the orders job as a Spark Declarative Pipeline (``spark-pipelines run``) and verify it.

1. Uses ``--bootstrap`` or starts one standalone broker (``LocalCluster``, no ZooKeeper)
   under ``--dir`` (default ``.tidelog/pipeline``), stopped at the end by its PID.
2. Writes ``--orders`` orders (examples/orders_pipeline.py's generator, acks=all) and the
   heartbeat that closes every window, to a fresh topic.
3. Runs ``spark-pipelines run --spec examples/pipelines/spark-pipeline.yml`` (this
   directory's spec and ``transformations/orders.py``) as a subprocess, with the
   project's interpreter for Spark's Python workers and Spark Connect bound to loopback.
4. Reads the streaming table ``revenue_per_minute`` (the Parquet files its sink committed,
   under ``<dir>/spark-warehouse``) with pyarrow, and the windows the pipeline's tidelog
   sink wrote to a second topic, and compares both with revenue per category per minute
   computed directly.

Exit status 0 when the table matches, 1 when it does not (or is missing), 2 when the
broker could not be started. The CLI's own exit status is printed either way: see
docs/spark.md for the known ``UNKNOWN_RESPONSE`` failure at the end of runs fed by a
Python data source (SPARK-59135), which this script reports but does not hide.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: orders_pipeline

import orders_pipeline  # noqa: E402

from tidelog.cli.launcher import ClusterError, LocalCluster  # noqa: E402
from tidelog.client import BlockingClient, FetchRequestPartition, decode_records  # noqa: E402
from tidelog.errors import ErrorCode  # noqa: E402
from tidelog.model import TopicPartition  # noqa: E402

TABLE = "revenue_per_minute"
#: The CLI's failure after a completed run fed by a Python streaming data source.
KNOWN_ERROR = "[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__"


#: Static settings of the in-process Spark Connect server, in ``<dir>/conf/spark-defaults.conf``
#: (``SPARK_CONF_DIR``). Not as spark-submit ``--conf``: PySpark 4.3.0 passes those on to
#: the server only in part (seen: it listened on all interfaces despite
#: ``--conf spark.connect.grpc.binding.address=127.0.0.1``); not in the spec's
#: ``configuration`` either: the run applies that as SQL confs and fails with
#: ``CANNOT_MODIFY_CONFIG`` on static ones.
SERVER_CONF = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
#: Runtime SQL settings: the spec's ``configuration``.
PIPELINE_CONF = {"spark.sql.shuffle.partitions": "2"}


def write_spec(work: Path) -> Path:
    """This directory's spec and definitions, copied into ``work`` (the storage root, an
    absolute URI, under ``work``; ``PIPELINE_CONF`` as the spec's configuration), and
    ``work/conf/spark-defaults.conf`` with ``SERVER_CONF``."""
    text = (HERE / "spark-pipeline.yml").read_text(encoding="utf-8")
    lines = [
        f"storage: {(work / 'pipeline-storage').as_uri()}" if line.startswith("storage:") else line
        for line in text.splitlines()
    ]
    lines.append("configuration:")
    lines.extend(f'  {key}: "{value}"' for key, value in PIPELINE_CONF.items())
    spec = work / "spark-pipeline.yml"
    spec.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copytree(
        HERE / "transformations",
        work / "transformations",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (work / "conf").mkdir()
    (work / "conf" / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in SERVER_CONF.items()), encoding="utf-8"
    )
    return spec


def spark_pipelines_command(spec: Path) -> list[str]:
    """The CLI next to this interpreter; Spark Connect's in-process server on ``local[2]``
    (spark-submit options go before the subcommand: from ``run`` on, args are the Python
    CLI's)."""
    cli = str(Path(sys.executable).parent / "spark-pipelines")
    return [cli, "--remote", "local[2]", "run", "--spec", str(spec)]


def read_table(work: Path) -> list[dict[str, Any]] | None:
    """The rows of the streaming table: the Parquet files its file sink committed (listed
    in ``_spark_metadata``, so files of a failed batch never count). None if there is no
    table. The server puts its warehouse in its working directory (``work``)."""
    table = work / "spark-warehouse" / TABLE
    log = table / "_spark_metadata"
    if not log.is_dir():
        return None
    files: set[str] = set()
    for entry in log.iterdir():
        if entry.name.startswith(".") or entry.suffix == ".crc":
            continue
        for line in entry.read_text(encoding="utf-8").splitlines()[1:]:  # after "v1"
            record = json.loads(line)
            if record.get("action", "add") == "add":
                files.add(record["path"])
    rows: list[dict[str, Any]] = []
    for path in sorted(files):
        rows.extend(pq.read_table(urlparse(path).path).to_pylist())
    return rows


def read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of partition 0 of ``topic`` up to its high watermark, JSON-decoded."""
    tp = TopicPartition(topic, 0)
    out: list[dict[str, Any]] = []
    offset = 0
    with BlockingClient(bootstrap) as client:
        while True:
            result = client.fetch({tp: FetchRequestPartition(offset)}, max_wait_ms=0)[tp]
            if result.error_code != ErrorCode.NONE:
                raise RuntimeError(f"fetching {tp}: {result.error_code.name}")
            records = [r for r in decode_records(result.records) if r.offset >= offset]
            if not records and offset >= result.high_watermark:
                return out
            out.extend(json.loads(r.value) for r in records if r.value is not None)
            if records:
                offset = records[-1].offset + 1


def run_cli(command: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bool, str | None]:
    """Run spark-pipelines, echoing its output. Returns (exit status, whether it reported
    the run COMPLETED, the last error line)."""
    completed, error = False, None
    with subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            completed = completed or "Run is COMPLETED" in line
            if line.startswith("pyspark.errors.") or "Exception:" in line[:80]:
                error = line.strip()
        status = process.wait()
    return status, completed, error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", help="use these brokers instead of starting one")
    parser.add_argument("--dir", type=Path, default=Path(".tidelog/pipeline"))
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--minutes", type=int, default=5)
    args = parser.parse_args(argv)
    missing = [m for m in ("grpc", "yaml", "pandas") if importlib.util.find_spec(m) is None]
    if missing or not (Path(sys.executable).parent / "spark-pipelines").exists():
        print(
            f"pipeline: spark-pipelines needs PySpark's pipelines extra (missing: "
            f"{', '.join(missing) or 'the spark-pipelines script'}): "
            f'{sys.executable} -m pip install "pyspark[pipelines]==4.3.0"',
            file=sys.stderr,
        )
        return 2

    work: Path = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cluster: LocalCluster | None = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            cluster = LocalCluster(work / "cluster", brokers=1, zookeeper=False)
            try:
                cluster.start()
            except ClusterError as exc:
                print(f"pipeline: cannot start a broker: {exc}", file=sys.stderr)
                return 2
            bootstrap = cluster.bootstrap_servers
        suffix = uuid.uuid4().hex[:8]
        topic, revenue_topic = f"pipeline-orders-{suffix}", f"pipeline-revenue-{suffix}"
        orders_pipeline.ensure_topics(bootstrap, {topic: 2, revenue_topic: 1})
        print(f"pipeline: writing {args.orders} orders to {topic} on {bootstrap} ...", flush=True)
        generated = orders_pipeline.generate_orders(
            bootstrap, topic, count=args.orders, minutes=args.minutes
        )
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(work / "conf"),
            "TIDELOG_BOOTSTRAP": bootstrap,
            "TIDELOG_ORDERS_TOPIC": topic,
            "TIDELOG_REVENUE_TOPIC": revenue_topic,
        }
        command = spark_pipelines_command(write_spec(work))
        print("pipeline: " + " ".join(command), flush=True)
        started = time.monotonic()
        status, completed, error = run_cli(command, env, work)
        elapsed = time.monotonic() - started
        print(
            f"pipeline: spark-pipelines exited with {status} after {elapsed:.0f}s; the run "
            + ("COMPLETED" if completed else "did NOT complete")
            + (f"; last error: {error[:300]}" if error else "")
        )
        known = status != 0 and completed and error is not None and KNOWN_ERROR in error
        if known:
            print(
                "pipeline: that error is the CLI's, after the run completed (its Spark "
                "Connect client rejects an observed-metrics response, "
                "__python_accumulator__, that arrives after the run; see docs/spark.md); "
                "the outputs are checked below"
            )

        expected = orders_pipeline.expected_windows(generated)
        rows = read_table(work) or []
        got = {
            (r["window_start_ms"], r["category"]): (r["revenue_cents"], r["orders"]) for r in rows
        }
        mismatches = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
        in_topic = read_topic(bootstrap, revenue_topic)
        topic_windows = {
            (w["window_start_ms"], w["category"]): (w["revenue_cents"], w["orders"])
            for w in in_topic
        }
        table_ok = bool(rows) and not mismatches and len(rows) == len(got)
        topic_ok = topic_windows == expected
        ok = table_ok and topic_ok and (status == 0 or known)
        print(
            f"pipeline: {len(generated)} orders; {len(expected)} windows expected; table "
            f"{TABLE}: {len(rows)} rows, {len(mismatches)} mismatched"
            + (f" (e.g. {mismatches[:3]})" if mismatches else "")
            + f"; topic {revenue_topic}: {len(in_topic)} records, {len(topic_windows)} windows, "
            + ("matches" if topic_ok else "DIFFERS")
        )
        print(f"pipeline: {'VERIFIED' if ok else 'NOT verified'}")
        return 0 if ok else 1
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
