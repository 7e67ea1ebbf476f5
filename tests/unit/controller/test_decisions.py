"""The controller's pure decisions: elections, AlterPartition CAS, assignment (rules 5, 9-12)."""

from __future__ import annotations

from collections import Counter

import pytest

from tidelog.controller.decisions import (
    Election,
    alter_partition,
    apply_election,
    assign_replicas,
    elect_controlled_shutdown_leader,
    elect_leader,
    elect_preferred_leader,
    on_broker_failure,
    on_broker_startup,
    on_controlled_shutdown,
)
from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, BrokerId, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal, LeaderAndIsr


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


A = b(2, 0, 1)  # assignment order matters, not broker id order


@pytest.mark.parametrize(
    ("isr", "live", "unclean", "expected"),
    [
        (b(0, 1, 2), b(0, 1, 2), False, Election(leader=BrokerId(2), isr=b(2, 0, 1))),
        (b(0, 1), b(0, 1, 2), False, Election(leader=BrokerId(0), isr=b(0, 1))),
        (b(0, 1), b(1, 2), False, Election(leader=BrokerId(1), isr=b(1))),
        (
            b(
                0,
            ),
            b(1, 2),
            False,
            None,
        ),
        (
            b(
                0,
            ),
            b(1, 2),
            True,
            Election(leader=BrokerId(2), isr=b(2), unclean=True),
        ),
        (
            b(
                0,
            ),
            b(),
            True,
            None,
        ),
    ],
)
def test_elect_leader(
    isr: tuple[BrokerId, ...], live: tuple[BrokerId, ...], unclean: bool, expected: Election | None
) -> None:
    assert elect_leader(A, isr, live, unclean_allowed=unclean) == expected


def state(leader: int, isr: tuple[BrokerId, ...], le: int = 3, pe: int = 7) -> LeaderAndIsr:
    return LeaderAndIsr(leader=BrokerId(leader), leader_epoch=le, isr=isr, partition_epoch=pe)


def test_broker_failure_elects_and_never_empties_the_isr() -> None:
    s = state(2, b(2, 0))
    res = on_broker_failure(A, s, BrokerId(2), b(0, 1), unclean_allowed=False)
    assert res is not None
    new, election = res
    assert new == state(0, b(0), le=4, pe=8)
    assert election == Election(leader=BrokerId(0), isr=b(0))
    # The last ISR member dies: offline, ISR kept, epoch bumped (fences the old leader).
    res = on_broker_failure(A, new, BrokerId(0), b(1), unclean_allowed=False)
    assert res is not None
    offline, election = res
    assert election is None
    assert offline == state(-1, b(0), le=5, pe=9)
    assert offline.leader == NO_BROKER
    # Broker 1 (not in the ISR) returning changes nothing unless unclean is allowed.
    assert on_broker_startup(A, offline, b(1), unclean_allowed=False) is None
    res2 = on_broker_startup(A, offline, b(1), unclean_allowed=True)
    assert res2 is not None
    assert res2[0] == state(1, b(1), le=6, pe=10)
    assert res2[1].unclean
    # The ISR member returning is a clean election.
    res3 = on_broker_startup(A, offline, b(0, 1), unclean_allowed=False)
    assert res3 is not None
    assert res3[0] == state(0, b(0), le=6, pe=10)


def test_dead_follower_leaves_isr_without_new_leader_epoch() -> None:
    res = on_broker_failure(A, state(2, b(2, 0, 1)), BrokerId(1), b(0, 2), unclean_allowed=False)
    assert res == (state(2, b(2, 0), le=3, pe=8), None)
    assert on_broker_failure(A, state(2, b(2)), BrokerId(1), b(2), unclean_allowed=False) is None


def test_preferred_and_controlled_shutdown() -> None:
    assert elect_preferred_leader(A, state(2, b(2, 0)), b(0, 1, 2)) is ErrorCode.ELECTION_NOT_NEEDED
    assert elect_preferred_leader(A, state(0, b(0, 1)), b(0, 1, 2)) is (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert elect_preferred_leader(A, state(0, b(0, 2)), b(0, 1, 2)) == Election(
        leader=BrokerId(2), isr=b(0, 2)
    )
    assert elect_controlled_shutdown_leader(A, state(2, b(2, 0, 1)), b(0, 1, 2), b(2)) == Election(
        leader=BrokerId(0), isr=b(0, 1)
    )
    assert elect_controlled_shutdown_leader(A, state(2, b(2)), b(0, 1, 2), b(2)) is None
    assert apply_election(state(2, b(2)), None).leader_epoch == 4


def proposal(
    isr: tuple[BrokerId, ...], le: int = 3, pe: int = 7, leader: int = 2
) -> AlterPartitionProposal:
    return AlterPartitionProposal(
        topic_partition=TopicPartition("t", 0),
        leader_id=BrokerId(leader),
        leader_epoch=le,
        partition_epoch=pe,
        new_isr=isr,
    )


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (proposal(b(2, 0, 1)), ErrorCode.NONE),
        (proposal(b(2)), ErrorCode.NONE),
        (proposal(b(2, 0, 1), pe=6), ErrorCode.INVALID_UPDATE_VERSION),
        (proposal(b(2, 0), le=2), ErrorCode.FENCED_LEADER_EPOCH),
        (proposal(b(0, 2), leader=0), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (proposal(b(0, 1)), ErrorCode.INVALID_REQUEST),
        (proposal(b(2, 0, 3)), ErrorCode.INELIGIBLE_REPLICA),
    ],
)
def test_alter_partition_compare_and_set(p: AlterPartitionProposal, expected: ErrorCode) -> None:
    current = state(2, b(2, 0))
    error, new = alter_partition(current, p, A + b(3), b(0, 1, 2))
    assert error is expected
    if expected is ErrorCode.NONE:
        assert new == state(2, p.new_isr, pe=8)
    else:
        assert new == current


