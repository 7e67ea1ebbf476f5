"""The data source on a real standalone Spark cluster (master + worker from the pyspark
install, started here and stopped by PID), not only ``local[*]``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, free_port
from tests.spark.conftest import create_topic, unique

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).parents[2]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkDaemon:
    """One ``spark-class`` process (Master or Worker), logs in a file, stopped by PID."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            assert self.process.poll() is None, self.log.read_text(errors="replace")
            time.sleep(0.3)
        raise TimeoutError(f"{text!r} not seen:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._out.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
    }
    port = free_port()
    master = SparkDaemon(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        ],
        tmp_path / "master.log",
        env,
    )
    daemons = [master]
    try:
        master.wait_for("I have been elected leader")
        worker = SparkDaemon(
            [
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(tmp_path / "work"),
            ],
            tmp_path / "worker.log",
            env,
        )
        daemons.append(worker)
        worker.wait_for("Successfully registered with master")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def test_batch_and_stream_on_a_standalone_cluster(
    cluster: str, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = create_topic(broker.bootstrap, unique("cluster"), partitions=2)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    result = subprocess.run(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            cluster,
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.executorEnv.PYTHONPATH={ROOT / 'src'}",
            str(ROOT / "tests" / "spark" / "cluster_job.py"),
            broker.bootstrap,
            topic,
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0, result.stderr[-5000:]
    assert lines, result.stdout[-3000:]
    report = json.loads(lines[-1].removeprefix("RESULT "))
    expected = sorted(f"v{i}" for i in range(1000))
    assert report["master"] == cluster
    assert report["batch"] == expected
    assert report["streamed"] == expected
    assert all(n <= 400 for n in report["batches"])
