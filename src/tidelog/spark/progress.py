# ruff: noqa: N802  (onQueryStarted etc. are PySpark's names)
"""Progress a user can watch (issue 31 point 3): how far a stream is behind the latest
offsets, and its offsets committed to a consumer group.

Offsets behind latest:

1. Spark's Kafka source puts ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
   ``avgOffsetsBehindLatest`` in ``StreamingQueryProgress.sources[i].metrics`` through the
   DSv2 interface ``ReportsSourceMetrics``. A Python data source cannot, in PySpark 4.3:
   ``DataSourceStreamReader`` (pyspark/sql/datasource.py) has no metrics method, the
   driver-side runner (pyspark/sql/streaming/python_streaming_source_runner.py) knows no
   metrics call (its calls: initialOffset, latestOffset, partitions, commit, the admission
   control and AvailableNow ones, reportLatestOffset), and none of spark-sql 4.3.0's
   ``PythonMicroBatchStream*`` classes implements ``ReportsSourceMetrics``. So a tidelog
   source's ``metrics`` is ``{}``.
2. What Spark does fill for it: ``endOffset`` (the micro-batch's end offsets) and
   ``latestOffset`` (what the source's ``reportLatestOffset`` returned: the latest offsets
   ``latestOffset`` saw when it planned the micro-batch). ``offsets_behind_latest`` computes
   Spark's three metrics from the two with the Kafka source's formula
   (``KafkaMicroBatchStream.metrics``): for each partition of the latest offsets,
   latest - end; the minimum and maximum as integers, the mean as a Java double's string
   (``"30.0"``). ``source_metrics(progress)`` does it for each source of a progress
   (``query.lastProgress``, a listener's ``event.progress``, or their JSON), and
   ``OffsetsBehindLatestListener`` for every progress of every query of a session.

Offsets committed to a consumer group (``commitOffsetsToGroup=true``, ``kafka.group.id``):

3. ``GroupCommitter.commit`` stores a stream's offsets (each the next offset to read) in
   the group with OffsetCommit as Kafka's admin client does for
   ``alterConsumerGroupOffsets``: generation -1, no member id. The coordinator takes such a
   commit only while the group has no members (Empty, or unknown: then it creates it), so
   ``tidelog groups describe`` (and kafka-consumer-groups.sh) show the query's offsets and
   lag for a group no consumer is in.
4. The stream reader commits the end offsets of each micro-batch once Spark has finished
   it: in ``latestOffset(start)``, whose ``start`` is the end of the micro-batch before
   (Spark runs ``latestOffset`` for micro-batch N after micro-batch N-1 is in the commit
   log; a restart that re-runs a micro-batch does so before it asks), and in
   ``commit(end)``. Spark calls ``commit(end)`` of micro-batch N-1 only when it starts
   micro-batch N, so commits from ``commit`` alone would leave the group one micro-batch
   behind, and behind by the last micro-batch for as long as no new data comes (and for
   good after an ``availableNow`` query). Both ask to commit the same offsets; the second
   is skipped.
5. Unchanged offsets are committed again only after ``RECOMMIT_S``, so an idle query's
   offsets do not reach the group's ``offsets.retention.minutes`` (KIP-211: the offsets
   of a group without members expire that long after their last commit).
6. A commit that fails does not fail the query (Spark's checkpoint holds its offsets; the
   group's copy is for watching): retriable answers (coordinator moving or loading, lost
   connections) are retried for ``kafka.request.timeout.ms``, then it and any other
   error are logged as a warning naming the group and Kafka's error, and the next
   micro-batch commits again. Partitions of deleted topics (UNKNOWN_TOPIC_OR_PARTITION)
   are left out quietly. Flink's Kafka source treats its offset commits the same way.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from kio.index import load_request_schema
from pyspark.sql.streaming.listener import StreamingQueryListener

from tidelog.client import BlockingClient, ClientError
from tidelog.client.transactions import COORDINATOR_GROUP
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build
from tidelog.spark.errors import ConnectorError
from tidelog.spark.session import RetryableError, Session

log = logging.getLogger(__name__)

#: The metrics of Spark's Kafka source (rule 1), in its order.
METRIC_NAMES: Final = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")

# --- offsets behind latest (rules 1-2) -------------------------------------------------------

#: Offsets as Spark's Kafka JSON: a dict, its JSON text, or None (Spark's "null").
OffsetsJson = Mapping[str, Any] | str | None


def _offsets(value: OffsetsJson) -> dict[TopicPartition, int] | None:
    """``{"topic": {"0": 23}}`` (or its JSON) as offsets; None when it is not such a map."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, Mapping):
        return None
    out: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            return None
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool):
                return None
            if not isinstance(offset, int):
                return None
            out[TopicPartition(str(topic), int(partition))] = offset
    return out


def behind_latest(end: OffsetsJson, latest: OffsetsJson) -> dict[TopicPartition, int]:
    """Per partition of ``latest``: ``latest - end`` (partitions ``end`` lacks are left
    out; either not offsets JSON: ``{}``)."""
    ends, latests = _offsets(end), _offsets(latest)
    if ends is None or latests is None:
        return {}
    return {tp: o - ends[tp] for tp, o in sorted(latests.items()) if tp in ends}


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it: ``30.0``, ``2.5``, ``1.0E7``."""
    if not math.isfinite(value):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    exact = Decimal(repr(float(value)))
    sign, digits, _ = exact.normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exact.adjusted()}"


def offsets_behind_latest(end: OffsetsJson, latest: OffsetsJson) -> dict[str, str]:
    """Spark's Kafka source metrics (rule 2) for a source's end and latest offsets; ``{}``
    when either is missing, as Spark's."""
    behind = list(behind_latest(end, latest).values())
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": java_double(sum(behind) / len(behind)),
    }


