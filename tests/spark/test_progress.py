"""Progress a user can watch, on a real SparkSession and broker: offsets behind latest from
``StreamingQueryProgress`` (and a listener), and ``commitOffsetsToGroup`` showing the
query's offsets and lag in ``tidelog groups describe``."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.spark.conftest import create_topic, produce, unique
from tidelog.cli.main import main
from tidelog.client import BlockingClient, Record
from tidelog.client.group_member import GroupMember
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.spark.progress import (
    METRIC_NAMES,
    GroupCommitter,
    OffsetsBehindLatestListener,
    source_metrics,
)
from tidelog.spark.session import Session

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    """``tidelog groups describe --group G --json`` (in this process)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["groups", "describe", "--bootstrap-server", bootstrap, "--group", group, "--json"]
        )
    assert code == 0, err.getvalue()
    view: dict[str, Any] = json.loads(out.getvalue())[0]
    return view


def group_offsets(view: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``topic-partition`` -> (current offset, lag) of a described group."""
    return {
        f"{p['topic']}-{p['partition']}": (p["current_offset"], p["lag"])
        for p in view["partitions"]
    }


def offsets(progress_offsets: str) -> dict[str, int]:
    """A progress's offsets JSON as ``topic-partition`` -> offset."""
    parsed = json.loads(progress_offsets)
    return {f"{t}-{p}": o for t, parts in parsed.items() for p, o in parts.items()}


def stream(spark: Any, bootstrap: str, topic: str, group: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("commitOffsetsToGroup", "true")
        .option("kafka.group.id", group)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_offsets_behind_latest_and_group_offsets(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Micro-batches limited by maxOffsetsPerTrigger: each progress has the end and latest
    offsets Spark's metrics come from (its ``metrics`` stay empty: PySpark offers a Python
    source no way to fill them); after the last micro-batch the group holds the query's end
    offsets with lag 0, and again after more data."""
    bs = broker.bootstrap
    topic = create_topic(bs, unique("watch"), partitions=3)
    produced = {0: 100, 1: 40, 2: 10}
    for p, n in produced.items():
        produce(bs, topic, p, [Record(f"{p}-{i}".encode()) for i in range(n)])
    group = unique("watchers")
    listener = OffsetsBehindLatestListener()
    spark.streams.addListener(listener)
    query = (
        stream(spark, bs, topic, group, maxOffsetsPerTrigger="60")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(batches) >= 3  # 150 records, at most 60 a micro-batch
        first, last = batches[0]["sources"][0], batches[-1]["sources"][0]
        assert first["metrics"] == {}  # no ReportsSourceMetrics for Python sources
        assert offsets(first["latestOffset"]) == {f"{topic}-{p}": n for p, n in produced.items()}
        behind = [n - offsets(first["endOffset"])[f"{topic}-{p}"] for p, n in produced.items()]
        assert sum(behind) == 150 - batches[0]["numInputRows"]
        assert source_metrics(batches[0]) == [
            {
                "minOffsetsBehindLatest": str(min(behind)),
                "maxOffsetsBehindLatest": str(max(behind)),
                "avgOffsetsBehindLatest": str(sum(behind) / 3),
            }
        ]
        caught_up = dict.fromkeys(METRIC_NAMES, "0")
        caught_up["avgOffsetsBehindLatest"] = "0.0"
        assert source_metrics(batches[-1]) == [caught_up]

        # The group: the query's end offsets, nothing behind.
        end = offsets(last["endOffset"])
        assert end == {f"{topic}-{p}": n for p, n in produced.items()}
        view = describe(bs, group)
        assert view["state"] == "Empty"
        assert view["members"] == []
        assert group_offsets(view) == {tp: (o, 0) for tp, o in end.items()}

        # More data: the group follows.
        produce(bs, topic, 1, [Record(b"more") for _ in range(5)])
        query.processAllAvailable()
        assert group_offsets(describe(bs, group))[f"{topic}-1"] == (45, 0)

        # The listener saw the same metrics as the last progress.
        query_id = str(query.id)
        last_batch = query.lastProgress["batchId"]
        wait_until(
            lambda: listener.batch.get(query_id, -1) >= last_batch, 60, "the listener's event"
        )
        assert listener.metrics[query_id] == [caught_up]
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    assert query.exception() is None


def test_available_now_commits_its_last_micro_batch(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    """An availableNow query ends with the group at its final end offsets: Spark calls
    ``commit`` only for micro-batches before the last, the last is committed when the
    query asks for offsets once more and finds nothing new."""
    bs = broker.bootstrap
    topic = create_topic(bs, unique("watch-now"), partitions=1)
    group = unique("watchers-now")
    for run, total in ((1, 30), (2, 45)):
        produce(bs, topic, 0, [Record(b"x") for _ in range(total - (0 if run == 1 else 30))])
        query = (
            stream(spark, bs, topic, group, maxOffsetsPerTrigger="10")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300)
        assert query.exception() is None
        assert sum(p["numInputRows"] for p in query.recentProgress) == (30 if run == 1 else 15)
        assert group_offsets(describe(bs, group)) == {f"{topic}-0": (total, 0)}


def test_a_group_with_members_keeps_its_offsets(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A group consumers are in refuses a commit without a member (Kafka's
    UNKNOWN_MEMBER_ID): the committer says why, raises nothing, and the group's offsets
    stay the consumers'."""
    bs = broker.bootstrap
    topic = create_topic(bs, unique("watch-busy"), partitions=1)
    tp = TopicPartition(topic, 0)
    group = unique("busy")
    with BlockingClient(bs) as client:
        member = GroupMember(client, group, [topic])
        assert member.join() == (tp,)
        assert member.commit({tp: 3}) == ErrorCode.NONE
        session = Session(bs, "tidelog-spark", 30000)
        try:
            committer = GroupCommitter(group, 30000)
            with caplog.at_level(logging.WARNING, logger="tidelog.spark.progress"):
                assert committer.commit({tp: 7}, session) is False
            assert (
                f"committing offsets to group '{group}' failed: UNKNOWN_MEMBER_ID: group "
                f"'{group}' has members (consumers are in it); commitOffsetsToGroup needs a "
                "group no consumer uses"
            ) in caplog.text
            assert member.committed([tp]) == {tp: 3}
            member.leave()
            # Empty now: the commit goes through.
            assert committer.commit({tp: 7}, session) is True
            assert member.committed([tp]) == {tp: 7}
        finally:
            session.close()
