"""The simulator's brokers: the real ``Partition`` and truncation code driven by
LeaderAndIsr, StopReplica, UpdateMetadata and AlterPartition answers, their ISR and flush
timers, the produce purgatory, and followers fetching from leaders (``tidelog.testing.sim``)."""

from __future__ import annotations

from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, NO_EPOCH, BrokerId, TopicPartition
from tidelog.replication.partition import (
    AlterFollowup,
    AlterPartitionProposal,
    LeaderAndIsr,
    Partition,
    alter_partition_followup,
)
from tidelog.replication.truncation import (
    EpochEndOffset,
    diverging_epoch,
    follower_truncation_offset,
    leader_end_offset_for_epoch,
)
from tidelog.testing.sim_core import SimCore
from tidelog.testing.sim_types import (
    EpochRequest,
    Fetcher,
    FetchRequest,
    FetchResponse,
    PendingProduce,
    SimBroker,
    SimLog,
)


class BrokerModel(SimCore):
    """The brokers' side of a run; the controller's side (``ControllerModel``) answers their
    AlterPartition requests."""

    def _controller_alter_partition(
        self, broker: BrokerId, broker_epoch: int, proposal: AlterPartitionProposal
    ) -> None:
        """The controller's AlterPartition handler: ``ControllerModel`` implements it."""
        raise NotImplementedError

    # ---- broker: control plane ------------------------------------------------------

    def _partition(self, b: SimBroker, tp: TopicPartition) -> Partition:
        p = b.partitions.get(tp)
        if p is None:
            p = Partition(
                topic_partition=tp,
                local_broker_id=b.broker_id,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                min_insync_replicas=self.config.min_insync_replicas,
            )
            p.high_watermark = b.logs[tp].hw_checkpoint
            b.partitions[tp] = p
        return p

    def _on_leader_and_isr(
        self,
        broker: BrokerId,
        tp: TopicPartition,
        state: LeaderAndIsr,
        replicas: tuple[BrokerId, ...],
    ) -> None:
        b = self.brokers[broker]
        fresh = tp not in b.partitions
        if tp not in b.logs:
            b.logs[tp] = SimLog()  # a replica new to this broker (reassignment): empty log
            self.log(f"b{broker} {tp} creates its log (replicas {replicas})")
        p = self._partition(b, tp)
        request = (state.leader_epoch, state.partition_epoch)
        known = (p.leader_epoch, p.partition_epoch)
        if not fresh and (request < known or (request == known and replicas == p.replicas)):
            # Stale (rule 8: a request from an older state is ignored). The same state with
            # another replica set is newer (the controller's link is FIFO): a reassignment
            # started or replaced without a new leader epoch (KIP-455).
            return
        if state.leader_epoch < p.leader_epoch:
            return
        log = b.logs[tp]
        if state.leader == broker:
            new_epoch = p.make_leader(
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                replicas=replicas,
                isr=state.isr,
                log_end_offset=log.log_end_offset,
                high_watermark=p.high_watermark,
                now_ms=self.now_ms,
                epoch_cache=log.cache,
            )
            b.fetchers.pop(tp, None)
            if new_epoch:
                self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                current = self.states[tp]
                self.checker.on_make_leader(
                    self.now_ms,
                    broker,
                    tp,
                    state.leader_epoch,
                    log.records,
                    authoritative=current.leader == broker
                    and current.leader_epoch == state.leader_epoch,
                )
                self.log(f"b{broker} {tp} leader e{state.leader_epoch} leo {log.log_end_offset}")
            self._after_hw(b, tp)
            return
        was_leader = p.is_leader
        changed = p.make_follower(
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            replicas=replicas,
            isr=state.isr,
            log_end_offset=log.log_end_offset,
        )
        if was_leader:
            self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if state.leader == NO_BROKER:
            b.fetchers.pop(tp, None)
            return
        if changed or fresh or tp not in b.fetchers:
            truncating = True
            if self.config.truncate_to_hw_on_follow:
                # Pre-KIP-101: cut everything above the HW, then fetch (seed 002's m2 loss).
                self._truncate(b, tp, p.high_watermark)
                truncating = False
            b.fetchers[tp] = Fetcher(
                leader=state.leader, leader_epoch=state.leader_epoch, truncating=truncating
            )
            self.log(f"b{broker} {tp} follows b{state.leader} e{state.leader_epoch}")
            self.to_broker(self.now_ms, broker, self._fetch_tick, broker, tp)

    def _on_stop_replica(self, broker: BrokerId, tp: TopicPartition) -> None:
        """StopReplica with delete (reassignment removed this replica): stop fetching or
        leading, fail parked produces, delete the log."""
        b = self.brokers[broker]
        if tp in b.partitions and b.partitions[tp].is_leader:
            self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._delete_replica(b, tp, why="StopReplica(delete)")

    def _on_update_metadata(
        self, broker: BrokerId, assignment: dict[TopicPartition, tuple[BrokerId, ...]]
    ) -> None:
        """An UpdateMetadata listing every partition (``tidelog.server.replica.stray_replicas`` rule
        1): a log of a partition whose replicas exclude this broker, hosted or not, is a stray
        (its StopReplica never reached it: the broker was down, its session had expired, or
        the controller died after writing the assignment) and is deleted."""
        b = self.brokers[broker]
        for tp in sorted(b.logs):
            if broker not in assignment.get(tp, (broker,)):
                self._delete_replica(b, tp, why="stray at UpdateMetadata")

    def _delete_replica(self, b: SimBroker, tp: TopicPartition, *, why: str) -> None:
        b.partitions.pop(tp, None)
        b.fetchers.pop(tp, None)
        b.purgatory.pop(tp, None)
        if b.logs.pop(tp, None) is not None:
            self.stats.replicas_deleted += 1
            self.checker.on_replica_deleted(b.broker_id, tp)
            self.log(f"b{b.broker_id} {tp} log deleted ({why})")

    def _on_alter_partition_response(
        self,
        broker: BrokerId,
        proposal: AlterPartitionProposal,
        error: ErrorCode,
        state: LeaderAndIsr,
    ) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(proposal.topic_partition)
        if p is None:
            return
        committed = state if error is ErrorCode.NONE else None
        tp = proposal.topic_partition
        if p.on_alter_partition_response(proposal, error, committed, self.now_ms):
            self._after_hw(b, tp)
        if error is ErrorCode.NONE or p.in_flight_proposal != proposal:
            return
        followup = alter_partition_followup(error)
        if followup is AlterFollowup.RETRY:  # the same proposal again (rule 5a)
            self.to_controller(self._controller_alter_partition, broker, b.broker_epoch, proposal)
        elif followup is AlterFollowup.RESYNC:  # read the state znode (rule 5a)
            lo, hi = self.config.controller_delay_ms
            self.to_broker(self.now_ms + self.rng.randint(lo, hi), broker, self._resync, broker, tp)

    def _resync(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is not None and p.on_state_resync(self.states[tp], self.now_ms):
            self._after_hw(b, tp)

    def _truncate(self, b: SimBroker, tp: TopicPartition, offset: int) -> None:
        log = b.logs[tp]
        if offset >= log.log_end_offset:
            # Nothing to cut, but epochs starting at the end go, as the real
            # ``Log.truncate_to`` does: a leader epoch this broker opened at its LEO and
            # never wrote in (it led briefly) otherwise stays its latest, and it would ask
            # the new leader about it for ever (``test_seed_18014_...``, tests/sim).
            log.cache.truncate_from_end(log.log_end_offset)
            return
        p = b.partitions.get(tp)
        hw = p.high_watermark if p is not None else log.hw_checkpoint
        self.checker.on_truncate(self.now_ms, b.broker_id, tp, offset, hw)
        log.truncate_to(offset)
        if p is not None:
            p.on_follower_truncate(offset)
        self.log(f"b{b.broker_id} {tp} truncated to {offset}")

    # ---- broker: timers ----------------------------------------------------------------

    def _start_timers(self, b: SimBroker) -> None:
        half = self.config.replica_lag_time_max_ms // 2
        self.to_broker(self.now_ms + half, b.broker_id, self._isr_tick, b.broker_id)
        self.to_broker(
            self.now_ms + self.config.flush_interval_ms, b.broker_id, self._flush_tick, b.broker_id
        )

    def _isr_tick(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        for tp, p in b.partitions.items():
            if p.is_leader:
                proposal = p.maybe_shrink_isr(self.now_ms)
                if proposal is not None:
                    self.to_controller(
                        self._controller_alter_partition, broker, b.broker_epoch, proposal
                    )
            self._expire_purgatory(b, tp)
        half = self.config.replica_lag_time_max_ms // 2
        self.to_broker(self.now_ms + half, broker, self._isr_tick, broker)

    def _flush_tick(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        for log in b.logs.values():
            log.flushed = log.log_end_offset
        self.to_broker(
            self.now_ms + self.config.flush_interval_ms, broker, self._flush_tick, broker
        )

    # ---- broker: HW bookkeeping and purgatory ---------------------------------------

    def _after_hw(self, b: SimBroker, tp: TopicPartition) -> None:
        p = b.partitions[tp]
        log = b.logs[tp]
        log.hw_checkpoint = p.high_watermark
        term = (b.incarnation, p.leader_epoch) if p.is_leader else None
        self.checker.on_high_watermark(
            self.now_ms, b.broker_id, tp, p.high_watermark, log.records, leader_term=term
        )
        if p.is_leader:
            self._complete_purgatory(b, tp)

    def _complete_purgatory(self, b: SimBroker, tp: TopicPartition) -> None:
        pending = b.purgatory.get(tp)
        if not pending:
            return
        p = b.partitions[tp]
        keep: list[PendingProduce] = []
        for req in pending:
            done, error = p.check_enough_replicas_reach_offset(req.offset + 1)
            if not done:
                keep.append(req)
            else:
                if error is ErrorCode.NONE:
                    self.stats.acked_all += 1
                    self.checker.on_acked(self.now_ms, tp, req.offset, req.record_id)
                self._respond(req.record_id, error)
        b.purgatory[tp] = keep

    def _expire_purgatory(self, b: SimBroker, tp: TopicPartition) -> None:
        pending = b.purgatory.get(tp)
        if not pending:
            return
        keep = [r for r in pending if r.deadline_ms > self.now_ms]
        for r in pending:
            if r.deadline_ms <= self.now_ms:
                self._respond(r.record_id, ErrorCode.REQUEST_TIMED_OUT)
        b.purgatory[tp] = keep

    def _fail_purgatory(self, b: SimBroker, tp: TopicPartition, error: ErrorCode) -> None:
        for r in b.purgatory.pop(tp, []):
            self._respond(r.record_id, error)

    # ---- follower fetching -------------------------------------------------------------

    def _fetch_tick(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        f = b.fetchers.get(tp)
        if f is None or f.inflight:
            return
        self._request_ids += 1
        f.inflight = rid = self._request_ids
        log = b.logs[tp]
        if f.truncating:
            latest = log.cache.latest_epoch()
            if latest is None:
                f.truncating = False
                f.inflight = 0
                self.to_broker(self.now_ms, broker, self._fetch_tick, broker, tp)
                return
            request = EpochRequest(f.leader, broker, tp, f.leader_epoch, latest, rid)
            self.send(broker, f.leader, self._leader_offset_for_epoch, request)
        else:
            fetch = FetchRequest(
                f.leader, broker, tp, f.leader_epoch, log.log_end_offset, log.last_epoch(), rid
            )
            self.send(broker, f.leader, self._leader_fetch, fetch)
        timeout_at = self.now_ms + self.config.fetch_timeout_ms
        self.to_broker(timeout_at, broker, self._fetch_timeout, broker, tp, rid)

    def _fetch_timeout(self, broker: BrokerId, tp: TopicPartition, rid: int) -> None:
        f = self.brokers[broker].fetchers.get(tp)
        if f is not None and f.inflight == rid:
            f.inflight = 0
            self._fetch_tick(broker, tp)

    def _fetcher_for(self, broker: BrokerId, tp: TopicPartition, rid: int) -> Fetcher | None:
        f = self.brokers[broker].fetchers.get(tp)
        if f is None or f.inflight != rid:
            return None
        f.inflight = 0
        return f

    def _fetch_again(self, broker: BrokerId, tp: TopicPartition, *, backoff: bool) -> None:
        delay = self.config.fetch_interval_ms if backoff else 0
        self.to_broker(self.now_ms + delay, broker, self._fetch_tick, broker, tp)

    def _leader_offset_for_epoch(self, req: EpochRequest) -> None:
        b = self.brokers[req.leader]
        p = b.partitions.get(req.tp)
        error = (
            ErrorCode.NOT_LEADER_OR_FOLLOWER
            if p is None
            else p.validate_leader_epoch(req.current_leader_epoch)
        )
        answer = EpochEndOffset(NO_EPOCH, -1)
        if error is ErrorCode.NONE:
            log = b.logs[req.tp]
            answer = leader_end_offset_for_epoch(log.cache, log.log_end_offset, req.requested_epoch)
        self.send(req.leader, req.follower, self._follower_on_epoch_answer, req, error, answer)

    def _follower_on_epoch_answer(
        self, req: EpochRequest, error: ErrorCode, answer: EpochEndOffset
    ) -> None:
        f = self._fetcher_for(req.follower, req.tp, req.rid)
        if f is None:
            return
        if error is ErrorCode.NONE:
            self._apply_divergence(self.brokers[req.follower], req.tp, f, answer)
        self._fetch_again(req.follower, req.tp, backoff=error is not ErrorCode.NONE)

    def _apply_divergence(
        self, b: SimBroker, tp: TopicPartition, f: Fetcher, answer: EpochEndOffset
    ) -> None:
        log = b.logs[tp]
        p = b.partitions[tp]
        state = follower_truncation_offset(
            log.cache,
            log_end_offset=log.log_end_offset,
            high_watermark=p.high_watermark,
            leader_answer=answer,
        )
        self._truncate(b, tp, state.offset)
        f.truncating = not state.truncation_completed

    def _leader_fetch(self, req: FetchRequest) -> None:
        b = self.brokers[req.leader]
        p = b.partitions.get(req.tp)
        if p is None:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            error = p.validate_leader_epoch(req.current_leader_epoch)
        if error is not ErrorCode.NONE or p is None:
            self._reply(req, FetchResponse(error=error))
            return
        log = b.logs[req.tp]
        leo = log.log_end_offset
        if not self.config.truncate_to_hw_on_follow:
            diverging = diverging_epoch(
                log.cache,
                leo,
                fetch_offset=req.fetch_offset,
                last_fetched_epoch=req.last_fetched_epoch,
            )
            if diverging is not None:
                self._reply(req, FetchResponse(diverging=diverging, leader_leo=leo))
                return
        if req.fetch_offset > leo:
            self._reply(req, FetchResponse(error=ErrorCode.OFFSET_OUT_OF_RANGE, leader_leo=leo))
            return
        result = p.update_follower_fetch_state(
            req.follower, fetch_offset=req.fetch_offset, leader_log_end_offset=leo,
            now_ms=self.now_ms,
        )  # fmt: skip
        if result.proposal is not None:
            self.to_controller(
                self._controller_alter_partition, req.leader, b.broker_epoch, result.proposal
            )
        if result.high_watermark_moved:
            self._after_hw(b, req.tp)
        end = min(leo, req.fetch_offset + self.config.fetch_max_records)
        response = FetchResponse(
            records=tuple(log.records[req.fetch_offset : end]),
            epochs=tuple(log.epochs[req.fetch_offset : end]),
            leader_hw=p.high_watermark,
            leader_leo=leo,
        )
        self._reply(req, response)

    def _reply(self, req: FetchRequest, response: FetchResponse) -> None:
        self.send(req.leader, req.follower, self._follower_on_fetch, req, response)

    def _follower_on_fetch(self, req: FetchRequest, resp: FetchResponse) -> None:
        broker, tp = req.follower, req.tp
        f = self._fetcher_for(broker, tp, req.rid)
        if f is None:
            return
        b = self.brokers[broker]
        if resp.error is ErrorCode.OFFSET_OUT_OF_RANGE:
            # Our log is longer than the leader's (only after unclean election or the old
            # rules): Kafka truncates to the leader's end.
            self._truncate(b, tp, resp.leader_leo)
            self._fetch_again(broker, tp, backoff=False)
            return
        if resp.error is not ErrorCode.NONE:
            self._fetch_again(broker, tp, backoff=True)
            return
        if resp.diverging is not None:
            self._apply_divergence(b, tp, f, resp.diverging)
            self._fetch_again(broker, tp, backoff=False)
            return
        log = b.logs[tp]
        for record_id, epoch in zip(resp.records, resp.epochs, strict=True):
            log.append(epoch, record_id)
        p = b.partitions[tp]
        p.update_follower_high_watermark(
            log_end_offset=log.log_end_offset, leader_high_watermark=resp.leader_hw
        )
        self._after_hw(b, tp)  # checks below the HW even when it did not move
        self._fetch_again(broker, tp, backoff=not resp.records)

    def _respond(self, record_id: int, error: ErrorCode) -> None:
        """The broker answers a produce (acks 1/-1): the producer sees ``error``."""
        self.outcomes[record_id] = error
        if error is not ErrorCode.NONE:
            self.stats.error(error)