def source_metrics(progress: Mapping[str, Any] | str) -> list[dict[str, str]]:
    """For each source of a ``StreamingQueryProgress`` (or its dict or JSON), in order, the
    offsets-behind-latest metrics (rule 2): ``{}`` for a source whose offsets are not
    Kafka's JSON or that reported no latest offset."""
    if isinstance(progress, str):
        progress = json.loads(progress)
    assert isinstance(progress, Mapping)
    return [
        offsets_behind_latest(source.get("endOffset"), source.get("latestOffset"))
        for source in progress.get("sources") or ()
    ]


class OffsetsBehindLatestListener(StreamingQueryListener):
    """``spark.streams.addListener(OffsetsBehindLatestListener())``: after each progress of
    each query, ``metrics[query id]`` is ``source_metrics`` of it (and ``batch[query id]``
    its batch id), logged at INFO for the sources that have them."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.metrics: dict[str, list[dict[str, str]]] = {}
        self.batch: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        metrics = source_metrics(progress)
        query_id = str(progress["id"])
        with self._lock:
            self.metrics[query_id] = metrics
            self.batch[query_id] = int(progress["batchId"])
        for i, found in enumerate(metrics):
            if found:
                log.info(
                    "query %s batch %s source %d: offsets behind latest min %s avg %s max %s",
                    progress.get("name") or query_id,
                    progress["batchId"],
                    i,
                    found["minOffsetsBehindLatest"],
                    found["avgOffsetsBehindLatest"],
                    found["maxOffsetsBehindLatest"],
                )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


# --- offsets committed to a consumer group (rules 3-6) --------------------------------------

OFFSET_COMMIT_V: Final = 8
#: Rule 5: unchanged offsets are committed again after this long.
RECOMMIT_S: Final = 3600.0
#: Answers after which the coordinator is looked up again and the commit retried (rule 6).
_COORDINATOR_ERRORS: Final = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
#: Answers to a commit without a member (rule 3) while the group has members.
_GROUP_IN_USE: Final = frozenset(
    {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.REBALANCE_IN_PROGRESS,
    }
)


class GroupCommitter:
    """Commits a stream's offsets to one consumer group (rules 3-6). Holds no client (the
    stream reader, which is pickled for its executors, passes its driver session in)."""

    def __init__(self, group_id: str, timeout_ms: int) -> None:
        self.group_id = group_id
        self.timeout_s = timeout_ms / 1000
        #: The offsets last committed and when (``time.monotonic()``).
        self.committed: dict[TopicPartition, int] = {}
        self._committed_at = 0.0
        self._coordinator: int | None = None

    def commit(self, offsets: Mapping[TopicPartition, int], session: Session) -> bool:
        """Commit ``offsets`` unless they were committed less than ``RECOMMIT_S`` ago;
        True if the group has them now. Failures are logged, never raised (rule 6)."""
        wanted = {tp: o for tp, o in offsets.items() if o >= 0}
        now = time.monotonic()
        if not wanted or (wanted == self.committed and now - self._committed_at < RECOMMIT_S):
            return bool(wanted)
        try:
            failed = session.call(
                lambda client: self._commit(client, wanted),
                what=f"committing offsets to group '{self.group_id}'",
                timeout_s=self.timeout_s,
            )
        except (ConnectorError, ClientError) as exc:
            log.warning("%s (the query goes on; the next micro-batch commits again)", exc)
            return False
        if failed:
            log.warning(
                "committing offsets to group '%s' failed: %s (the query goes on; the next "
                "micro-batch commits again)",
                self.group_id,
                failed,
            )
            return False
        self.committed = wanted
        self._committed_at = now
        return True

    def _commit(self, client: BlockingClient, offsets: Mapping[TopicPartition, int]) -> str:
        """One OffsetCommit at the coordinator; what failed ("" for nothing)."""
        if self._coordinator is None:
            found = client.find_coordinator(self.group_id, key_type=COORDINATOR_GROUP)
            code = found.error_code
            if code in _COORDINATOR_ERRORS:
                raise RetryableError(f"FindCoordinator: {code.name}")
            if code != ErrorCode.NONE:
                return f"FindCoordinator: {code.name}"
            self._coordinator = found.node_id
        try:
            response = client.send(
                _commit_request(self.group_id, offsets), node_id=self._coordinator
            )
        except Exception:
            self._coordinator = None
            raise
        errors: dict[ErrorCode, list[str]] = {}
        for topic in response.topics:
            for p in topic.partitions:
                code = error_code(p.error_code)
                if code != ErrorCode.NONE:
                    errors.setdefault(code, []).append(f"{topic.name}-{p.partition_index}")
        if errors.keys() & _COORDINATOR_ERRORS:
            self._coordinator = None
            raise RetryableError(", ".join(sorted(c.name for c in errors)))
        gone = errors.pop(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        if gone:
            log.info(
                "group '%s': not committing offsets of %s (no such partition)", self.group_id, gone
            )
        return "; ".join(_explain(self.group_id, code, tps) for code, tps in sorted(errors.items()))


def _explain(group_id: str, code: ErrorCode, tps: list[str]) -> str:
    if code in _GROUP_IN_USE:
        return (
            f"{code.name}: group '{group_id}' has members (consumers are in it); "
            "commitOffsetsToGroup needs a group no consumer uses"
        )
    return f"{code.name} for {', '.join(tps)}"


def _commit_request(group_id: str, offsets: Mapping[TopicPartition, int]) -> Any:
    """OffsetCommit v8 as an admin client sends it (rule 3)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    data = {
        "group_id": group_id,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    return build(load_request_schema(ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_V), data)
