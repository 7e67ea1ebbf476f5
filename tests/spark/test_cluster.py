"""The data source on a real standalone Spark cluster (a master and one or two workers from
the pyspark install, started here and stopped by PID), not only ``local[*]``; and through a
Spark Connect server (``SparkSession.builder.remote``) driving such a cluster.

Each job runs in a driver process of its own (``cluster_job.py``): under ``spark-submit``,
or as a Spark Connect client. Every Spark process is stopped by its PID (and the
executors and Python workers a worker started, by theirs). All three are marked ``slow``
(``make test-spark-cluster``); run with ``-s`` to see the figures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess, free_port, wait_until
from tests.spark.conftest import create_topic, produce, unique
from tidelog.client import READ_COMMITTED, READ_UNCOMMITTED, BlockingClient, Record
from tidelog.model import TopicPartition
from tidelog.protocol.list_offsets import LATEST_TIMESTAMP

confluent_kafka = pytest.importorskip("confluent_kafka")

# Above the 600 s default: on 2 shared cores a job's JVMs may take minutes to start.
pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]

ROOT = Path(__file__).parents[2]
JOB = Path(__file__).with_name("cluster_job.py")
JOB_TIMEOUT_S = 900.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


# --- processes -------------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> ppid, from /proc."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None once it is gone: tells a
    process from a later one that reuses its PID."""
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    parents = _parents()
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        todo += children
    return found


def ancestors(pid: int) -> list[int]:
    parents = _parents()
    found: list[int] = []
    while pid in parents and parents[pid] > 1:
        pid = parents[pid]
        found.append(pid)
    return found


def sigkill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process under it, each by PID; returns them."""
    victims = [pid, *descendants(pid)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return victims


def spark_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **extra,
    }


class SparkDaemon:
    """One Spark JVM (``spark-class`` or ``spark-submit``, which exec it), logs in a file,
    stopped by PID together with the processes it started (a worker's executors and their
    Python workers)."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command, stdout=self._out, stderr=subprocess.STDOUT, env=env
        )

    @classmethod
    def spark_class(cls, args: list[str], log: Path, env: dict[str, str]) -> SparkDaemon:
        return cls([str(spark_home() / "bin" / "spark-class"), *args], log, env)

    def wait_for(self, text: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-5000:]
            time.sleep(0.3)
        raise TimeoutError(f"{text!r} not seen:\n{self.log.read_text(errors='replace')}")

    def kill(self) -> list[int]:
        """SIGKILL this JVM and everything under it (a lost machine)."""
        victims = sigkill_tree(self.process.pid)
        self.process.wait(30)
        return victims

    def stop(self) -> None:
        children = [(pid, start_time(pid)) for pid in descendants(self.process.pid)]
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        for pid, started in children:  # executors a worker's shutdown left behind
            if started is not None and start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._out.close()


class StandaloneCluster:
    """A standalone master and ``workers`` workers of 1 core and 1 GB each."""

    def __init__(self, tmp_path: Path, workers: int) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers: list[SparkDaemon] = []
        self.master: SparkDaemon | None = None
        self._count = workers

    def start(self) -> StandaloneCluster:
        env = spark_env(SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self.master = SparkDaemon.spark_class(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(free_port()),
            ],
            self.tmp_path / "master.log",
            env,
        )
        self.master.wait_for("I have been elected leader")
        for i in range(self._count):
            worker = SparkDaemon.spark_class(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(self.tmp_path / f"work{i}"),
                ],
                self.tmp_path / f"worker{i}.log",
                env,
            )
            self.workers.append(worker)
            worker.wait_for("Successfully registered with master")
        return self

    def stop(self) -> None:
        for daemon in [*reversed(self.workers), *([self.master] if self.master else [])]:
            daemon.stop()


@contextlib.contextmanager
def standalone(tmp_path: Path, workers: int) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path, workers)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def submit_args(master: str) -> list[str]:
    """``spark-submit`` options of every job: small executors, the driver on loopback, and
    tidelog importable by the executors' Python workers."""
    return [
        "--master",
        master,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.executorEnv.PYTHONPATH={ROOT / 'src'}",
    ]


def run_job(command: list[str], log: Path) -> dict[str, Any]:
    """Run a job to its end; its RESULT line (the job's stderr is in ``log``)."""
    with log.open("wb") as stderr:
        result = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=spark_env(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}"),
            cwd=ROOT,
            timeout=JOB_TIMEOUT_S,
            check=False,
        )
    stdout = result.stdout.decode(errors="replace")
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0, f"the job exited with {result.returncode}; see {log}"
    assert lines, f"no RESULT; see {log}:\n{stdout[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert report.get("error") is None, report["error"]
    return report


