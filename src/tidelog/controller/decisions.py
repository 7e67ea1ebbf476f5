"""The controller's pure decisions (docs/design.md rules 5, 9-12): elections, ISR compare-and-set,
replica assignment. The ZooKeeper-backed controller and the simulator run this same code.

Every function takes the current state as values and returns the new state (or an
``ErrorCode``); none reads a clock, ZooKeeper or the network.

- ``elect_leader`` — offline/failure election: the first live replica in assignment order
  that is in the ISR; otherwise, if ``unclean.leader.election.enable``, the first live
  replica (``unclean=True``: acknowledged records may be lost, seed 000/004); otherwise none
  (the partition stays offline, leader -1, until an ISR member returns).
- ``elect_preferred_leader`` / ``elect_controlled_shutdown_leader`` /
  ``on_controlled_shutdown`` — rules 9 and 12.
- ``on_broker_failure`` — a dead broker leaves every ISR (but never empties one: the last
  member stays so that only it can be elected cleanly) and loses its leaderships.
- ``on_log_dir_failure`` — a live broker whose log dir went offline (KIP-112): it loses
  its leaderships to a clean successor and leaves every ISR, but a leadership without a
  clean successor stays with it (read-only) instead of going offline as in Kafka.
- ``alter_partition`` — the AlterPartition (API 56) compare-and-set on ``partition_epoch``.
- ``assign_replicas`` — rule 11 with Kafka's follower shift.
- ``plan_reassignment`` / ``complete_reassignment`` — partition reassignment (KIP-455): the
  replica set RS = TRS + ORS while new replicas catch up, and the state that ends it once
  every target replica is in the ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, BrokerId
from tidelog.replication.partition import AlterPartitionProposal, LeaderAndIsr

__all__ = [
    "Election",
    "LeaderAndIsr",
    "ReplicaAssignment",
    "alter_partition",
    "apply_election",
    "assign_replicas",
    "complete_reassignment",
    "elect_controlled_shutdown_leader",
    "elect_leader",
    "elect_preferred_leader",
    "on_broker_failure",
    "on_broker_startup",
    "on_controlled_shutdown",
    "on_log_dir_failure",
    "on_replicas_changed",
    "plan_reassignment",
    "reassignment_target_error",
    "replica_index",
    "replica_removal_problem",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Election:
    """A chosen leader and the ISR that goes with it."""

    leader: BrokerId
    isr: tuple[BrokerId, ...]
    unclean: bool = False


def elect_leader(
    assignment: Sequence[BrokerId],
    isr: Collection[BrokerId],
    live_brokers: Collection[BrokerId],
    *,
    unclean_allowed: bool,
) -> Election | None:
    """Rule 9. None means offline: no live ISR member and unclean election not allowed."""
    live_isr = [r for r in assignment if r in isr and r in live_brokers]
    if live_isr:
        return Election(leader=live_isr[0], isr=tuple(live_isr))
    if unclean_allowed:
        for r in assignment:
            if r in live_brokers:
                # Its log is the truth from now on: whatever the old ISR held beyond it is
                # gone (seed 000). The ISR restarts as just the new leader.
                return Election(leader=r, isr=(r,), unclean=True)
    return None


def elect_preferred_leader(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    live_brokers: Collection[BrokerId],
) -> Election | ErrorCode:
    """Move leadership back to the first assigned replica if it is live and in the ISR."""
    preferred = assignment[0]
    if current.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED
    if preferred not in live_brokers or preferred not in current.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return Election(leader=preferred, isr=current.isr)


def elect_controlled_shutdown_leader(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    live_brokers: Collection[BrokerId],
    shutting_down: Collection[BrokerId],
) -> Election | None:
    """Rule 12: the first live ISR member that is not shutting down; the shutting-down
    brokers leave the ISR. None when no such replica exists (the leader stays put)."""
    candidates = [
        r for r in assignment if r in current.isr and r in live_brokers and r not in shutting_down
    ]
    if not candidates:
        return None
    new_isr = tuple(r for r in current.isr if r not in shutting_down)
    return Election(leader=candidates[0], isr=new_isr)


def on_controlled_shutdown(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    broker: BrokerId,
    live_brokers: Collection[BrokerId],
    shutting_down: Collection[BrokerId],
) -> tuple[LeaderAndIsr, Election | None] | None:
    """Rule 12, per partition of a broker asking to stop: its leadership moves to another live
    ISR member (new leader epoch); as a follower it leaves the ISR (never emptying it).
    None when nothing can change (the broker then stops anyway, like a failure)."""
    if current.leader == broker:
        election = elect_controlled_shutdown_leader(
            assignment, current, live_brokers, shutting_down
        )
        if election is None:
            return None
        return apply_election(current, election), election
    return _follower_leaves_isr(current, broker)


def _follower_leaves_isr(
    current: LeaderAndIsr, broker: BrokerId
) -> tuple[LeaderAndIsr, Election | None] | None:
    """A follower leaves the ISR (new partition epoch, same leader epoch), never emptying
    it; None when it is not in the ISR or is its last member."""
    if broker in current.isr and len(current.isr) > 1:
        return (
            LeaderAndIsr(
                leader=current.leader,
                leader_epoch=current.leader_epoch,
                isr=tuple(r for r in current.isr if r != broker),
                partition_epoch=current.partition_epoch + 1,
            ),
            None,
        )
    return None


def apply_election(current: LeaderAndIsr, election: Election | None) -> LeaderAndIsr:
    """The new partition state: a new leader epoch (rule 7) and partition epoch. ``None``
    (offline) still bumps the leader epoch so the dead leader is fenced when it returns."""
    if election is None:
        return LeaderAndIsr(
            leader=NO_BROKER,
            leader_epoch=current.leader_epoch + 1,
            isr=current.isr,
            partition_epoch=current.partition_epoch + 1,
        )
    return LeaderAndIsr(
        leader=election.leader,
        leader_epoch=current.leader_epoch + 1,
        isr=election.isr,
        partition_epoch=current.partition_epoch + 1,
    )


def on_broker_failure(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    dead: BrokerId,
    live_brokers: Collection[BrokerId],
    *,
    unclean_allowed: bool,
) -> tuple[LeaderAndIsr, Election | None] | None:
    """What the controller writes when ``dead``'s session expires; None when nothing changes.

    The leader's death means an election (with the dead broker out of the ISR unless it
    was the last member). A dead follower just leaves the ISR, keeping the leader epoch. An
    ISR is never emptied: its last member stays, so only it can come back as a clean leader.
    """
    if current.leader == dead:
        remaining = tuple(r for r in current.isr if r != dead)
        isr = remaining if remaining else current.isr
        election = elect_leader(assignment, isr, live_brokers, unclean_allowed=unclean_allowed)
        base = LeaderAndIsr(
            leader=current.leader,
            leader_epoch=current.leader_epoch,
            isr=isr,
            partition_epoch=current.partition_epoch,
        )
        return apply_election(base, election), election
    if current.leader == NO_BROKER:
        if unclean_allowed:
            # Offline and the topic allows unclean election: a live replica may exist.
            election = elect_leader(
                assignment, current.isr, live_brokers, unclean_allowed=unclean_allowed
            )
            if election is not None:
                return apply_election(current, election), election
        return None
    if dead in current.isr and len(current.isr) > 1:
        return (
            LeaderAndIsr(
                leader=current.leader,
                leader_epoch=current.leader_epoch,
                isr=tuple(r for r in current.isr if r != dead),
                partition_epoch=current.partition_epoch + 1,
            ),
            None,
        )
    return None


def on_log_dir_failure(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    broker: BrokerId,
    electable: Collection[BrokerId],
) -> tuple[LeaderAndIsr, Election | None] | None:
    """What the controller writes when live ``broker``'s log dir went offline (a full disk
    or an IO error: it can read its log but not append); None when nothing changes.

    ``electable``: live brokers that may lead (not shutting down, log dir online; the caller
    leaves ``broker`` out). As its leader, the partition moves to the first electable ISR
    member in assignment order (new leader epoch: the followers truncate to it, rule 7) and
    the ISR loses ``broker``. Without such a member the leadership stays: the log is intact
    and readable, only appends fail (KAFKA_STORAGE_ERROR) until the dir has room again.
    Kafka makes the partition offline there, or elects an unclean leader when allowed; both
    serve nothing better and the second loses acknowledged records for a broker that is
    still alive, so neither is done. As a follower it leaves the ISR (never emptying it), so
    acks=all and the high watermark stop waiting for a replica that cannot append.
    """
    if current.leader == broker:
        others = tuple(r for r in current.isr if r != broker)
        usable = [r for r in electable if r != broker]
        election = elect_leader(assignment, others, usable, unclean_allowed=False)
        if election is None:
            return None
        return apply_election(current, election), election
    return _follower_leaves_isr(current, broker)


def on_broker_startup(
    assignment: Sequence[BrokerId],
    current: LeaderAndIsr,
    live_brokers: Collection[BrokerId],
    *,
    unclean_allowed: bool,
) -> tuple[LeaderAndIsr, Election] | None:
    """An offline partition (leader -1) may become electable when a broker returns."""
    if current.leader != NO_BROKER:
        return None
    election = elect_leader(assignment, current.isr, live_brokers, unclean_allowed=unclean_allowed)
    if election is None:
        return None
    return apply_election(current, election), election


def alter_partition(
    current: LeaderAndIsr,
    proposal: AlterPartitionProposal,
    assignment: Sequence[BrokerId],
    live_brokers: Collection[BrokerId],
    *,
    broker_epoch: int = -1,
    registered_broker_epoch: int = -1,
) -> tuple[ErrorCode, LeaderAndIsr]:
    """AlterPartition's compare-and-set (rule 5): accept only from the current incarnation of
    the leader (KIP-380: ``broker_epoch`` of the request vs the one registered; -1 skips the
    check) at the current leader epoch and partition epoch; the new ISR must contain the
    leader, and a replica it adds must be assigned and in ``live_brokers``: the brokers
    eligible to join an ISR (KIP-841: the caller leaves out those in a controlled shutdown
    and those whose log dir is offline). Returns (error, state now in force).

    The broker-epoch check matters: a proposal sent just before a broker bounced must not be
    applied after its new incarnation has been told the partition state, or the two disagree
    on the ISR with no further message to reconcile them."""
    if (
        -1 not in (broker_epoch, registered_broker_epoch)
        and broker_epoch != registered_broker_epoch
    ):
        return ErrorCode.STALE_BROKER_EPOCH, current
    if proposal.leader_epoch < current.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, current
    if proposal.leader_id != current.leader or proposal.leader_epoch != current.leader_epoch:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, current
    if (
        set(proposal.new_isr) == set(current.isr)
        and proposal.partition_epoch <= current.partition_epoch
    ):
        # Already in force (Kafka's equalsAllowStalePartitionEpoch, checked before the
        # partition epoch): a retry of a change whose answer was lost (rule 5a) learns the
        # state instead of INVALID_UPDATE_VERSION. Only from an epoch this controller has
        # seen: a proposal from a later one means its own state is stale (a deposed
        # controller that has not noticed yet). Answering that with its older state would
        # leave the leader's change in flight for good and the ISR it proposed never
        # written.
        return ErrorCode.NONE, current
    if proposal.partition_epoch != current.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION, current
    new_isr = proposal.new_isr
    if proposal.leader_id not in new_isr or len(set(new_isr)) != len(new_isr):
        return ErrorCode.INVALID_REQUEST, current
    added = set(new_isr) - set(current.isr)
    if any(r not in assignment or r not in live_brokers for r in added):
        return ErrorCode.INELIGIBLE_REPLICA, current
    updated = LeaderAndIsr(
        leader=current.leader,
        leader_epoch=current.leader_epoch,
        isr=tuple(new_isr),
        partition_epoch=current.partition_epoch + 1,
    )
    return ErrorCode.NONE, updated


def assign_replicas(
    n_partitions: int,
    replication_factor: int,
    brokers: Collection[BrokerId],
    *,
    start_index: int,
    replica_shift: int = 0,
    start_partition_id: int = 0,
) -> list[list[BrokerId]] | ErrorCode:
    """Rule 11 (seed 004): with brokers sorted, partition i's leader is broker[(s + i) mod n]
    and follower j (1-based) goes to broker[(s + i + 1 + (shift + j - 1) mod (n - 1)) mod n],
    the shift growing by one every n partitions (Kafka's rack-unaware assignment). With the
    default shift 0, replica j of partition i < n sits on broker[(s + i + j) mod n]; the
    shift then moves followers so leaders and followers both spread.

    ``start_partition_id`` numbers the first partition placed (CreatePartitions places the
    new ones from the current count): as in Kafka's ``assignReplicasToBrokersRackUnaware``
    the shift grows only at the multiples of n met from there. Rack-aware placement:
    ``tidelog.controller.placement``."""
    if n_partitions <= 0:
        return ErrorCode.INVALID_PARTITIONS
    ordered = sorted(brokers)
    n = len(ordered)
    if replication_factor <= 0 or replication_factor > n:
        return ErrorCode.INVALID_REPLICATION_FACTOR
    result: list[list[BrokerId]] = []
    shift = replica_shift
    for i in range(start_partition_id, start_partition_id + n_partitions):
        if i > 0 and i % n == 0:
            shift += 1
        first = (start_index + i) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[replica_index(first, shift, j, n)])
        result.append(replicas)
    return result


def replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's ``AdminUtils.replicaIndex``: the index of follower ``j`` (0-based) of a
    partition led by broker[first], ``1 + (shift + j) mod (n - 1)`` places after it."""
    return (first + 1 + (shift + j) % (n - 1)) % n


# -- partition reassignment (KIP-455) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaAssignment:
    """A partition's replicas during a reassignment (Kafka's ``ReplicaAssignment``).

    ``replicas`` is the full set RS = TRS + ORS (target first, then the original replicas
    that are leaving), ``adding`` = TRS - ORS, ``removing`` = ORS - TRS. Outside a
    reassignment both are empty and ``replicas`` is the assignment.
    """

    replicas: tuple[BrokerId, ...]
    adding: tuple[BrokerId, ...] = ()
    removing: tuple[BrokerId, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[BrokerId, ...]:
        """ORS: the replicas before the reassignment (RS without the adding ones)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[BrokerId, ...]:
        """TRS: the replicas once it completes (RS without the removing ones)."""
        return tuple(r for r in self.replicas if r not in self.removing)


def plan_reassignment(current: ReplicaAssignment, target: Sequence[BrokerId]) -> ReplicaAssignment:
    """Kafka's ``ReplicaAssignment.fromOriginAndTarget``. A reassignment replacing one in
    progress starts from the first one's origin (the replicas added by the first and not
    wanted by the second are then removed, as Kafka's ``reassignReplicas`` does)."""
    origin = current.origin
    target = tuple(target)
    replicas = tuple(dict.fromkeys((*target, *origin)))
    return ReplicaAssignment(
        replicas=replicas,
        adding=tuple(r for r in target if r not in origin),
        removing=tuple(r for r in origin if r not in target),
    )


def _leader_after(
    state: LeaderAndIsr,
    replicas: Sequence[BrokerId],
    gone: Collection[BrokerId],
    electable: Collection[BrokerId],
) -> BrokerId | None:
    """The leader once ``gone`` leave: the same one, or, if it is one of them, the first
    replica of ``replicas`` still in sync and electable (None when there is none)."""
    if state.leader not in gone:
        return state.leader
    return next((r for r in replicas if r in state.isr and r not in gone and r in electable), None)


def replica_removal_problem(
    tp: object,
    state: LeaderAndIsr,
    dropped: Collection[BrokerId],
    replicas: Sequence[BrokerId],
    electable: Collection[BrokerId],
) -> str | None:
    """Why replicas leaving a reassignment at once (a replace or cancel drops the replicas
    the first one was adding) must be refused (INVALID_REPLICA_ASSIGNMENT), or None.

    1. They are the whole ISR: the partition would have no in-sync replica left and the
       removed ones' logs, the only ones holding every committed record, would be deleted
       (e.g. an offline partition whose only in-sync replica is an adding one; Kafka
       allows it).
    2. The leader is one of them and no in-sync electable replica of ``replicas`` (the new
       replica set) can take over."""
    if not dropped:
        return None
    if state.isr and all(r in dropped for r in state.isr):
        return (
            f"Replicas {sorted(map(int, state.isr))} are the only in-sync replicas of {tp}; "
            "removing them would leave it none. Let the running reassignment finish first."
        )
    if _leader_after(state, replicas, dropped, electable) is None:
        return (
            f"Replica {state.leader} leads {tp} and no other replica of the new assignment "
            "is in sync to take over; let the running reassignment finish first."
        )
    return None


def on_replicas_changed(
    state: LeaderAndIsr,
    replicas: Sequence[BrokerId],
    gone: Collection[BrokerId],
    electable: Collection[BrokerId],
) -> LeaderAndIsr | None:
    """The state a reassignment's start (or replacement, or cancel) writes when the replica
    set becomes ``replicas`` (``gone``: the replicas that left it at once).

    The partition epoch always moves (the caller writes this state; the write bumps it): an
    AlterPartition built on the old replica set is then refused as stale. Without it, a
    leader's retried expansion naming a replica that was removed (log deleted) and added
    back since, at the same partition epoch, would be accepted, putting an empty replica in
    the ISR; electing it would lose every acknowledged record. KRaft bumps the partition
    epoch with every replica change (KIP-455), Kafka's ZooKeeper controller the leader epoch.

    Replicas in ``gone`` leave the ISR now; if the leader is one of them, the first in-sync
    electable replica of ``replicas`` takes over. Leader or ISR changed: a new leader epoch.
    None when the leader leaves and no replica can take over (refused before the write)."""
    isr = tuple(r for r in state.isr if r not in gone)
    leader = _leader_after(state, replicas, gone, electable)
    if leader is None:
        return None
    moved = leader != state.leader or isr != state.isr
    return LeaderAndIsr(
        leader=leader,
        leader_epoch=state.leader_epoch + 1 if moved else state.leader_epoch,
        isr=isr,
        partition_epoch=state.partition_epoch + 1,
    )


def reassignment_target_error(
    target: Sequence[BrokerId], registered: Collection[BrokerId]
) -> str | None:
    """Kafka's checks of a new target (INVALID_REPLICA_ASSIGNMENT with these messages): not
    empty, no broker twice, every broker registered."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return (
            "Duplicate replica ids in partition reassignment replica list: "
            f"{list(map(int, target))}"
        )
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica assignment: {list(map(int, target))}"
    if any(r not in registered for r in target):
        return (
            "Replica assignment has brokers that are not alive. Replica list: "
            f"{','.join(map(str, target))}, live broker list: "
            f"{','.join(map(str, sorted(registered)))}"
        )
    return None


def complete_reassignment(
    assignment: ReplicaAssignment,
    current: LeaderAndIsr,
    live_brokers: Collection[BrokerId],
) -> LeaderAndIsr | None:
    """The partition state that ends a reassignment, or None while it cannot end yet.

    It ends once every target replica is in the ISR (Kafka's ``isReassignmentComplete``).
    The ISR becomes ISR ∩ TRS. The leader stays if it is a live target replica; else the
    first target replica (in order) that is live and in the ISR leads (Kafka's
    ``reassignPartitionLeaderElection``). The leader epoch is bumped whenever the leader
    changes or replicas leave, so that a removed replica, still believing itself a follower
    or a leader, is fenced (KIP-455; Kafka's KRaft ``PartitionChangeBuilder`` bumps on the
    same condition). Each ISR member is kept (no record a producer saw acknowledged with
    acks=all is lost: every target replica already has it, being in the ISR).
    """
    target = assignment.target
    if not all(r in current.isr for r in target):
        return None
    new_isr = tuple(r for r in current.isr if r in target)
    if current.leader in target and current.leader in live_brokers:
        leader = current.leader
    else:
        candidates = [r for r in target if r in new_isr and r in live_brokers]
        if not candidates:
            return None
        leader = candidates[0]
    bump = leader != current.leader or bool(assignment.removing)
    return LeaderAndIsr(
        leader=leader,
        leader_epoch=current.leader_epoch + (1 if bump else 0),
        isr=new_isr,
        partition_epoch=current.partition_epoch + 1,
    )
