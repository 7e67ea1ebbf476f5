"""Follower fetchers (Kafka's ReplicaFetcherManager and ReplicaFetcherThread): one
``LeaderFetcher`` per leader broker carries every partition this broker follows from it, on
one connection (replication rule 2).

A partition that became follower first finds its divergence point with OffsetForLeaderEpoch
rounds (``replication.truncation``, rule 7), then fetches from its log end offset with
``replica_id`` = own id; the leader's HW caps the follower's HW (rule 3). A fetch answered
without errors is a finished long poll: the next one goes out at once, and
``replica.fetch.backoff.ms`` is waited after failures only (Kafka's AbstractFetcherThread).

Each fetcher keeps a KIP-227 fetch session with its leader (``tidelog.client.fetch_session``):
after the first, full fetch, a round lists only the partitions whose fetch offset, log start
or epoch changed, and an idle follower's fetches are empty both ways.

A round's requests are built incrementally (``_fetch_requests``): only this fetcher appends
to or truncates the logs it follows, so between two rounds a request can change only for a
partition the last answer carried, or one added, removed, paused or sent back to truncation
(each of which makes the next build a full one). Every ``FULL_BUILD_S``, and in every round
while a partition is held back (truncating, paused, throttled, its log dir offline), all
requests are built again. An idle follower's round so costs nothing per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tidelog.aio import cancel_and_wait, wait_for
from tidelog.client.client import Client, FetchResult
from tidelog.client.client import EpochEndOffset as LeaderEpochAnswer
from tidelog.client.client import FetchRequestPartition as ClientFetchPartition
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.client.fetch_session import SESSION_ERRORS, FetchSessionHandler
from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.truncation import EpochEndOffset, follower_truncation_offset
from tidelog.security.client_config import ClientSecurity
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.replica.manager import ReplicaManager, now_ms
from tidelog.server.replica.quota import ReplicationQuota
from tidelog.server.replica.reads import HostedPartition
from tidelog.storage.log import Log

log = logging.getLogger(__name__)

#: How long a partition whose leader answered with an error waits before it is asked again.
_RETRY_PAUSE_S = 0.2
#: The longest a fetcher goes without building every request again (module docstring): a
#: log start moved by retention reaches the leader within this time.
FULL_BUILD_S: Final = 5.0


class FollowerBroker(Protocol):
    """What the fetchers use of this broker (``ClusterNode`` is one)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def broker_id(self) -> BrokerId: ...
    @property
    def peer_security(self) -> ClientSecurity: ...
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def client(self) -> Client: ...
    @property
    def background(self) -> set[asyncio.Task[Any]]: ...


@dataclass(slots=True)
class FetchState:
    """One followed partition in a fetcher: truncating first, then fetching (rule 7)."""

    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    #: Caught up to the leader's high watermark at the last fetch (Kafka's
    #: ``isReplicaInSync``): the follower throttle never holds such a partition back.
    in_sync: bool = False
    #: The leader's high watermark in its last fetch answer (-1: none yet); the lag metrics
    #: read it at scrape time (tidelog.server.observability.metrics).
    leader_high_watermark: int = -1
    #: The last request for this partition, sent again as the same object while nothing in
    #: it changed (the fetch session then sees it unchanged without comparing fields).
    request: ClientFetchPartition | None = None


