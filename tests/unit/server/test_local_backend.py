"""The lone broker's metadata backend: what it checks of a new topic or partition count
(what a cluster's controller checks), and that its coroutines never wait, so handlers run
eagerly answer at once."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidelog.errors import ErrorCode as E
from tidelog.model import BrokerId, TopicPartition
from tidelog.security.client_config import PLAINTEXT
from tidelog.server.apis.eager import eager
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.coordinators.internal_topics import InternalTopicCreator
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

T = TypeVar("T")


def now(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, which must come without waiting."""
    result = eager(coro)
    assert not isinstance(result, asyncio.Future)
    return result


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    config = load_broker_config({"log.dirs": str(tmp_path), "broker.id": "0"})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    local = LocalBackend(config, MetadataStore(tmp_path), ReplicaManager(config, logs))
    local.create_topic_now("t", 2, {})
    yield local
    logs.close()


def test_new_topic_checks(backend: LocalBackend) -> None:
    assert backend.check_new_topic("u", 1, 1, None) == (E.NONE, None)
    assert backend.check_new_topic("bad name!", 1, 1, None)[0] == E.INVALID_TOPIC_EXCEPTION
    assert backend.check_new_topic("t", 1, 1, None) == (
        E.TOPIC_ALREADY_EXISTS,
        "Topic 't' already exists.",
    )
    assert backend.check_new_topic("u", 0, 1, None)[0] == E.INVALID_PARTITIONS
    assert backend.check_new_topic("u", 1, 2, None) == (
        E.INVALID_REPLICATION_FACTOR,
        "Replication factor: 2 larger than available brokers: 1.",
    )
    assert backend.check_new_topic("u", 1, 1, [[0]]) == (E.NONE, None)
    assert backend.check_new_topic("u", 1, 1, [[1]])[0] == E.INVALID_REPLICA_ASSIGNMENT


def test_admin_coroutines_finish_without_waiting(backend: LocalBackend) -> None:
    error, _message, topic_id = now(
        backend.create_topic(
            "u",
            num_partitions=3,
            replication_factor=1,
            raw_configs={},
            overrides={},
            assignment=None,
            validate_only=False,
        )
    )
    assert error == E.NONE
    assert topic_id == backend.topics["u"].topic_id
    assert TopicPartition("u", 2) in backend.replica_manager.partitions
    assert now(backend.create_partitions("u", 4, None, False)) == (E.NONE, None)
    assert backend.topics["u"].num_partitions == 4
    assert now(backend.create_partitions("u", 4, None, False))[0] == E.INVALID_PARTITIONS
    assert now(backend.create_partitions("u", 5, [[BrokerId(1)]], False))[0] == (
        E.INVALID_REPLICA_ASSIGNMENT
    )
    assert now(backend.create_partitions("v", 5, None, False))[0] == (E.UNKNOWN_TOPIC_OR_PARTITION)
    now(backend.delete_topic("u"))
    assert "u" not in backend.topics
    assert TopicPartition("u", 0) not in backend.replica_manager.partitions
    first = now(backend.allocate_producer_id())
    assert now(backend.allocate_producer_id()) == first + 1


def test_a_lone_broker_is_its_own_cluster(backend: LocalBackend) -> None:
    assert backend.controller_id() == 0
    assert backend.live_broker_ids() == [0]
    assert backend.is_ready()
    assert backend.zk is None
    assert backend.readiness is None
    assert not backend.wants_controlled_shutdown()
    (entry,) = backend.brokers(("h", 9))
    assert (entry["node_id"], entry["host"], entry["port"]) == (0, "h", 9)


def test_the_lone_broker_leads_every_partition_it_hosts(backend: LocalBackend) -> None:
    endpoint = backend.config.advertised_listener
    assert backend.partition_leader(TopicPartition("t", 1)) == (0, endpoint.host, endpoint.port)
    assert backend.partition_leader(TopicPartition("t", 1), ("client.host", 9093)) == (
        0,
        "client.host",
        9093,
    )
    assert backend.partition_leader(TopicPartition("t", 2)) is None
    assert backend.partition_leader(TopicPartition("nope", 0), ("client.host", 9093)) is None


def test_the_lone_broker_has_no_peers_to_secure(backend: LocalBackend) -> None:
    assert backend.peer_security == PLAINTEXT


def test_an_internal_topic_is_created_at_once_with_typed_configs(backend: LocalBackend) -> None:
    creator = InternalTopicCreator(
        backend.config,
        backend,
        "__internal",
        partitions_key="offsets.topic.num.partitions",
        replication_key="offsets.topic.replication.factor",
        config={"retention.ms": "-1", "min.insync.replicas": "3"},
    )
    count = asyncio.run(creator.ensure())
    assert count == backend.config.get_int("offsets.topic.num.partitions")
    info = backend.topics["__internal"]
    assert info.configs == {
        "cleanup.policy": "compact",
        "retention.ms": -1,
        "min.insync.replicas": 1,
    }
    assert backend.partition_leader(TopicPartition("__internal", count - 1)) is not None


def test_a_lone_broker_is_its_own_active_controller_with_no_candidate_or_fetchers(
    backend: LocalBackend,
) -> None:
    assert backend.controller() is None
    assert backend.is_active_controller()
    assert list(backend.fetchers()) == []
    assert backend.zk is None
