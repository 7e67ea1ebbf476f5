"""What the coordinators share about the internal topics they own (``__consumer_offsets``,
``__transaction_state``): their partition count, creating the topic on first use,
and appending a batch that is answered only once replicated.

Rules:
  1. A coordinator owns partition ``p`` of its topic while this broker leads it; its state is
     the replay of that partition (the new leader was in the ISR, so every acknowledged
     write is in its log: rules 6 and 9 of ``docs/design.md``).
  2. Every write is acks=all through the ordinary replication path: the caller is told the
     outcome only once the high watermark passed the batch (or the error that ended the
     wait), mapped by ``error_map`` to what the coordinator's clients understand.
  3. Both topics are compacted (``cleanup.policy=compact``, Kafka's offsetsTopicConfigs and
     TransactionLog's): their state is the last record per key, so the log cleaner
     (``tidelog.storage.cleaner``) bounds them. An existing topic keeps its config
     (Kafka does not alter an existing internal topic either).
  4. A load replays whatever the log holds from its start: after compaction batches and
     offsets have gaps (``replay_batches`` skips them, also a gap at a segment's end).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping

from tidelog.aio import wait_for
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.records import BatchHeader, iter_batches
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.manager import ReplicaManager
from tidelog.server.replica.reads import ProduceResult
from tidelog.storage.log import Log
from tidelog.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

#: The group coordinator's topic (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``).
OFFSETS_TOPIC = "__consumer_offsets"

#: Kafka maps append errors of an internal topic to what coordinator clients understand.
COORDINATOR_APPEND_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def append_replicated(
    replica_manager: ReplicaManager,
    tp: TopicPartition,
    batch: bytes,
    timeout_ms: int,
    error_map: Mapping[ErrorCode, ErrorCode] = COORDINATOR_APPEND_ERRORS,
) -> tuple[int, asyncio.Future[ErrorCode]]:
    """Append ``batch`` to ``tp`` (led here) with acks=all (rule 2), as the broker's own
    write (``AppendOrigin.COORDINATOR``: a coordinator's transactional batch carries no
    sequence, and only this path may write transaction markers). Returns the batch's base
    offset (-1 when refused) and the outcome once replicated."""
    future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
    appended = replica_manager.append_records({tp: batch}, -1, origin=AppendOrigin.COORDINATOR)
    result, required = appended[tp]
    if result.error != ErrorCode.NONE or required < 0:
        future.set_result(error_map.get(result.error, result.error))
        return -1, future

    def respond(final: dict[TopicPartition, ProduceResult]) -> None:
        if not future.done():
            error = final[tp].error
            future.set_result(error_map.get(error, error))

    replica_manager.wait_for_acks(appended, timeout_ms, respond)
    return result.base_offset, future


def replay_batches(the_log: Log) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """Every batch of ``the_log`` from its start to its end, once, for a coordinator's
    load (rule 1): ``(header, batch bytes, first offset to use)``; records of the first
    batch below the log start offset (DeleteRecords inside a batch) are to be skipped."""
    position = the_log.log_start_offset
    end = the_log.log_end_offset
    while position < end:
        chunk = the_log.read(position, 1 << 20, max_offset=None, min_one_batch=True)
        if chunk is None:
            # A compacted segment may end in a gap (its last batches cleaned away): go on
            # at the next segment (rule 4).
            later = [b for b in the_log.segment_base_offsets if b > position]
            if not later:
                return
            position = min(later)
            continue
        data = chunk.read_bytes()
        next_position = position
        for at, header in iter_batches(data):
            next_position = max(next_position, header.next_offset)
            if header.next_offset > position:
                yield header, data[at : at + header.size], position
        if next_position <= position:
            return
        position = next_position


def partition_count(backend: MetadataBackend, topic: str) -> int:
    """How many partitions ``topic`` has, 0 while this broker does not know (a broker that
    replicates some partitions knows those before it knows the count, and a key hashed over
    the wrong count would live in the wrong partition)."""
    info = backend.topics.get(topic)
    return 0 if info is None else info.num_partitions


class InternalTopicCreator:
    """Creates one internal topic on first use, once, however many requests ask at once."""

    def __init__(
        self,
        settings: BrokerConfig,
        backend: MetadataBackend,
        name: str,
        *,
        partitions_key: str,
        replication_key: str,
        config: Mapping[str, str],
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.name = name
        self.partitions_key = partitions_key
        self.replication_key = replication_key
        #: Rule 3: compacted unless the caller says otherwise.
        self.config = {"cleanup.policy": "compact", **config}
        self._creating: asyncio.Task[None] | None = None

    async def ensure(self, timeout_s: float = 5.0) -> int:
        """The topic's partition count, creating it first if needed; 0 if not there yet."""
        count = partition_count(self.backend, self.name)
        if count:
            return count
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        try:
            await wait_for(asyncio.shield(self._creating), timeout_s)
        except TimeoutError:
            return 0
        return partition_count(self.backend, self.name)

    async def _create(self) -> None:
        settings = self.settings
        n = settings.get_int(self.partitions_key)
        live = max(1, len(self.backend.live_broker_ids()))
        rf = min(settings.get_int(self.replication_key), live)
        config = dict(self.config)
        if "min.insync.replicas" in config:  # never above the replication factor chosen
            config["min.insync.replicas"] = str(min(int(config["min.insync.replicas"]), rf))
        # The raw configs go to the controller; a lone broker stores the typed values
        # (what validation would have parsed).
        typed: dict[str, object] = {
            k: int(v) if v.lstrip("-").isdigit() else v for k, v in config.items()
        }
        error, message, _topic_id = await self.backend.create_topic(
            self.name,
            num_partitions=n,
            replication_factor=rf,
            raw_configs=config,
            overrides=typed,
            assignment=None,
            validate_only=False,
        )
        if error == ErrorCode.NONE:
            log.info("created %s: %d partitions, replication factor %d", self.name, n, rf)
        elif error != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("creating %s failed: %s %s", self.name, error.name, message or "")
            return
        await self.backend.wait_for_leaders([self.name], 5.0)


__all__ = [
    "COORDINATOR_APPEND_ERRORS",
    "OFFSETS_TOPIC",
    "InternalTopicCreator",
    "append_replicated",
    "partition_count",
    "replay_batches",
]
