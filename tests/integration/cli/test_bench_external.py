"""``tidelog bench --bootstrap-server`` as a subprocess against one real tidelog broker it
did not start: the produce, catch-up and e2e rows exist with their records counted, the
bench's topics are gone afterwards and the user's are not; a replication factor larger
than the cluster and an address nobody answers are one error line each. Nothing here
asserts a speed."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.harness import BrokerProcess
from tests.integration.cli.conftest import Tidelog
from tidelog.testing.processes import free_port

pytestmark = pytest.mark.integration

PREFIX = "tidelog-bench-"


def _metadata(bootstrap: str) -> tuple[str | None, set[str]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return md.cluster_id, set(md.topics)


@pytest.mark.slow  # ~25 s of benchmark rows; `make test-slow` runs it
def test_bench_measures_a_cluster_it_did_not_start_and_deletes_only_its_topics(
    broker: BrokerProcess, tidelog: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    # The user's own topic, with a name the bench's prefix matches.
    keep = f"{PREFIX}keep"
    assert tidelog("topics", "create", *bs, "--topic", keep).returncode == 0
    out = tmp_path / "results"

    ran = tidelog(
        "bench", *bs, "--seconds", "1", "--sizes", "100", "--quick", "--no-charts",
        "--output", str(out), timeout=600,
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
    cluster_id, topics = _metadata(broker.bootstrap)
    assert {t for t in topics if t.startswith(PREFIX)} == {keep}
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["skipped"] == []
    assert data["external_cluster"] == {
        "bootstrap_servers": broker.bootstrap,
        "cluster_id": cluster_id,
        "brokers": 1,
        "controller_id": data["external_cluster"]["controller_id"],
        "replication_factor": 1,  # min(3, the one broker)
        "partitions": 3,
        "topic_prefix": PREFIX,
        "security_protocol": "PLAINTEXT",
    }
    rows = {(r["section"], r["workload"]): r for r in data["rows"]}
    assert sorted(rows) == [
        ("catch-up", "RF=1 backlog 100 B"),
        ("e2e", "RF=1 acks=all 1000 rec/s"),
        ("e2e", "RF=1 acks=all 10000 rec/s"),
        ("produce", "RF=1 acks=1 100 B"),
        ("produce", "RF=1 acks=all 100 B"),
    ]
    for row in data["rows"]:
        assert row["system"] == "external"
        assert row["values"]["cluster"] == {
            "bootstrap_servers": broker.bootstrap,
            "cluster_id": cluster_id,
            "brokers": 1,
            "controller_id": data["external_cluster"]["controller_id"],
        }
    for acks in ("all", "1"):
        produced = rows[("produce", f"RF=1 acks={acks} 100 B")]["values"]
        assert produced["records"] == produced["sent"] > 0
        assert produced["errors"] == 0
    backlog = rows[("produce", "RF=1 acks=all 100 B")]["values"]["records"]
    assert rows[("catch-up", "RF=1 backlog 100 B")]["values"]["records"] == backlog
    for rate in (1000, 10000):
        e2e = rows[("e2e", f"RF=1 acks=all {rate} rec/s")]["values"]
        assert e2e["sent"] == rate * 5  # --quick: 5 s
        assert (e2e["received"], e2e["errors"]) == (e2e["sent"], 0)
    report = (out / "results.md").read_text(encoding="utf-8")
    assert f"`{broker.bootstrap}`, cluster id `{cluster_id}`, 1 broker(s)" in report
    assert "| external | RF=1 acks=all 100 B |" in report


def test_a_factor_larger_than_the_cluster_is_kafkas_error_and_leaves_nothing(
    broker: BrokerProcess, tidelog: Tidelog, tmp_path: Path
) -> None:
    _, before = _metadata(broker.bootstrap)
    out = tmp_path / "results"
    ran = tidelog(
        "bench", "--bootstrap-server", broker.bootstrap, "--replication-factor", "2",
        "--sizes", "100", "--seconds", "1", "--output", str(out),
    )  # fmt: skip
    assert ran.returncode == 1
    lines = ran.stderr.splitlines()
    assert len(lines) == 2, ran.stderr
    assert re.fullmatch(
        r"tidelog bench: error: INVALID_REPLICATION_FACTOR: topic tidelog-bench-[0-9a-f]{8}-"
        r"(produce-acks-all-100|e2e-1000|e2e-10000): Replication factor: 2 larger than "
        r"available brokers: 1\.",
        lines[0],
    ), lines[0]
    assert lines[1] == "hint: the replication factor cannot exceed the number of live brokers"
    # The acks=1 topic (RF=1) was created with the others, and deleted with them.
    assert _metadata(broker.bootstrap)[1] == before
    assert not out.exists()


def test_an_address_nobody_answers_is_one_error_line_within_bounded_time(
    tidelog: Tidelog, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    start = time.monotonic()
    ran = tidelog(
        "bench", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--output", str(out),
        timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert ran.returncode == 1
    assert re.fullmatch(
        r"tidelog bench: error: cannot reach the cluster at 127\.0\.0\.1:\d+ within 10 s: .+\n"
        r"hint: check --bootstrap-server, and the security settings of --command-config\n",
        ran.stderr,
    ), ran.stderr
    assert elapsed < 40  # 10 s for Metadata, and the command's start-up
    assert not out.exists()
