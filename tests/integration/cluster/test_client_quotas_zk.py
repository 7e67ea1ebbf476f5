"""Client quotas in a cluster: AlterClientQuotas through one broker writes Kafka's
``/config/users`` / ``/config/clients`` JSON and ``/config/changes`` notifications; the other
broker applies it live (its Produce answers carry a throttle time); a quota written straight
into ZooKeeper the way Kafka's tools write it is applied too; a user's SCRAM credential
beside its quota is kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.harness import BrokerCluster, BrokerProcess
from tests.integration.rawclient import PRODUCE_V, Raw, batch
from tidelog.client import BlockingClient
from tidelog.client import quota_admin as qa
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey


@pytest.fixture
def zk(zk_connect: str) -> Iterator[tuple[KazooClient, str]]:
    hosts, chroot = zk_connect.split("/", 1)
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    try:
        yield client, f"/{chroot}"
    finally:
        client.stop()
        client.close()


def throttle_of_one_produce(broker: BrokerProcess, client_id: str) -> int:
    """A fresh connection's Produce answer's throttle_time_ms (the topic need not exist:
    the request's bytes count whatever the answer)."""
    raw = Raw(broker)
    raw.client_id = client_id
    try:
        body = raw.call(
            ApiKey.PRODUCE,
            PRODUCE_V,
            {
                "acks": 1,
                "timeout": 5_000,
                "topic_data": [
                    {
                        "name": "no-such-topic",
                        "partition_data": [{"index": 0, "records": batch(b"v" * 200)}],
                    }
                ],
            },
        )
    finally:
        raw.close()
    return int(body.throttle_time.total_seconds() * 1000)


def eventually(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def read_json(kz: KazooClient, path: str) -> Any:
    return json.loads(kz.get(path)[0])


def test_quotas_through_zookeeper_reach_every_broker(
    new_cluster: Callable[..., BrokerCluster], zk: tuple[KazooClient, str]
) -> None:
    cluster = new_cluster(2)
    kz, root = zk
    b0, b1 = cluster.broker(0), cluster.broker(1)
    # A user with a (made-up) SCRAM credential already: its quota goes beside it.
    kz.create(
        f"{root}/config/users/carol",
        b'{"version":1,"config":{"SCRAM-SHA-256":"kept"}}',
        makepath=True,
    )
    with BlockingClient(b0.bootstrap) as client:
        for entity, key, value in (
            ((("client-id", "slow"),), "producer_byte_rate", 1.0),
            ((("user", "alice"), ("client-id", None)), "consumer_byte_rate", 2048.0),
            ((("user", "carol"),), "request_percentage", 150.0),
        ):
            error, message = client.run(
                qa.alter_client_quotas(client.client, entity, [qa.QuotaOp(key, value)])
            )
            assert (error, message) == (ErrorCode.NONE, None)

    assert read_json(kz, f"{root}/config/clients/slow") == {
        "version": 1,
        "config": {"producer_byte_rate": "1"},
    }
    assert read_json(kz, f"{root}/config/users/alice/clients/<default>") == {
        "version": 1,
        "config": {"consumer_byte_rate": "2048"},
    }
    assert read_json(kz, f"{root}/config/users/carol")["config"] == {
        "SCRAM-SHA-256": "kept",
        "request_percentage": "150.0",
    }
    changes = [
        read_json(kz, f"{root}/config/changes/{name}")
        for name in sorted(kz.get_children(f"{root}/config/changes"))
    ]
    paths = [c["entity_path"] for c in changes if c.get("version") == 2]
    for expected in ("clients/slow", "users/alice/clients/<default>", "users/carol"):
        assert expected in paths

    # The other broker applies it without a restart: its Produce answers are throttled.
    eventually(lambda: throttle_of_one_produce(b1, "slow") > 0)
    assert throttle_of_one_produce(b1, "not-slow") == 0

    # Written the way kafka-configs.sh --zookeeper writes it: znode, then notification.
    kz.create(
        f"{root}/config/users/ANONYMOUS/clients/zkslow",
        b'{"version":1,"config":{"producer_byte_rate":"1"}}',
        makepath=True,
    )
    kz.create(
        f"{root}/config/changes/config_change_",
        b'{"version":2,"entity_path":"users/ANONYMOUS/clients/zkslow"}',
        sequence=True,
    )
    eventually(lambda: throttle_of_one_produce(b0, "zkslow") > 0)

    with BlockingClient(b1.bootstrap) as client:
        error, _message, entries = client.run(
            qa.describe_client_quotas(client.client, [("user", qa.MATCH_ANY, None)])
        )
    assert error == ErrorCode.NONE
    assert sorted(entries) == [
        ((("user", "ANONYMOUS"), ("client-id", "zkslow")), {"producer_byte_rate": 1.0}),
        ((("user", "alice"), ("client-id", None)), {"consumer_byte_rate": 2048.0}),
        ((("user", "carol"),), {"request_percentage": 150.0}),
    ]
