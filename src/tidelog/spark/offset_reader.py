"""The driver's look-ups: which partitions a subscription covers, and the offsets a
``startingOffsets``/``endingOffsets`` spec stands for.

Offsets are asked with the query's isolation level (KIP-98, ``kafka.isolation.level``), as
a consumer would: latest is the last stable offset (LSO) for read_committed (the default)
and the high watermark for read_uncommitted. Retries: ``tidelog.spark.session``, until
``kafkaConsumer.pollTimeoutMs`` and, when given, at most ``fetchOffset.numRetries`` times,
``fetchOffset.retryIntervalMs`` apart.

Timestamps (``startingTimestamp``, ``*OffsetsByTimestamp``, ``endingTimestamp``) resolve,
as Spark's connector does, to each partition's first offset whose record timestamp is at
or after the time (ListOffsets by time). A partition with no such record starts at its
latest offset with ``startingOffsetsByTimestampStrategy=latest`` and fails the query
with ``error`` (the default); an ending timestamp with no such record ends at latest.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    FetchRequestPartition,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.spark.errors import ConnectorError
from tidelog.spark.options import (
    Assign,
    EarliestSpec,
    LatestSpec,
    OffsetSpec,
    PartitionTimestampSpec,
    ReadOptions,
    SparkOptionError,
    SpecificSpec,
    Subscribe,
    Subscription,
    TimestampSpec,
)
from tidelog.spark.session import REFRESH_ERRORS, RetryableError, RetryLimit, Session


class OffsetReader:
    """Partition discovery and offset look-ups, for the driver."""

    def __init__(self, options: ReadOptions, session: Session | None = None) -> None:
        self.options = options
        #: Its own (opened on first use) unless the caller shares one.
        self.session = session or Session(
            options.bootstrap_servers,
            options.client_id,
            options.request_timeout_ms,
            options.security_properties,
        )
        self.timeout_s = options.poll_timeout_ms / 1000
        interval_ms = options.fetch_offset_retry_interval_ms
        self.limit = RetryLimit(
            options.fetch_offset_retries, interval_ms / 1000 if interval_ms is not None else None
        )
        self.isolation_level = READ_COMMITTED if options.read_committed else READ_UNCOMMITTED

    def close(self) -> None:
        self.session.close()

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (topics that do not exist: none)."""
        subscription: Subscription = self.options.subscription
        if isinstance(subscription, Assign):
            return sorted(subscription.partitions)
        topics = list(subscription.topics) if isinstance(subscription, Subscribe) else None

        def fetch(client: BlockingClient) -> list[TopicPartition]:
            cluster = client.metadata(topics)
            found: list[TopicPartition] = []
            for name, topic in cluster.topics.items():
                if isinstance(subscription, Subscribe) and name not in subscription.topics:
                    continue
                if not isinstance(subscription, Subscribe) and not subscription.matches(name):
                    continue
                if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                if topic.error_code == ErrorCode.LEADER_NOT_AVAILABLE:
                    raise RetryableError(f"topic {name}: {topic.error_code.name}")
                if topic.error_code != ErrorCode.NONE:
                    raise ConnectorError(f"metadata of topic {name}: {topic.error_code.name}")
                found.extend(TopicPartition(name, p) for p in topic.partitions)
            return sorted(found)

        return self.session.call(
            fetch, what="partition discovery", timeout_s=self.timeout_s, limit=self.limit
        )

    def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets for ``timestamp`` (-2 earliest, -1 latest), asked with the query's
        isolation level as a consumer would: latest is the high watermark for
        read_uncommitted, the last stable offset for read_committed (and a timestamp look-up
        finds no offset at or past it)."""
        if not tps:
            return {}
        topics = sorted({tp.topic for tp in tps})

        def fetch(client: BlockingClient) -> dict[TopicPartition, int]:
            results = client.list_offsets(
                dict.fromkeys(tps, timestamp), isolation_level=self.isolation_level
            )
            out = {}
            for tp in tps:
                result = results.get(tp)
                if result is None:
                    raise RetryableError(f"{tp}: no answer")
                if result.error_code in REFRESH_ERRORS:
                    raise RetryableError(f"{tp}: {result.error_code.name}")
                if result.error_code != ErrorCode.NONE:
                    raise ConnectorError(f"ListOffsets for {tp}: {result.error_code.name}")
                out[tp] = result.offset
            return out

        return self.session.call(
            fetch,
            what=f"offsets of {', '.join(topics)}",
            timeout_s=self.timeout_s,
            topics=topics,
            limit=self.limit,
        )

    def earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, EARLIEST_TIMESTAMP)

    def latest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, LATEST_TIMESTAMP)

    def resolve(
        self,
        spec: OffsetSpec,
        tps: Sequence[TopicPartition],
        *,
        default_latest: bool,
        side: str = "starting",
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for a starting or ending (``side``) spec."""
        if isinstance(spec, EarliestSpec):
            return self.earliest(tps)
        if isinstance(spec, LatestSpec):
            return self.latest(tps)
        if isinstance(spec, TimestampSpec):
            return self._by_timestamp(spec, tps, f"{side}Timestamp")
        if isinstance(spec, PartitionTimestampSpec):
            return self._by_timestamp(spec, tps, f"{side}OffsetsByTimestamp")
        assert isinstance(spec, SpecificSpec)
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            given = spec.offsets.get(tp.topic, {}).get(tp.partition)
            wanted[tp] = given if given is not None else (-1 if default_latest else -2)
        earliest_needed = [tp for tp, o in wanted.items() if o == -2]
        latest_needed = [tp for tp, o in wanted.items() if o == -1]
        wanted.update(self.earliest(earliest_needed))
        wanted.update(self.latest(latest_needed))
        return wanted

    def _by_timestamp(
        self, spec: TimestampSpec | PartitionTimestampSpec, tps: Sequence[TopicPartition], name: str
    ) -> dict[TopicPartition, int]:
        """The first offset at or after each partition's timestamp (module docstring)."""
        if isinstance(spec, TimestampSpec):
            times = dict.fromkeys(tps, spec.timestamp_ms)
        else:
            times = {
                tp: spec.timestamps[tp.topic][tp.partition]
                for tp in tps
                if tp.partition in spec.timestamps.get(tp.topic, {})
            }
            named = {TopicPartition(t, p) for t, parts in spec.timestamps.items() for p in parts}
            if named != set(tps):
                missing = ", ".join(str(tp) for tp in sorted(set(tps) - named)) or "none"
                extra = ", ".join(str(tp) for tp in sorted(named - set(tps))) or "none"
                raise SparkOptionError(
                    f"option '{name}' must give a timestamp for every partition the query "
                    f"reads, and only those (as Spark's Kafka connector): missing {missing}; "
                    f"not read {extra}"
                )
        found: dict[TopicPartition, int] = {}
        for timestamp in sorted(set(times.values())):
            found.update(self.list_offsets([tp for tp in tps if times[tp] == timestamp], timestamp))
        missing_tps = [tp for tp, o in found.items() if o < 0]
        strategy = self.options.starting_timestamp_strategy
        if missing_tps and name.startswith("starting") and strategy == "error":
            raise ConnectorError(
                f"option '{name}': no record of "
                + ", ".join(f"{tp} at or after {times[tp]}" for tp in missing_tps)
                + " (startingOffsetsByTimestampStrategy is 'error'; set it to 'latest' to "
                "start such partitions at their latest offset)"
            )
        # No record at or after the time: latest (Spark's strategy "latest"; always for ends).
        found.update(self.latest(missing_tps))
        return found

    def truncated_below(self, tp: TopicPartition, offset: int) -> bool:
        """True if the log of ``tp`` now ends below ``offset`` (an unclean election or a
        recreated topic took records back); False if ``offset`` is still in the log."""

        def fetch(client: BlockingClient) -> bool:
            results = client.fetch(
                {tp: FetchRequestPartition(offset, partition_max_bytes=1)}, max_wait_ms=0
            )
            result = results.get(tp)
            if result is None or result.error_code in REFRESH_ERRORS:
                raise RetryableError(f"{tp}: {result.error_code.name if result else 'no answer'}")
            return result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE

        return self.session.call(
            fetch,
            what=f"log end check of {tp}",
            timeout_s=self.timeout_s,
            topics=[tp.topic],
            limit=self.limit,
        )