@dataclass(slots=True)
class LeaderFetcher:
    """All partitions this broker follows from one leader, on one connection (rule 2)."""

    node: FollowerBroker
    leader_id: int
    host: str
    port: int
    partitions: dict[TopicPartition, FetchState] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    conn: BrokerConnection | None = None
    #: The KIP-227 fetch session with the leader (Kafka's FetchSessionHandler).
    session: FetchSessionHandler[ClientFetchPartition] = field(default_factory=FetchSessionHandler)
    #: The last round's partitions due in the fetching step and their requests, kept for
    #: the next round (module docstring); the partitions the last answer carried; when the
    #: next full build is due (0: at once); and the max bytes the requests were built with.
    _due: dict[TopicPartition, FetchState] = field(default_factory=dict)
    _built: dict[TopicPartition, ClientFetchPartition] = field(default_factory=dict)
    _stale: set[TopicPartition] = field(default_factory=set)
    _full_at: float = 0.0
    _built_max_bytes: int = -1
    #: False once a walk found no partition truncating (the truncation step then skips its
    #: walk until a partition is added or sent back to truncation).
    _may_truncate: bool = True

    def follow(self, tp: TopicPartition, state: FetchState) -> None:
        """Fetch ``tp`` (from its divergence check on, ``state``)."""
        self.partitions[tp] = state
        self._full_at = 0.0
        self._may_truncate = True

    def unfollow(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._full_at = 0.0

    def _back_to_truncation(self, fst: FetchState) -> None:
        fst.truncating = True
        self._full_at = 0.0
        self._may_truncate = True

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"fetcher-{self.leader_id}"
        )

    async def stop(self) -> None:
        if self.task is not None:
            await cancel_and_wait(self.task)
        if self.conn is not None:
            await self.conn.close()

    async def _run(self) -> None:
        backoff = self.node.config.get_int("replica.fetch.backoff.ms") / 1000
        while True:
            if not self.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                if self.conn is None or self.conn.is_closed:
                    self.conn = await BrokerConnection.connect(
                        self.host,
                        self.port,
                        client_id=f"replica-fetcher-{self.node.broker_id}",
                        security=self.node.peer_security,
                    )
                progressed = await self._round(self.conn)
            except (ClientError, OSError) as exc:
                log.info("fetcher from broker %d: %s", self.leader_id, exc)
                if self.conn is not None:
                    await self.conn.close()
                    self.conn = None
                # The next connection starts with a full fetch (fetch_session rule 4).
                self.session.handle_error()
                progressed = False
            except KafkaError:
                log.exception("fetcher from broker %d failed", self.leader_id)
                progressed = False
            if not progressed:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await wait_for(self.wake.wait(), backoff)

    def _truncate(self, hosted: HostedPartition, offset: int) -> bool:
        """Truncate a followed log (rule 7); False when its log dir failed meanwhile."""
        try:
            hosted.log.truncate_to(offset)
        except OSError as exc:
            # The cut itself is done (a checkpoint after it failed): the HW follows it.
            hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
            self._storage_failed(hosted.partition.topic_partition, exc)
            return False
        hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
        return True

    def _storage_failed(self, tp: TopicPartition, exc: OSError) -> None:
        log.warning("%s: writing the replica failed: %s", tp, exc)
        self.unfollow(tp)
        self.node.replica_manager.on_storage_error(tp, exc)

    def _current(self, tp: TopicPartition, state: FetchState) -> bool:
        """Whether ``state`` still describes how we follow ``tp`` (nothing moved meanwhile)."""
        if self.partitions.get(tp) is not state:
            return False
        hosted = self.node.replica_manager.partitions.get(tp)
        return (
            hosted is not None
            and hosted.partition.leader_id == self.leader_id
            and hosted.partition.leader_epoch == state.leader_epoch
        )

    def _truncating(self, now: float) -> dict[TopicPartition, FetchState]:
        """The partitions in the truncation step that may go now: not paused after an
        error, their log dir online (the fetching step's are ``_fetch_requests``')."""
        if not self._may_truncate:
            return {}
        rm = self.node.replica_manager
        offline = bool(rm.offline_log_dirs)
        found = False
        due: dict[TopicPartition, FetchState] = {}
        for tp, st in self.partitions.items():
            if st.truncating:
                found = True
                if st.delayed_until <= now and not (offline and rm.is_offline(tp)):
                    due[tp] = st
        self._may_truncate = found
        return due

    async def _round(self, conn: BrokerConnection) -> bool:
        """One round: the divergence checks of the partitions still truncating (rule 7),
        then one fetch for the others (a partition whose check just completed included).
        True when either step made progress."""
        now = asyncio.get_running_loop().time()
        truncated = await self._truncation_step(conn, now)
        fetched = await self._fetch_step(conn, now)
        return truncated or fetched

    # -- step 1: truncation (rule 7) -----------------------------------------------------

    async def _truncation_step(self, conn: BrokerConnection, now: float) -> bool:
        """Ask the leader where each truncating partition's latest epoch ends and cut our log
        back to the divergence point; True when a check completed a step."""
        truncating = self._truncating(now)
        if not truncating:
            return False
        asked: dict[TopicPartition, tuple[int, int]] = {}
        rm = self.node.replica_manager
        for tp, st in truncating.items():
            hosted = rm.partitions[tp]
            latest = hosted.log.leader_epoch_cache.latest_epoch()
            if latest is None:
                # No epoch history: nothing of ours can be proven; keep up to the HW
                # (Kafka's fallback for logs without epochs).
                hw = hosted.partition.high_watermark
                if hosted.log.log_end_offset > hw and not self._truncate(hosted, hw):
                    continue
                st.truncating = False
                self._stale.add(tp)
                continue
            asked[tp] = (latest, st.leader_epoch)
        answers = await self.node.client.offset_for_leader_epoch(
            asked, replica_id=self.node.broker_id, conn=conn
        )
        progressed = False
        for tp, answer in answers.items():
            if self._on_epoch_end_offset(tp, truncating[tp], answer, now):
                progressed = True
        return progressed

    def _on_epoch_end_offset(
        self, tp: TopicPartition, st: FetchState, answer: LeaderEpochAnswer, now: float
    ) -> bool:
        """Apply the leader's answer for one truncating partition; True when applied."""
        if not self._current(tp, st):
            return False
        if answer.error_code != ErrorCode.NONE:
            st.delayed_until = now + _RETRY_PAUSE_S
            return False
        hosted = self.node.replica_manager.partitions[tp]
        decision = follower_truncation_offset(
            hosted.log.leader_epoch_cache,
            log_end_offset=hosted.log.log_end_offset,
            high_watermark=hosted.partition.high_watermark,
            leader_answer=EpochEndOffset(answer.leader_epoch, answer.end_offset),
        )
        if decision.offset < hosted.log.log_end_offset:
            log.info(
                "%s: truncating from %d to %d (leader %d, epoch %d)",
                tp,
                hosted.log.log_end_offset,
                decision.offset,
                self.leader_id,
                st.leader_epoch,
            )
            if not self._truncate(hosted, decision.offset):
                return False
        st.truncating = not decision.truncation_completed
        self._stale.add(tp)
        return True

    # -- step 2: fetch (rules 2, 3) ------------------------------------------------------

    async def _fetch_step(self, conn: BrokerConnection, now: float) -> bool:
        """One Fetch, in the leader's fetch session, for every partition past truncation
        (the follower throttle leaving out the throttled ones over quota); True when records
        were appended or the fetch was answered without errors."""
        fetching, requests, changed = self._fetch_requests(now)
        if not requests:
            return False
        config = self.node.config
        error, results = await self.node.client.session_fetch(
            self.session,
            requests,
            changed=changed,
            max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=config.get_int("replica.fetch.min.bytes"),
            max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            replica_id=self.node.broker_id,
            conn=conn,
        )
        if error != ErrorCode.NONE:
            # A lost or refused session: the next fetch is a full one, sent at once.
            log.info("fetch session with broker %d: %s", self.leader_id, error.name)
            return error in SESSION_ERRORS
        # A fetch answered without errors is a finished long poll (the leader parked it up
        # to replica.fetch.wait.max.ms): fetch again at once, also when an incremental
        # answer is empty (nothing new). replica.fetch.backoff.ms is for failures only
        # (Kafka's AbstractFetcherThread), else a follower idle for one poll sleeps a
        # further second while acks=all produces wait for it.
        progressed = all(r.error_code == ErrorCode.NONE for r in results.values())
        self._stale.update(results)
        quota = self.node.replica_manager.replication_throttles().follower
        for tp, result in results.items():
            fst = fetching.get(tp)
            if fst is None or not self._current(tp, fst):
                continue
            if self._on_fetched(tp, fst, result, quota, now):
                progressed = True
        return progressed

    def _fetch_requests(
        self, now: float
    ) -> tuple[
        dict[TopicPartition, FetchState],
        dict[TopicPartition, ClientFetchPartition],
        set[TopicPartition] | None,
    ]:
        """What this round fetches, with each partition's state as the round began: every
        partition past truncation, not paused, and not held back by the follower throttle
        (KIP-73, replication_quota rule 4); and the partitions whose request may have
        changed since the last round (None: any). In the fetch session a partition missing
        here is forgotten by the leader (fetch_session rule 2): the leader sends nothing
        for it until it is back, with its fetch offset then. Built incrementally (module
        docstring); the dicts are the fetcher's own, valid until its next round."""
        rm = self.node.replica_manager
        max_bytes = self.node.config.get_int("replica.fetch.max.bytes")
        quota = rm.replication_throttles().follower
        if (
            now >= self._full_at
            or quota.throttled
            or rm.offline_log_dirs
            or max_bytes != self._built_max_bytes
        ):
            self._full_build(now, max_bytes, quota)
            return self._due, self._built, None
        changed, self._stale = self._stale, set()
        hosted = rm.partitions
        for tp in changed:
            st = self.partitions.get(tp)
            if st is None or st.truncating or st.delayed_until > now:
                self._due.pop(tp, None)
                self._built.pop(tp, None)
                if st is not None:
                    self._full_at = 0.0  # held back: full builds until it is due again
                continue
            self._due[tp] = st
            self._built[tp] = _request(st, hosted[tp].log, max_bytes)
        return self._due, self._built, changed

    def _full_build(self, now: float, max_bytes: int, quota: ReplicationQuota) -> None:
        """Every partition's request built again (``_fetch_requests``)."""
        rm = self.node.replica_manager
        throttling = bool(quota.throttled)
        offline = bool(rm.offline_log_dirs)
        hosted = rm.partitions
        held = throttling or offline
        due: dict[TopicPartition, FetchState] = {}
        built: dict[TopicPartition, ClientFetchPartition] = {}
        for tp, st in self.partitions.items():
            if st.truncating or st.delayed_until > now or (offline and rm.is_offline(tp)):
                held = True
                continue
            due[tp] = st
            if throttling and quota.should_throttle(tp, in_sync=st.in_sync):
                continue
            built[tp] = _request(st, hosted[tp].log, max_bytes)
        self._due, self._built = due, built
        self._stale.clear()
        self._built_max_bytes = max_bytes
        self._full_at = now if held else now + FULL_BUILD_S

    def _on_fetched(
        self,
        tp: TopicPartition,
        fst: FetchState,
        result: FetchResult,
        quota: ReplicationQuota,
        now: float,
    ) -> bool:
        """Apply one partition's fetch answer; True when records were appended."""
        hosted = self.node.replica_manager.partitions[tp]
        if result.error_code == ErrorCode.NONE:
            appended = bool(result.records)
            if appended:
                if not self._append(tp, hosted, fst, result.records):
                    return False
                if quota.is_throttled(tp):
                    quota.record(len(result.records))
            fst.in_sync = hosted.log.log_end_offset >= result.high_watermark
            fst.leader_high_watermark = result.high_watermark
            if hosted.partition.update_follower_high_watermark(
                log_end_offset=hosted.log.log_end_offset,
                leader_high_watermark=result.high_watermark,
            ):
                # KIP-392: consumers long-polling this follower read below its HW.
                self.node.replica_manager.fetch_purgatory.check_and_complete(tp)
            return appended
        if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= hosted.log.log_end_offset < result.log_start_offset:
                try:
                    hosted.log.truncate_fully_and_start_at(result.log_start_offset)
                except OSError as exc:
                    self._storage_failed(tp, exc)
                    return False
                hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
            else:
                self._back_to_truncation(fst)
        else:
            # Not leader (yet), fenced or unknown epoch: the controller's LeaderAndIsr
            # brings the truth; try again after a short pause.
            fst.delayed_until = now + _RETRY_PAUSE_S
            self._full_at = 0.0
        return False

    def _append(
        self,
        tp: TopicPartition,
        hosted: HostedPartition,
        fst: FetchState,
        records: bytes | memoryview,
    ) -> bool:
        """Append fetched records to the followed log; False when nothing was appended (the
        log dir failed, or the records did not fit our log: it is cut back first)."""
        try:
            hosted.log.append_as_follower(records, now_ms=now_ms())
        except OSError as exc:
            # A full or failing log dir: nothing was appended (storage leaves the log as it
            # was); the dir goes offline and we stop fetching into it until it has room
            # again (replica manager rule 5).
            self._storage_failed(tp, exc)
            return False
        except KafkaError as exc:
            base = _first_base_offset(records)
            leo = hosted.log.log_end_offset
            if base is not None and hosted.log.log_start_offset <= base < leo:
                # The leader's batch straddles our log end: our tail's batch boundaries
                # differ from the leader's although the epochs agree (a tail lost below the
                # HW, then re-fetched). The leader's log is the truth for a follower: cut
                # back to the start of its batch and take it whole next round. The
                # epoch-based truncation finds nothing to cut here.
                log.warning("%s: follower append failed (%s): truncating to %d", tp, exc, base)
                self._truncate(hosted, base)
                return False
            log.warning("%s: follower append failed (%s): truncating", tp, exc)
            self._back_to_truncation(fst)
            return False
        return True


