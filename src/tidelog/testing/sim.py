"""A seeded, deterministic simulator of tidelog's replication (after Kafka's
``RaftEventSimulationTest``): brokers running the real :class:`Partition` and truncation code,
the real controller decisions, a simulated clock and network, faults, producers and
consumers, and the :class:`InvariantChecker` after every event.

Model (what is real and what is simulated):

- **Real**: ``tidelog.replication`` (``Partition``, ``LeaderEpochCache``, truncation) and
  ``tidelog.controller.decisions`` (elections, AlterPartition compare-and-set).
- **Logs** are in memory: per offset a record id and the leader epoch that wrote it, plus the
  epoch cache; the HW checkpoint is written on every HW change. A crash keeps the log (the OS
  page cache survives a process crash) unless ``lose_unflushed`` asks to drop the tail past
  the last flush (power loss; Kafka then relies on other replicas — see KIP-966).
- **Controller** = ZooKeeper + the controller, never down. It learns of a crash when the
  broker's session expires (``session_expires=True``, at once) or not at all (a fast bounce,
  as in seed 002). Its messages are reliable and FIFO per broker but delayed; the leader's
  AlterPartition requests go through the same compare-and-set on ``partition_epoch``.
- **Network** between brokers and from clients: random delay (so reordering), drops, and
  partitions between any two brokers. Fetches time out and are retried.
- **Pauses** (a GC pause, seed 003/004): the broker processes nothing until it resumes. A
  pause longer than the ZooKeeper session may expire it (``session_expires``): the
  controller moves the leaderships, and the broker wakes as a zombie leader until it
  re-registers with a new broker epoch (KIP-380) and hears the new state.
- **Clients**: producers with acks 0/1/-1 send to the controller's current leader; a consumer
  per partition reads below the HW from the leader.
- **Reassignment** (KIP-455, ``tidelog.controller.reassignment``): ``reassign`` and
  ``cancel_reassignment`` run the controller's steps with the same pure rules
  (``decisions.plan_reassignment`` / ``complete_reassignment``): the assignment grows to
  RS = TRS + ORS, every live replica of RS hears the (unchanged) state with RS, the new ones
  create their logs and fetch; after every accepted AlterPartition, broker startup or
  failure and controller failover, ``complete_reassignment`` may end it: its state is
  written, the assignment becomes TRS, the target replicas get LeaderAndIsr and the removed
  ones StopReplica with delete (they drop the log and the partition). A removed broker that
  was down then drops the stray log when it restarts (the real broker does so at its first
  UpdateMetadata). LeaderAndIsr carries the replica set it was sent with.
- **Controller failover** is instant (``controller_failover``): the new controller resends
  every state and completes what it can. ``crash_controller_mid_completion`` scripts a
  controller death between completion's two writes (partition state written, assignment
  still RS): the next controller completes again.

Switches for the old, unsafe rules (the simulator only — tidelog never does this):
``truncate_to_hw_on_follow`` (pre-KIP-101: a new follower truncates to its HW, seed 002) and
``unclean_leader_election`` (seed 000/004).
"""

from __future__ import annotations

from tidelog.controller import decisions
from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, NO_EPOCH, BrokerId, TopicPartition
from tidelog.testing.sim_controller import ControllerModel
from tidelog.testing.sim_types import CLIENT, PendingProduce, SimConfig