def test_alter_partition_already_in_force_answers_the_state_even_with_a_stale_epoch() -> None:
    """Rule 5a: the retry of a change whose answer was lost finds it applied."""
    current = state(2, b(2, 0))
    for retried in (proposal(b(0, 2), pe=6), proposal(b(2, 0))):
        error, now = alter_partition(current, retried, A + b(3), b(0, 1, 2))
        assert (error, now) == (ErrorCode.NONE, current)
    # Still fenced first: another leader epoch's proposal is not "already in force".
    error, _ = alter_partition(current, proposal(b(2, 0), le=2), A + b(3), b(0, 1, 2))
    assert error is ErrorCode.FENCED_LEADER_EPOCH


def test_alter_partition_from_a_later_partition_epoch_is_not_already_in_force() -> None:
    """A controller whose state is older than the leader's (deposed, not yet aware) must not
    answer "in force" with it: the leader ignores a committed state older than its own, so
    its change stayed in flight for good (fault harness, a ZooKeeper partition of the
    controller). It answers INVALID_UPDATE_VERSION and the leader reads the store."""
    current = state(2, b(2, 0))  # partition epoch 7
    error, now = alter_partition(current, proposal(b(2, 0), pe=8), A + b(3), b(0, 1, 2))
    assert (error, now) == (ErrorCode.INVALID_UPDATE_VERSION, current)


def test_assign_replicas_rule_11() -> None:
    brokers = b(30, 10, 20)
    got = assign_replicas(3, 2, brokers, start_index=1)
    # Sorted brokers [10, 20, 30]; replica j of partition i -> broker[(1 + i + j) mod 3].
    assert got == [
        [BrokerId(20), BrokerId(30)],
        [BrokerId(30), BrokerId(10)],
        [BrokerId(10), BrokerId(20)],
    ]
    assert assign_replicas(2, 4, brokers, start_index=0) is ErrorCode.INVALID_REPLICATION_FACTOR
    assert assign_replicas(2, 0, brokers, start_index=0) is ErrorCode.INVALID_REPLICATION_FACTOR
    assert assign_replicas(0, 1, brokers, start_index=0) is ErrorCode.INVALID_PARTITIONS


def test_assignment_spreads_leaders_and_followers() -> None:
    brokers = b(0, 1, 2, 3)
    got = assign_replicas(8, 3, brokers, start_index=2)
    assert isinstance(got, list)
    assert all(len(set(r)) == 3 for r in got)  # no broker twice in one partition
    assert Counter(r[0] for r in got) == dict.fromkeys(range(4), 2)
    # The shift after n partitions changes which broker follows which leader.
    assert got[0][1:] != got[4][1:]
    assert Counter(x for r in got for x in r[1:]) == dict.fromkeys(range(4), 4)


def test_alter_partition_rejects_a_stale_broker_epoch() -> None:
    current = state(2, b(2, 0))
    p = proposal(b(2))
    error, new = alter_partition(
        current, p, A, b(0, 1, 2), broker_epoch=4, registered_broker_epoch=5
    )
    assert (error, new) == (ErrorCode.STALE_BROKER_EPOCH, current)
    error, new = alter_partition(
        current, p, A, b(0, 1, 2), broker_epoch=5, registered_broker_epoch=5
    )
    assert error is ErrorCode.NONE
    assert new.isr == b(2)


def test_controlled_shutdown_moves_leadership_and_leaves_isrs() -> None:
    live = b(0, 1, 2)
    res = on_controlled_shutdown(A, state(2, b(2, 0, 1)), BrokerId(2), live, b(2))
    assert res == (state(0, b(0, 1), le=4, pe=8), Election(leader=BrokerId(0), isr=b(0, 1)))
    res = on_controlled_shutdown(A, state(2, b(2, 0, 1)), BrokerId(1), live, b(1))
    assert res == (state(2, b(2, 0), pe=8), None)
    # The only ISR member: nothing to move to, and the ISR is not emptied.
    assert on_controlled_shutdown(A, state(2, b(2)), BrokerId(2), live, b(2)) is None
