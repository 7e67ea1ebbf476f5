"""KIP-392's replica selection (``tidelog.server.replica.selector``): Kafka's
RackAwareReplicaSelector over the leader and the in-sync followers that cover the fetch
offset, and the ``replica.selector.class`` config."""

from __future__ import annotations

import pytest

from tidelog.errors import ConfigError
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.replication.partition import Partition
from tidelog.server.cluster.metadata_cache import CachedBroker, ClusterMetadataCache
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.values import RACK_AWARE_REPLICA_SELECTOR
from tidelog.server.replica.selector import (
    NO_PREFERRED_REPLICA,
    ClientMetadata,
    ReplicaView,
    preferred_read_replica,
    select_rack_aware,
)

RACKS = {0: "a", 1: "b", 2: "c", 3: "b"}


def view(broker: int, leo: int, since_caught_up_ms: int = 0) -> ReplicaView:
    return ReplicaView(
        broker_id=BrokerId(broker),
        rack=RACKS.get(broker),
        log_end_offset=leo,
        time_since_last_caught_up_ms=since_caught_up_ms,
    )


LEADER = view(0, 10)


@pytest.mark.parametrize(
    ("client_rack", "others", "chosen"),
    [
        ("", [view(1, 10)], 0),  # no rack: the leader
        ("a", [view(1, 10)], 0),  # the leader's own rack
        ("z", [view(1, 10), view(2, 10)], 0),  # no replica in the client's rack
        ("b", [view(1, 10), view(2, 10)], 1),
        ("c", [view(1, 10), view(2, 10)], 2),
        # Two in the rack: the highest log end offset, then the most recently caught up,
        # then the highest id (Kafka's ReplicaView.comparator).
        ("b", [view(1, 8), view(3, 9)], 3),
        ("b", [view(1, 9, 5), view(3, 9, 50)], 1),
        ("b", [view(1, 9, 5), view(3, 9, 5)], 3),
    ],
)
def test_rack_aware_selection(client_rack: str, others: list[ReplicaView], chosen: int) -> None:
    assert select_rack_aware(client_rack, [LEADER, *others], LEADER).broker_id == chosen


def leader_partition(
    *, isr: list[int], leos: dict[int, int], starts: dict[int, int] | None = None
) -> Partition:
    partition = Partition(
        TopicPartition("t", 0), BrokerId(0), replica_lag_time_max_ms=30_000, min_insync_replicas=1
    )
    partition.make_leader(
        leader_epoch=1,
        partition_epoch=0,
        replicas=[BrokerId(0), BrokerId(1), BrokerId(2)],
        isr=[BrokerId(b) for b in isr],
        log_end_offset=10,
        high_watermark=0,
        now_ms=1_000,
        epoch_cache=LeaderEpochCache(),
    )
    for broker, leo in leos.items():
        partition.update_follower_fetch_state(
            BrokerId(broker),
            fetch_offset=leo,
            leader_log_end_offset=10,
            now_ms=1_000,
            log_start_offset=(starts or {}).get(broker, 0),
        )
    return partition


def choose(partition: Partition, rack: str, fetch_offset: int) -> int:
    return preferred_read_replica(
        partition,
        leader_log_end_offset=10,
        fetch_offset=fetch_offset,
        client=ClientMetadata(rack),
        rack_of=lambda b, _listener: RACKS.get(b),
        now_ms=2_000,
    )


def test_a_follower_in_the_isr_covering_the_offset_is_chosen() -> None:
    partition = leader_partition(isr=[0, 1, 2], leos={1: 10, 2: 6})
    assert choose(partition, "b", 4) == 1
    assert choose(partition, "c", 6) == 2
    # Kafka's findPreferredReadReplica: the follower's log end must reach the fetch offset.
    assert choose(partition, "c", 7) == NO_PREFERRED_REPLICA
    assert choose(partition, "a", 4) == NO_PREFERRED_REPLICA  # the leader's rack


def test_a_follower_whose_log_starts_after_the_offset_is_not_chosen() -> None:
    partition = leader_partition(isr=[0, 1, 2], leos={1: 10, 2: 10}, starts={1: 5})
    assert choose(partition, "b", 4) == NO_PREFERRED_REPLICA
    assert choose(partition, "b", 5) == 1
    assert choose(partition, "c", 0) == 2


def test_a_follower_out_of_the_isr_is_never_chosen() -> None:
    partition = leader_partition(isr=[0, 2], leos={1: 10, 2: 10})
    assert choose(partition, "b", 0) == NO_PREFERRED_REPLICA
    assert choose(partition, "c", 0) == 2


def test_a_follower_is_never_a_selector() -> None:
    partition = leader_partition(isr=[0, 1, 2], leos={1: 10, 2: 10})
    partition.make_follower(
        leader_id=BrokerId(1),
        leader_epoch=2,
        partition_epoch=1,
        replicas=[BrokerId(0), BrokerId(1), BrokerId(2)],
        isr=[BrokerId(0), BrokerId(1), BrokerId(2)],
        log_end_offset=10,
    )
    assert choose(partition, "c", 0) == NO_PREFERRED_REPLICA


def test_the_config_takes_kafkas_class_name_and_refuses_others() -> None:
    assert load_broker_config({}).get_str("replica.selector.class") == ""
    config = load_broker_config({"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR})
    assert config.get_str("replica.selector.class") == RACK_AWARE_REPLICA_SELECTOR
    with pytest.raises(ConfigError) as caught:
        load_broker_config({"replica.selector.class": "com.example.NearestSelector"})
    assert str(caught.value) == (
        "replica.selector.class: invalid value 'com.example.NearestSelector': "
        "Class com.example.NearestSelector cannot be found."
    )


def test_a_follower_without_an_endpoint_on_the_clients_listener_is_not_chosen() -> None:
    cache = ClusterMetadataCache(0)
    both = {"PLAINTEXT": ("h", 9092), "INTERNAL": ("h", 9093)}
    cache.brokers = {
        0: CachedBroker(0, "h", 9093, "a", both),
        1: CachedBroker(1, "h", 9093, "b", {"INTERNAL": ("h", 9093)}),
        2: CachedBroker(2, "h", 9093, "c", both),
    }
    partition = leader_partition(isr=[0, 1, 2], leos={1: 10, 2: 10})

    def chosen(rack: str, listener: str) -> int:
        return preferred_read_replica(
            partition,
            leader_log_end_offset=10,
            fetch_offset=0,
            client=ClientMetadata(rack, listener),
            rack_of=cache.rack_on,
            now_ms=2_000,
        )

    assert chosen("b", "INTERNAL") == 1
    assert chosen("b", "PLAINTEXT") == NO_PREFERRED_REPLICA
    assert chosen("c", "PLAINTEXT") == 2
    assert cache.rack_on(3, "") is None  # not a live broker