class Simulation(ControllerModel):
    """One deterministic run; drive it with the fault methods and ``run_until``/``run_for``."""

    def __init__(self, config: SimConfig, seed: int) -> None:
        super().__init__(config, seed)
        self._create_topic()

    # ---- clients -----------------------------------------------------------------------

    def produce(self, tp: TopicPartition, acks: int) -> int:
        """Send one record to the controller's current leader; return its id."""
        record_id = self.next_record_id
        self.next_record_id += 1
        self.stats.produced[acks] += 1
        leader = self.states[tp].leader
        if leader == NO_BROKER:
            self._respond(record_id, ErrorCode.LEADER_NOT_AVAILABLE)
            return record_id
        self.send(CLIENT, leader, self._broker_produce, leader, tp, acks, record_id)
        return record_id

    def _broker_produce(
        self, broker: BrokerId, tp: TopicPartition, acks: int, record_id: int
    ) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is None:
            self._respond(record_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        error = p.check_append(acks)
        if error is not ErrorCode.NONE:
            self._respond(record_id, error)
            return
        log = b.logs[tp]
        offset = log.append(p.leader_epoch, record_id)
        state = self.states[tp]
        if state.leader == broker and state.leader_epoch == p.leader_epoch:
            self.checker.on_leader_append(self.now_ms, broker, tp, offset, record_id)
        if acks == 1:
            self._respond(record_id, ErrorCode.NONE)
        elif acks == -1:
            b.purgatory.setdefault(tp, []).append(
                PendingProduce(record_id, offset, self.now_ms + self.config.request_timeout_ms)
            )
        if p.on_leader_append(log.log_end_offset, self.now_ms):
            self._after_hw(b, tp)

    def consume(self, tp: TopicPartition) -> None:
        """One consumer fetch from the controller's current leader, below its HW."""
        leader = self.states[tp].leader
        if leader != NO_BROKER:
            self.send(CLIENT, leader, self._broker_consume, leader, tp)

    def _broker_consume(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is None or p.validate_leader_epoch(NO_EPOCH) is not ErrorCode.NONE:
            return
        log = b.logs[tp]
        position = self.consumer_positions[tp]
        if position > log.log_end_offset:
            if self.states[tp].leader == broker and self.states[tp].leader_epoch == p.leader_epoch:
                self.checker.on_consumer_out_of_range(
                    self.now_ms, tp, position, broker, log.log_end_offset
                )
                self.consumer_positions[tp] = log.log_end_offset  # auto.offset.reset=latest
            return
        end = min(p.high_watermark, position + 50)
        for offset in range(position, end):
            self.checker.on_consumed(self.now_ms, tp, offset, log.records[offset])
            self.stats.consumed += 1
        if end > position:
            self.consumer_positions[tp] = end

    # ---- faults ------------------------------------------------------------------------

    def controlled_shutdown(self, broker: BrokerId, *, stop_after_ms: int = 30) -> None:
        """Rule 12: move the broker's leaderships and ISR memberships away, then stop it
        (a clean stop: its session ends; its log is intact)."""
        if broker not in self.live or not self.brokers[broker].alive:
            return
        self.log(f"b{broker} CONTROLLED SHUTDOWN")
        self.shutting_down.add(broker)
        for tp, replicas in self.assignment.items():
            if broker not in replicas:
                continue
            res = decisions.on_controlled_shutdown(
                replicas, self.states[tp], broker, self.live, {broker}
            )
            if res is not None:
                self._write_state(tp, res[0], unclean=False)
        self.schedule(self.now_ms + stop_after_ms, self.crash, broker)

    def crash(
        self, broker: BrokerId, *, session_expires: bool = True, lose_unflushed: bool = False
    ) -> None:
        """Kill the process. The log survives (page cache) unless ``lose_unflushed``."""
        b = self.brokers[broker]
        if not b.alive:
            return
        b.alive = False
        b.incarnation += 1
        b.partitions.clear()
        b.fetchers.clear()
        b.purgatory.clear()
        b.backlog.clear()
        b.paused_until = 0
        b.session_expired = False
        if lose_unflushed:
            for tp, log in b.logs.items():
                if log.flushed < log.log_end_offset:
                    # A torn tail is not a truncation the checker should blame on the rules.
                    log.truncate_to(log.flushed)
                    self.log(f"b{broker} {tp} lost unflushed tail -> {log.flushed}")
        self.log(f"b{broker} CRASH session_expires={session_expires}")
        if session_expires:
            self._controller_broker_failure(broker)

    def restart(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        if b.alive:
            return
        b.alive = True
        b.incarnation += 1
        b.broker_epoch = self._register()
        for log in b.logs.values():
            # Recovery: the epoch cache never runs past the log (Kafka truncates it on load).
            log.cache.truncate_from_end(log.log_end_offset)
            log.hw_checkpoint = min(log.hw_checkpoint, log.log_end_offset)
        self._link_clock[broker] = self.now_ms
        self.log(f"b{broker} RESTART")
        self._start_timers(b)
        self._controller_broker_startup(broker)

    def _register(self) -> int:
        self._registrations += 1
        return self._registrations

    def pause(self, broker: BrokerId, duration_ms: int, *, session_expires: bool = False) -> None:
        """A process pause (GC). With ``session_expires`` a pause longer than
        ``zookeeper.session.timeout.ms`` expires the broker's session: the controller treats it
        as dead and moves its leaderships while it is frozen; on waking it is a *zombie* — it
        still believes it leads — until it re-registers and hears the new state."""
        b = self.brokers[broker]
        if not b.alive:
            return
        until = self.now_ms + duration_ms
        if until <= b.paused_until:
            return
        b.paused_until = until
        self.log(f"b{broker} PAUSE until {until}")
        self.to_broker(until, broker, self._resume, broker)
        if session_expires and duration_ms > self.config.zookeeper_session_timeout_ms:
            at = self.now_ms + self.config.zookeeper_session_timeout_ms
            self.schedule(at, self._session_expiry, broker, b.incarnation)

    def _session_expiry(self, broker: BrokerId, incarnation: int) -> None:
        b = self.brokers[broker]
        if b.alive and b.incarnation == incarnation and b.paused_until > self.now_ms:
            b.session_expired = True
            self.log(f"b{broker} SESSION EXPIRED (paused)")
            self._controller_broker_failure(broker)

    def _resume(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        if b.paused_until > self.now_ms:
            return  # a longer pause superseded this one (this event was re-queued)
        backlog, b.backlog = b.backlog, []
        self.log(f"b{broker} RESUME ({len(backlog)} queued)")
        # What queued while it was stopped is handled now, in order, before anything that
        # arrives at this same instant (a socket's FIFO): rescheduled at now, it would run
        # after messages already due now, and a StopReplica sent after a LeaderAndIsr would
        # jump it (``test_seed_18219_...``, tests/sim).
        for fn, args in backlog:
            fn(*args)
        if b.session_expired:
            # The ZooKeeper client reconnects with a new session and re-registers.
            b.session_expired = False
            b.broker_epoch = self._register()
            self.log(f"b{broker} RE-REGISTERS")
            self.to_controller(self._controller_broker_startup, broker)

    def block(self, a: int, b: int) -> None:
        """Partition the network between two nodes, both directions (brokers by id, or
        ``CLIENT`` for the producers and consumers)."""
        self.blocked.add((a, b))
        self.blocked.add((b, a))
        self.log(f"net b{a} X b{b}")

    def heal(self, a: int, b: int) -> None:
        self.blocked.discard((a, b))
        self.blocked.discard((b, a))
        self.log(f"net b{a} <-> b{b}")

    def heal_all(self) -> None:
        self.blocked.clear()

    # ---- end of run ----------------------------------------------------------------------

    def settle(self, duration_ms: int) -> None:
        """Heal everything, restart every broker, let replication converge, check the end."""
        self.heal_all()
        for broker, b in self.brokers.items():
            if not b.alive:
                self.restart(broker)
        # A process pause cannot be cut short: settle from when the last one ends.
        self.run_until(max([self.now_ms, *(b.paused_until for b in self.brokers.values())]))
        self.run_for(duration_ms)
        for tp in self.assignment:
            state = self.states[tp]
            if state.leader == NO_BROKER:
                self.checker.fail(self.now_ms, "offline", f"{tp} has no leader after settling")
                continue
            leader_log = self.brokers[state.leader].logs[tp].records
            self.checker.final_check(self.now_ms, tp, state.leader, leader_log)
            # Liveness: with every fault healed and producers stopped, every replica has
            # converged on the leader's log and is back in the ISR.
            for r in self.assignment[tp]:
                replica_log = self.brokers[r].logs.get(tp)
                if replica_log is None or replica_log.records != leader_log or r not in state.isr:
                    leo = "none" if replica_log is None else replica_log.log_end_offset
                    self.checker.fail(
                        self.now_ms,
                        "not-converged",
                        f"{tp} replica {r} (LEO {leo}) "
                        f"did not converge on leader {state.leader} (LEO {len(leader_log)}) "
                        f"or is not in the ISR {state.isr}",
                    )
        self.check_reassignments_settled()

    def check_reassignments_settled(self) -> None:
        """Once faults are healed: no reassignment is still running unless one of its target
        brokers is down, each assignment is the last target it was given, and no broker
        outside it still holds the partition (StopReplica or the restart deleted it)."""
        for tp, replicas in self.assignment.items():
            running = self.reassignments.get(tp)
            if running is not None:
                down = [r for r in running.target if not self.brokers[r].alive]
                if not down:
                    self.checker.fail(
                        self.now_ms,
                        "reassignment-stuck",
                        f"{tp} reassignment to {running.target} still running (RS {replicas}, "
                        f"ISR {self.states[tp].isr}, leader {self.states[tp].leader})",
                    )
                continue
            if replicas != self.targets[tp]:
                self.checker.fail(
                    self.now_ms,
                    "reassignment-target",
                    f"{tp} assignment {replicas} is not the last target {self.targets[tp]}",
                )
            for broker, b in self.brokers.items():
                if broker in replicas or not b.alive or tp not in b.logs:
                    continue
                self.checker.fail(
                    self.now_ms,
                    "stray-replica",
                    f"broker {broker} still hosts {tp}, assigned to {replicas}",
                )
