"""Which ``__consumer_offsets`` partitions this broker coordinates (rule 2 of
``tidelog.server.coordinators.group``): a partition's groups and offsets are loaded by
replaying it when this broker leads it at a new leader epoch, and unloaded when that
leadership ends (Kafka's GroupMetadataManager load and unload)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tidelog.client.records import decode_records
from tidelog.coordinator import partition_for
from tidelog.coordinator.group import Effects, GroupConfig, GroupManager
from tidelog.coordinator.records import RecordFormatError
from tidelog.coordinator.txn_offsets import PartitionReplay
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.server.coordinators.group_common import Clock
from tidelog.server.coordinators.internal_topics import OFFSETS_TOPIC, replay_batches
from tidelog.server.replica.hosted_of_topic import HostedOfTopic
from tidelog.server.replica.manager import ReplicaManager

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedPartition:
    """A loaded partition's state machine and the leader epoch it was loaded at."""

    manager: GroupManager
    leader_epoch: int


class GroupPartitions:
    """The loaded ``__consumer_offsets`` partitions of this broker. ``partition_count`` is
    the topic's partition count as this broker knows it (0: not yet); ``apply`` receives the
    effects of an unload (parked requests answered NOT_COORDINATOR)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        partition_count: Callable[[], int],
        group_config: GroupConfig,
        clock: Clock,
        apply: Callable[[int, Effects], None],
    ) -> None:
        self.replica_manager = replica_manager
        self.partition_count = partition_count
        self.group_config = group_config
        self.clock = clock
        self.apply = apply
        self.loaded: dict[int, LoadedPartition] = {}
        self._offsets_partitions = HostedOfTopic(replica_manager, OFFSETS_TOPIC)

    def load_led(self) -> None:
        """Load every ``__consumer_offsets`` partition this broker leads now."""
        partitions = self.replica_manager.partitions
        for tp in self._offsets_partitions.hosted():
            hosted = partitions.get(tp)
            if hosted is not None and hosted.partition.is_leader:
                self.manager_of_partition(tp.partition)

    def managers(self) -> Iterator[tuple[int, GroupManager]]:
        """Each loaded partition and its manager, re-checking leadership first."""
        for p in list(self.loaded):
            manager = self.manager_of_partition(p)
            if manager is not None:
                yield p, manager

    def manager_of_partition(self, p: int) -> GroupManager | None:
        """The manager of partition ``p`` when this broker leads it (loading it at a new
        leader epoch), else None (after unloading what was there)."""
        hosted = self.replica_manager.partitions.get(TopicPartition(OFFSETS_TOPIC, p))
        loaded = self.loaded.get(p)
        if hosted is None or not hosted.partition.is_leader:
            if loaded is not None:
                self.unload(p)
            return None
        epoch = hosted.partition.leader_epoch
        if loaded is not None and loaded.leader_epoch == epoch:
            return loaded.manager
        if loaded is not None:
            self.unload(p)
        manager = GroupManager(self.group_config)
        replay = self.read_partition(p)
        manager.load(replay.groups, replay.committed(), self.clock(), replay.pending)
        self.loaded[p] = LoadedPartition(manager, epoch)
        count = len(manager.groups)
        log.info("loaded %s-%d at leader epoch %d: %d groups", OFFSETS_TOPIC, p, epoch, count)
        return manager

    def read_partition(self, p: int) -> PartitionReplay:
        """Replay the partition from its start to its end: the last record per key wins;
        transactional batches stay pending until their producer's marker (control batch)."""
        hosted = self.replica_manager.partitions[TopicPartition(OFFSETS_TOPIC, p)]
        replay = PartitionReplay()
        for header, batch, first in replay_batches(hosted.log):
            # A transactional batch's offsets belong to its producer until its marker.
            producer_id = header.producer_id if header.is_transactional else -1
            for rec in decode_records(batch, verify_crc=False, include_control=True):
                if rec.offset < first:
                    continue
                if header.is_control:
                    replay.marker(header.producer_id, rec.key)
                    continue
                try:
                    if rec.key is not None:
                        replay.record(header.base_offset, producer_id, rec.key, rec.value)
                except RecordFormatError as exc:
                    log.warning("%s-%d offset %d skipped: %s", OFFSETS_TOPIC, p, rec.offset, exc)
        return replay

    def unload(self, p: int) -> None:
        loaded = self.loaded.pop(p, None)
        if loaded is not None:
            log.info("unloaded %s-%d: no longer its leader", OFFSETS_TOPIC, p)
            self.apply(p, loaded.manager.unload())

    def is_current(self, p: int, manager: GroupManager) -> bool:
        """``manager`` is still the loaded manager of partition ``p`` (not unloaded since)."""
        loaded = self.loaded.get(p)
        return loaded is not None and loaded.manager is manager

    def lookup(self, group_id: str) -> tuple[int, GroupManager | None, ErrorCode]:
        """The partition and manager of a group here, or NOT_COORDINATOR."""
        count = self.partition_count()
        if count == 0:
            return -1, None, ErrorCode.NOT_COORDINATOR
        p = partition_for(group_id, count)
        manager = self.manager_of_partition(p)
        if manager is None:
            return p, None, ErrorCode.NOT_COORDINATOR
        return p, manager, ErrorCode.NONE


__all__ = ["GroupPartitions", "LoadedPartition"]
