"""Reading from the nearest replica (KIP-392): which replica a consumer's Fetch to the leader
is told to read from (Kafka's ``ReplicaSelector`` and ``ReplicaManager.
findPreferredReadReplica``).

Rules:

1. ``replica.selector.class`` names the selector: empty (Kafka's default, none) leaves every
   consumer on the leader; ``org.apache.kafka.common.replica.RackAwareReplicaSelector``
   enables rule 3; any other name refuses the broker's start (Kafka's "Class ... cannot be
   found.").
2. Only the leader selects, only for a consumer's fetch carrying client metadata (Fetch v11+,
   replica id -1). The candidates are the leader and the followers in the ISR whose log, as
   their last fetch said (log start offset, fetch offset = log end), holds the fetch offset
   (a follower out of the ISR may lag without bound).
3. Rack-aware (Kafka's ``RackAwareReplicaSelector``): a client without a rack, or whose rack
   holds no candidate or holds the leader, stays on the leader; else the candidate of its rack
   with the highest log end offset (then the most recently caught up, then the highest id).
   A replica with no endpoint on the client's listener has no rack (Kafka's
   ``Node.noNode()``), so it is never chosen.
4. Selecting the leader is no selection: the answer carries ``preferred_read_replica`` -1
   and the records; selecting a follower answers its id and no records (the client fetches
   there next).

Pure: time enters as ``now_ms``, racks (and endpoints) through ``rack_of``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tidelog.model import BrokerId
from tidelog.replication.partition import Partition

#: Rule 1 (its values: ``tidelog.server.config.values.RACK_AWARE_REPLICA_SELECTOR``).
REPLICA_SELECTOR_KEY: Final = "replica.selector.class"
#: No preferred read replica (the wire's -1).
NO_PREFERRED_REPLICA: Final = -1

#: A live broker's rack given the client's listener (None: no rack, not a live broker, or
#: no endpoint on that listener, which Kafka's selection treats alike).
RackOf = Callable[[int, str], str | None]


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's Fetch v11+ says of its client (Kafka's ``ClientMetadata``): such a
    fetch may be served by a follower (KIP-392)."""

    rack_id: str = ""
    #: The listener the fetch came in on: a replica without an endpoint there is not chosen.
    listener_name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaView:
    """One candidate replica (Kafka's ``ReplicaView``)."""

    broker_id: BrokerId
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int

    def rank(self) -> tuple[int, int, int]:
        """Kafka's ``ReplicaView.comparator``: the greatest is the most caught up."""
        return (self.log_end_offset, -self.time_since_last_caught_up_ms, self.broker_id)


def select_rack_aware(
    client_rack: str, replicas: list[ReplicaView], leader: ReplicaView
) -> ReplicaView:
    """Rule 3 over the candidates (``leader`` among them)."""
    if not client_rack:
        return leader
    same_rack = [r for r in replicas if r.rack == client_rack]
    if not same_rack or any(r is leader for r in same_rack):
        return leader
    return max(same_rack, key=ReplicaView.rank)


def preferred_read_replica(
    partition: Partition,
    *,
    leader_log_end_offset: int,
    fetch_offset: int,
    client: ClientMetadata,
    rack_of: RackOf,
    now_ms: int,
) -> int:
    """Rules 2-4 for a partition led here: the follower the client should read from, or
    ``NO_PREFERRED_REPLICA``."""
    if not partition.is_leader:
        return NO_PREFERRED_REPLICA
    leader = ReplicaView(
        broker_id=partition.local_broker_id,
        rack=rack_of(partition.local_broker_id, client.listener_name),
        log_end_offset=leader_log_end_offset,
        time_since_last_caught_up_ms=0,
    )
    candidates = [leader]
    isr = partition.isr
    for broker_id, state in partition.replica_states.items():
        if broker_id in isr and state.log_start_offset <= fetch_offset <= state.log_end_offset:
            candidates.append(
                ReplicaView(
                    broker_id=broker_id,
                    rack=rack_of(broker_id, client.listener_name),
                    log_end_offset=state.log_end_offset,
                    time_since_last_caught_up_ms=now_ms - state.last_caught_up_time_ms,
                )
            )
    chosen = select_rack_aware(client.rack_id, candidates, leader)
    return NO_PREFERRED_REPLICA if chosen is leader else int(chosen.broker_id)


__all__ = [
    "NO_PREFERRED_REPLICA",
    "REPLICA_SELECTOR_KEY",
    "ClientMetadata",
    "RackOf",
    "ReplicaView",
    "preferred_read_replica",
    "select_rack_aware",
]