# --- the sink, read by a real Kafka client -------------------------------------------------


def _ends(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    """(last stable offset, high watermark) of each partition."""
    latest = dict.fromkeys([TopicPartition(topic, p) for p in range(partitions)], LATEST_TIMESTAMP)
    with BlockingClient(bootstrap) as client:
        lso = client.list_offsets(latest, isolation_level=READ_COMMITTED)
        hw = client.list_offsets(latest, isolation_level=READ_UNCOMMITTED)
    return [(lso[tp].offset, hw[tp].offset) for tp in latest]


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value a confluent-kafka consumer with ``isolation`` reads, from the start to the
    end of each partition (the LSO for read_committed)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("cluster-reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    at_end: set[int] = set()

    def done() -> bool:
        for msg in consumer.consume(1000, 0.5):
            err = msg.error()
            if err is None:
                got.append(msg.value())
                at_end.discard(msg.partition())
            elif err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise AssertionError(f"consumer error: {err}")
        return len(at_end) == partitions

    try:
        wait_until(done, 120, f"the end of {topic} ({isolation})")
    finally:
        consumer.close()
    return got


def check_exactly_once(bootstrap: str, sink: str, partitions: int, expected: list[bytes]) -> int:
    """SINK, read_committed, holds each expected value once; returns the number of data
    records in its log (read_uncommitted: those of aborted transactions too)."""
    wait_until(
        lambda: all(lso == hw for lso, hw in _ends(bootstrap, sink, partitions)),
        120,
        f"no open transaction in {sink}",
    )
    committed = Counter(read_values(bootstrap, sink, partitions, "read_committed"))
    duplicated = sorted(v for v, n in committed.items() if n > 1)
    missing = sorted(set(expected) - set(committed))
    unexpected = sorted(set(committed) - set(expected))
    assert not duplicated, f"{len(duplicated)} values twice or more, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} values missing, e.g. {missing[:5]}"
    assert not unexpected, unexpected[:5]
    return len(read_values(bootstrap, sink, partitions, "read_uncommitted"))


# --- tests -----------------------------------------------------------------------------------


def _check_roundtrip(report: dict[str, Any], broker: BrokerProcess, sink: str) -> None:
    expected = sorted(f"v{i}" for i in range(1000))
    assert report["batch"] == expected
    assert report["streamed"] == expected
    assert sum(report["batches"]) == 1000
    assert all(n <= 400 for n in report["batches"])
    in_log = check_exactly_once(broker.bootstrap, sink, 2, [v.encode() for v in expected])
    assert in_log == 1000  # no failure: nothing aborted, nothing written twice


def test_batch_and_stream_on_a_standalone_cluster(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap, unique("cluster"), partitions=2)
    sink = create_topic(broker.bootstrap, unique("cluster-sink"), partitions=2)
    with standalone(tmp_path, workers=1) as cluster:
        report = run_job(
            [
                str(spark_home() / "bin" / "spark-submit"),
                *submit_args(cluster.url),
                str(JOB),
                "roundtrip",
                broker.bootstrap,
                topic,
                sink,
                str(tmp_path / "out"),
            ],
            tmp_path / "job.log",
        )
    assert report["master"] == cluster.url
    assert not report["remote"]
    _check_roundtrip(report, broker, sink)


PARTITIONS = 6
RECORDS = 3000
MAX_OFFSETS_PER_TRIGGER = 600


def _tagged(path: Path, tag: str) -> list[dict[str, Any]]:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [json.loads(line[len(tag) + 1 :]) for line in lines if line.startswith(tag + " ")]


def test_exactly_once_across_two_workers_with_one_killed_mid_query(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    source = create_topic(bootstrap, unique("cluster-eo-source"), PARTITIONS)
    sink = create_topic(bootstrap, unique("cluster-eo-sink"), PARTITIONS)
    values = [b"v%05d" % i for i in range(RECORDS)]
    for p in range(PARTITIONS):
        records = [Record(value=v, key=v) for v in values[p::PARTITIONS]]
        # Wall-clock timestamps: records stamped 0 would be past retention.ms (7 days) and
        # deleted by the broker's retention check while a slow run still reads them.
        produce(bootstrap, source, p, records, timestamp_ms=int(time.time() * 1000))
    marker, stdout = tmp_path / "stalled.json", tmp_path / "job.out"
    started = time.monotonic()
    with (
        standalone(tmp_path, workers=2) as cluster,
        stdout.open("wb") as out,
        (tmp_path / "job.log").open("wb") as err,
    ):
        args = [source, sink, str(tmp_path / "checkpoint"), str(MAX_OFFSETS_PER_TRIGGER)]
        job = subprocess.Popen(
            [
                str(spark_home() / "bin" / "spark-submit"),
                *submit_args(cluster.url),
                str(JOB),
                "exactly-once",
                bootstrap,
                *args,
                str(marker),
            ],
            stdout=out,
            stderr=err,
            env=spark_env(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}"),
            cwd=ROOT,
        )
        try:
            # Micro-batch 1's task 0 wrote its records in its open transaction and stalls:
            # kill the worker that runs it (the worker JVM, its executor and the executor's
            # Python workers, each SIGKILLed by PID), as if its machine died.
            wait_until(lambda: marker.exists() or job.poll() is not None, 600, "the stalled task")
            assert job.poll() is None, f"the job exited with {job.returncode}; see {tmp_path}"
            stalled = int(json.loads(marker.read_text())["pid"])
            lineage = ancestors(stalled)
            (victim,) = [w for w in cluster.workers if w.process.pid in lineage]
            open_at_kill = any(lso < hw for lso, hw in _ends(bootstrap, sink, PARTITIONS))
            batches_before = len(_tagged(stdout, "PROGRESS"))
            killed = victim.kill()
            killed_at = time.monotonic()
            job.wait(JOB_TIMEOUT_S)
        finally:
            if job.poll() is None:
                sigkill_tree(job.pid)
                job.wait(30)
        survivor_alive = all(w.process.poll() is None for w in cluster.workers if w is not victim)
    elapsed = time.monotonic() - started
    assert job.returncode == 0, f"the job exited with {job.returncode}; see {tmp_path}"
    (result,) = _tagged(stdout, "RESULT")
    assert result["error"] is None, result["error"]
    assert result["rows"] == RECORDS
    in_log = check_exactly_once(bootstrap, sink, PARTITIONS, values)
    print(
        f"\nstandalone cluster, 2 workers x 1 core: {RECORDS} records from {PARTITIONS} "
        f"partitions in {len(result['batches'])} micro-batches, {elapsed:.0f}s wall; the "
        f"worker running micro-batch 1's task 0 SIGKILLed ({len(killed)} processes) after "
        f"{batches_before} micro-batches, {killed_at - started:.0f}s in (open transaction "
        f"in the sink then: {open_at_kill}); {result['failed_task_attempts']} failed task "
        f"attempts, {result['executors_at_end']} executor(s) at the end; the sink log holds "
        f"{in_log} data records, {in_log - RECORDS} in aborted transactions; read_committed: "
        "each source record once"
    )
    assert open_at_kill, "the stalled task's transaction was not open when its worker died"
    assert survivor_alive
    assert result["failed_task_attempts"] >= 1
    assert result["executors_at_end"] == 1
    # The killed attempt's records are in the log, aborted (the retry fenced them).
    assert in_log > RECORDS


#: What a Spark Connect client needs beyond pyspark (``pyspark[connect]``, in the ``spark``
#: extra): the server side ships with pyspark (jars/spark-connect_2.13-4.3.0.jar).
CONNECT_CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc.status_pb2", "pandas")


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


def test_spark_connect_runs_the_same_read_and_write(broker: BrokerProcess, tmp_path: Path) -> None:
    missing = _missing(CONNECT_CLIENT_MODULES)
    if missing:
        pytest.skip(f"Spark Connect client modules missing: {missing} (pyspark[connect])")
    topic = create_topic(broker.bootstrap, unique("connect"), partitions=2)
    sink = create_topic(broker.bootstrap, unique("connect-sink"), partitions=2)
    port = free_port()
    with standalone(tmp_path, workers=1) as cluster:
        # The Connect server is the driver: its Python workers plan the data source, so
        # tidelog must be importable there too (PYTHONPATH), as on the executors.
        server = SparkDaemon(
            [
                str(spark_home() / "bin" / "spark-submit"),
                "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                *submit_args(cluster.url),
                "--conf",
                f"spark.connect.grpc.binding.port={port}",
                "--conf",
                "spark.connect.grpc.binding.address=127.0.0.1",
                "spark-internal",
            ],
            tmp_path / "connect-server.log",
            spark_env(PYTHONPATH=str(ROOT / "src")),
        )
        try:
            server.wait_for("Spark Connect server started", timeout=300)
            report = run_job(
                [
                    sys.executable,
                    str(JOB),
                    "roundtrip",
                    broker.bootstrap,
                    topic,
                    sink,
                    str(tmp_path / "out"),
                    f"sc://127.0.0.1:{port}",
                ],
                tmp_path / "job.log",
            )
        finally:
            server.stop()
    assert report["remote"]
    assert report["session"] == "pyspark.sql.connect.session"
    assert report["master"] == cluster.url
    _check_roundtrip(report, broker, sink)
    print(f"\nSpark Connect: micro-batches {report['batches']}")