def _request(st: FetchState, the_log: Log, max_bytes: int) -> ClientFetchPartition:
    """``st``'s request from its log's end and start: the last one (the same object, so the
    fetch session sees it unchanged without comparing fields) while nothing in it moved."""
    fetch_offset = the_log.log_end_offset
    log_start_offset = the_log.log_start_offset
    request = st.request
    if (
        request is None
        or request.fetch_offset != fetch_offset
        or request.log_start_offset != log_start_offset
        or request.current_leader_epoch != st.leader_epoch
        or request.partition_max_bytes != max_bytes
    ):
        request = st.request = ClientFetchPartition(
            fetch_offset=fetch_offset,
            partition_max_bytes=max_bytes,
            current_leader_epoch=st.leader_epoch,
            log_start_offset=log_start_offset,
        )
    return request


def _first_base_offset(records: bytes | memoryview) -> int | None:
    """The base offset of the first batch in a fetched record set (None if too short)."""
    if len(records) < 8:
        return None
    return int.from_bytes(records[:8], "big", signed=True)


class ReplicaFetcherManager:
    """Fetchers keyed by leader broker (Kafka's ReplicaFetcherManager)."""

    def __init__(self, node: FollowerBroker) -> None:
        self.node = node
        self.fetchers: dict[int, LeaderFetcher] = {}

    def add(self, tp: TopicPartition, leader: int, host: str, port: int, leader_epoch: int) -> None:
        """Follow ``tp`` from ``leader``, registered at host:port (rule 2)."""
        self.remove(tp)
        host, port = self.node.config.peer_address(leader, host, port)
        fetcher = self.fetchers.get(leader)
        if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
            self._drop(leader)
            fetcher = None
        if fetcher is None:
            fetcher = LeaderFetcher(self.node, leader, host, port)
            self.fetchers[leader] = fetcher
            fetcher.start()
        fetcher.follow(tp, FetchState(leader_epoch))
        fetcher.wake.set()

    def remove(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.unfollow(tp)

    def is_fetching(self, tp: TopicPartition) -> bool:
        """Whether a fetcher carries ``tp``."""
        return any(tp in f.partitions for f in self.fetchers.values())

    def _drop(self, leader: int) -> None:
        fetcher = self.fetchers.pop(leader)
        task = asyncio.get_running_loop().create_task(fetcher.stop())
        self.node.background.add(task)
        task.add_done_callback(self.node.background.discard)

    async def stop(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()


__all__ = ["FetchState", "FollowerBroker", "LeaderFetcher", "ReplicaFetcherManager"]
