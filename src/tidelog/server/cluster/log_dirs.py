"""Log dir failure and recovery as the controller must learn them (KIP-112; replica manager
rule 5): when a log dir goes offline this broker stops fetching into it and posts a log dir
failure event for the controller, which moves its leaderships to clean successors and takes
it out of every ISR. When the dir has room again it posts a recovery event (tidelog's) and
fetches again (truncating first, replication rule 7); each leader adds it back to the ISR
once caught up. The event is posted again when a new controller epoch shows up while a dir
is offline (the new controller did not see the first one), and after a re-registration."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from tidelog.model import BrokerId, TopicPartition
from tidelog.server.cluster.fetcher import ReplicaFetcherManager
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.replica.manager import ReplicaManager
from tidelog.server.replica.reads import HostedPartition
from tidelog.zk import ZkClient, ZkError
from tidelog.zk.znodes import LOG_DIR_FAILURE_EVENT, LOG_DIR_RECOVERY_EVENT, LogDirEvent

log = logging.getLogger(__name__)


class LogDirReporter:
    """Stops and restarts the fetchers of a failed log dir and posts one event per change
    of state (any dir offline, or none) to the controller through ZooKeeper."""

    def __init__(
        self,
        *,
        broker_id: BrokerId,
        replica_manager: ReplicaManager,
        fetchers: ReplicaFetcherManager,
        metadata: ClusterMetadataCache,
        zookeeper: Callable[[], ZkClient | None],
        broker_epoch: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.fetchers = fetchers
        self.metadata = metadata
        self.zookeeper = zookeeper
        self.broker_epoch = broker_epoch
        #: The log dir event last posted (None: post the current state again).
        self._reported: int | None = LOG_DIR_RECOVERY_EVENT
        #: Bumped by every request to report again (one arriving while a post is on its way
        #: must not be taken as served by that post).
        self._requests = 0
        self._report = asyncio.Event()

    def _hosted_in(self, log_dir: Path) -> list[tuple[TopicPartition, HostedPartition]]:
        rm = self.replica_manager
        return [(tp, h) for tp, h in rm.partitions.items() if rm.log_dir_of(h) == log_dir]

    def on_log_dir_offline(self, log_dir: Path) -> None:
        """Stop fetching into ``log_dir`` and post the failure."""
        for tp, _hosted in self._hosted_in(log_dir):
            self.fetchers.remove(tp)
        self._report.set()

    def on_log_dir_online(self, log_dir: Path) -> None:
        """Follow again what we follow in ``log_dir`` (truncating first, rule 7). The
        controller's LeaderAndIsr after our recovery event says the same; this covers a
        failure and recovery so quick that only the recovery was posted, or none."""
        for tp, hosted in self._hosted_in(log_dir):
            partition = hosted.partition
            if partition.is_leader or partition.leader_id < 0:
                continue
            leader = self.metadata.brokers.get(partition.leader_id)
            if leader is not None:
                self.fetchers.add(
                    tp, leader.broker_id, leader.host, leader.port, partition.leader_epoch
                )
        # Report the recovery even if the failure was never posted (it came and went before
        # the poster ran): the controller then resends LeaderAndIsr for all our partitions,
        # also those whose LeaderAndIsr failed on the full disk.
        self.report_again()

    def report_again(self) -> None:
        """Post the current state even if it was posted before (a new controller, or a new
        registration, has not seen it)."""
        self._requests += 1
        self._reported = None
        self._report.set()

    async def report_loop(self) -> None:
        """Post a log dir event whenever our state (any dir offline or none) differs from the
        last one posted. One poster, so a failure and a recovery never overtake each other."""
        while True:
            await self._report.wait()
            self._report.clear()
            zk = self.zookeeper()
            offline = bool(self.replica_manager.offline_log_dirs)
            kind = LOG_DIR_FAILURE_EVENT if offline else LOG_DIR_RECOVERY_EVENT
            if zk is None or kind == self._reported:
                continue
            requests = self._requests
            try:
                name = await zk.post_log_dir_event(
                    LogDirEvent(self.broker_id, kind, self.broker_epoch())
                )
            except ZkError as exc:
                log.warning("posting a log dir event failed (%s); trying again", exc)
                await asyncio.sleep(1.0)
                self._report.set()
                continue
            if requests == self._requests:
                self._reported = kind
            log.info(
                "broker %d: log dir %s reported to the controller (%s)",
                self.broker_id,
                "failure" if offline else "recovery",
                name,
            )


__all__ = ["LogDirReporter"]
