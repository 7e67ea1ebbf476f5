"""The simulator's controller (ZooKeeper + the controller, never down): topic creation,
broker failure and startup, AlterPartition, preferred election and partition reassignment
(KIP-455), all through the real ``tidelog.controller.decisions`` (``tidelog.testing.sim``)."""

from __future__ import annotations

from tidelog.controller import decisions
from tidelog.controller.decisions import ReplicaAssignment
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal, LeaderAndIsr
from tidelog.testing.sim_broker import BrokerModel
from tidelog.testing.sim_types import ReassignOutcome, SimLog


class ControllerModel(BrokerModel):
    """The controller's side of a run, over the brokers' (``BrokerModel``)."""

    # ---- topic creation & controller ------------------------------------------------

    def _create_topic(self) -> None:
        c = self.config
        assignment = decisions.assign_replicas(
            c.partitions, c.replication_factor, list(self.brokers), start_index=0
        )
        if isinstance(assignment, ErrorCode):
            raise ValueError(f"bad simulation config: {assignment.name}")
        for i, replicas in enumerate(assignment):
            tp = TopicPartition("sim", i)
            self.assignment[tp] = tuple(replicas)
            self.targets[tp] = tuple(replicas)
            state = LeaderAndIsr(
                leader=replicas[0], leader_epoch=0, isr=tuple(replicas), partition_epoch=0
            )
            self.states[tp] = state
            self.consumer_positions[tp] = 0
            for r in replicas:
                self.brokers[r].logs[tp] = SimLog()
            self._broadcast(tp)
        for b in self.brokers.values():
            self._start_timers(b)

    def _write_state(self, tp: TopicPartition, new: LeaderAndIsr, *, unclean: bool) -> None:
        old = self.states[tp]
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            self.checker.fail(self.now_ms, "epoch-regressed", f"controller {tp}: {old} -> {new}")
        self.states[tp] = new
        if unclean:
            self.stats.unclean_elections += 1
        self.log(
            f"controller {tp} -> leader {new.leader} e{new.leader_epoch} isr {new.isr}"
            f"{' UNCLEAN' if unclean else ''}"
        )
        self._broadcast(tp)

    def _broadcast(self, tp: TopicPartition) -> None:
        state = self.states[tp]
        replicas = self.assignment[tp]
        for r in replicas:
            if r in self.live:
                self.from_controller(r, self._on_leader_and_isr, r, tp, state, replicas)

    def _controller_broker_failure(self, dead: BrokerId) -> None:
        if dead not in self.live:
            return
        self.live.discard(dead)
        self.shutting_down.discard(dead)
        for tp, replicas in self.assignment.items():
            if dead not in replicas:
                continue
            res = decisions.on_broker_failure(
                replicas,
                self.states[tp],
                dead,
                self.live,
                unclean_allowed=self.config.unclean_leader_election,
            )
            if res is not None:
                new, election = res
                self._write_state(tp, new, unclean=election is not None and election.unclean)
        # A reassignment waiting for a leader (its old one died) may end now.
        self._maybe_complete_reassignments()

    def _controller_broker_startup(self, broker: BrokerId) -> None:
        self.live.add(broker)
        self.shutting_down.discard(broker)
        self.broker_epochs[broker] = self.brokers[broker].broker_epoch
        for tp, replicas in self.assignment.items():
            if broker not in replicas:
                continue
            res = decisions.on_broker_startup(
                replicas,
                self.states[tp],
                self.live,
                unclean_allowed=self.config.unclean_leader_election,
            )
            if res is not None:
                new, election = res
                self._write_state(tp, new, unclean=election.unclean)
            else:
                # Kafka's onBrokerStartup: the returning broker learns every partition it hosts.
                self.from_controller(
                    broker, self._on_leader_and_isr, broker, tp, self.states[tp], replicas
                )
        # onBrokerStartup's UpdateMetadata: the stray logs of partitions moved off it while
        # it was away go.
        self._update_metadata_of_strays(broker)
        self._maybe_complete_reassignments()

    def _controller_alter_partition(
        self, broker: BrokerId, broker_epoch: int, proposal: AlterPartitionProposal
    ) -> None:
        tp = proposal.topic_partition
        error, state = decisions.alter_partition(
            self.states[tp],
            proposal,
            self.assignment[tp],
            self.live,
            broker_epoch=broker_epoch,
            registered_broker_epoch=self.broker_epochs[broker],
        )
        changed = error is ErrorCode.NONE and state != self.states[tp]
        if error is ErrorCode.NONE:
            self.states[tp] = state
            self.log(f"controller {tp} AlterPartition isr {state.isr} pe{state.partition_epoch}")
        rate = self.config.alter_response_loss_rate
        if self.lose_alter_responses > 0 or (rate and self.rng.random() < rate):
            self.lose_alter_responses = max(0, self.lose_alter_responses - 1)
            self.stats.lost_alter_responses += 1
            self.log(f"controller {tp} AlterPartition answer LOST ({error.name})")
            at = self.now_ms + self.config.controller_request_timeout_ms
            self.to_broker(
                at,
                broker,
                self._on_alter_partition_response,
                broker,
                proposal,
                ErrorCode.REQUEST_TIMED_OUT,
                state,
            )
        else:
            self.from_controller(
                broker, self._on_alter_partition_response, broker, proposal, error, state
            )
        if changed and tp in self.reassignments:
            # Its target replicas may all be in sync now (reassignment step 2).
            self._maybe_complete_reassignments([tp])

    def elect_preferred_leader(self, tp: TopicPartition) -> ErrorCode:
        res = decisions.elect_preferred_leader(self.assignment[tp], self.states[tp], self.live)
        if isinstance(res, ErrorCode):
            return res
        self._write_state(tp, decisions.apply_election(self.states[tp], res), unclean=False)
        return ErrorCode.NONE

    # ---- controller: partition reassignment (KIP-455) -------------------------------

    def _electable(self) -> set[BrokerId]:
        """Live brokers that may lead: not in a controlled shutdown (rule 12)."""
        return self.live - self.shutting_down

    def replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """The partition's RS with its adding and removing replicas."""
        running = self.reassignments.get(tp)
        return running if running is not None else ReplicaAssignment(replicas=self.assignment[tp])

    def reassign(self, tp: TopicPartition, target: tuple[BrokerId, ...]) -> ReassignOutcome:
        """AlterPartitionReassignments for one partition (``tidelog.controller.reassignment``
        steps 1 and 3): validate, plan from the origin, write RS, let the replicas a replaced
        reassignment was adding leave at once, tell RS, and complete if already in sync."""
        target = tuple(target)
        problem = decisions.reassignment_target_error(target, self.live)
        if problem is not None:
            return self._refuse(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        return self._start(tp, target)

    def cancel_reassignment(self, tp: TopicPartition) -> ReassignOutcome:
        """Cancel (step 4): a reassignment back to the origin ORS."""
        running = self.reassignments.get(tp)
        if running is None:
            return self._refuse(
                tp,
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"There is no ongoing reassignment for partition {tp}.",
            )
        return self._start(tp, running.origin)

    def _refuse(self, tp: TopicPartition, error: ErrorCode, message: str) -> ReassignOutcome:
        self.stats.reassignments_refused += 1
        self.log(f"controller {tp} reassignment refused: {error.name} {message}")
        return ReassignOutcome(error, message)

    def _start(self, tp: TopicPartition, target: tuple[BrokerId, ...]) -> ReassignOutcome:
        current = self.replica_assignment(tp)
        planned = decisions.plan_reassignment(current, target)
        dropped = [r for r in current.replicas if r not in planned.replicas]
        state = self.states[tp]
        electable = self._electable()
        problem = decisions.replica_removal_problem(tp, state, dropped, planned.replicas, electable)
        if problem is not None:
            return self._refuse(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        self.assignment[tp] = planned.replicas
        if planned.is_reassigning:
            self.reassignments[tp] = planned
        else:
            self.reassignments.pop(tp, None)
        self.targets[tp] = target
        self.stats.reassignments_started += 1
        self.log(
            f"controller {tp} reassign {current.replicas} -> {target} (RS {planned.replicas}, "
            f"adding {planned.adding}, removing {planned.removing}, dropped now {dropped})"
        )
        # The state is written whatever changed: the partition epoch moves, so a proposal
        # built on the old replica set is refused (``decisions.on_replicas_changed``).
        written = decisions.on_replicas_changed(state, planned.replicas, dropped, electable)
        assert written is not None  # the leader-leaves-alone case was refused above
        self._write_state(tp, written, unclean=False)  # tells RS: new replicas start fetching
        self._stop_and_delete(tp, dropped)
        self._maybe_complete_reassignments([tp])
        return ReassignOutcome(ErrorCode.NONE)

    def _stop_and_delete(self, tp: TopicPartition, brokers: list[BrokerId]) -> None:
        for broker in sorted(brokers):
            if broker in self.live:
                self.from_controller(broker, self._on_stop_replica, broker, tp)

    def _maybe_complete_reassignments(self, tps: list[TopicPartition] | None = None) -> None:
        """Step 2: end every reassignment among ``tps`` (None: all) whose targets are in
        sync: write ``complete_reassignment``'s state, then the assignment TRS; tell TRS and
        delete the removed replicas."""
        for tp in sorted(self.reassignments) if tps is None else tps:
            plan = self.reassignments.get(tp)
            if plan is None:
                continue
            new = decisions.complete_reassignment(plan, self.states[tp], self._electable())
            if new is None:
                continue
            if self.crash_controller_mid_completion > 0:
                # The controller dies between the two writes: the partition state has the
                # final ISR and leader, the topic znode still RS; nobody was told.
                self.crash_controller_mid_completion -= 1
                self._write_state_untold(tp, new, "before the assignment")
                continue
            del self.reassignments[tp]
            self.assignment[tp] = plan.target
            self.stats.reassignments_completed += 1
            if self.crash_controller_after_assignment > 0:
                # Both writes made, nobody told: the removed replicas never get their
                # StopReplica; the next controller has no reassignment to resume, and its
                # UpdateMetadata (``tidelog.server.replica.stray_replicas`` rule 1) removes them.
                self.crash_controller_after_assignment -= 1
                self._write_state_untold(tp, new, "after the assignment, telling nobody")
                continue
            self.log(f"controller {tp} reassignment to {plan.target} completes")
            self._write_state(tp, new, unclean=False)  # tells the target replicas
            self._stop_and_delete(tp, list(plan.removing))

    def _write_state_untold(self, tp: TopicPartition, new: LeaderAndIsr, when: str) -> None:
        """A completion's state written by a controller that dies at once (a failover
        follows after the controller delay)."""
        old = self.states[tp]
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            self.checker.fail(self.now_ms, "epoch-regressed", f"controller {tp}: {old} -> {new}")
        self.states[tp] = new
        self.log(
            f"controller {tp} completion state written (leader {new.leader} "
            f"e{new.leader_epoch} isr {new.isr}); CONTROLLER DIES {when}"
        )
        lo, hi = self.config.controller_delay_ms
        self.schedule(self.now_ms + self.rng.randint(lo, hi), self.controller_failover)

    def controller_failover(self) -> None:
        """A new controller takes over at once: it re-reads the znodes, sends every live
        replica its partitions' state (``onControllerFailover``) and every live broker the
        metadata, and completes the reassignments whose targets are in sync (a completion
        cut short included)."""
        self.stats.controller_failovers += 1
        self.log("controller FAILOVER")
        for tp, replicas in self.assignment.items():
            for r in replicas:
                if r in self.live:
                    self.from_controller(
                        r, self._on_leader_and_isr, r, tp, self.states[tp], replicas
                    )
        for broker in sorted(self.live):
            self._update_metadata_of_strays(broker)
        self._maybe_complete_reassignments()

    def _update_metadata_of_strays(self, broker: BrokerId) -> None:
        """The controller's UpdateMetadata of every partition, after its LeaderAndIsr (FIFO),
        from which the broker deletes its stray logs. Sent only when the broker has such a
        log now (it can delete no other), so a run without reassignments draws no random
        number for it."""
        logs = self.brokers[broker].logs
        if any(broker not in self.assignment.get(tp, (broker,)) for tp in logs):
            self.from_controller(broker, self._on_update_metadata, broker, dict(self.assignment))
