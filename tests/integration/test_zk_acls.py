"""ACLs on a real ZooKeeper (``tidelog.zk.acls``, ``tidelog.server.auth.authorizer``):
Kafka's znodes byte for byte, change notifications, a second broker's authorizer following
the first, removal by filter, concurrent compare-and-set writers, and ACLs a Kafka broker
wrote."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from tidelog.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.auth.authorizer import AclAuthorizer
from tidelog.server.network.request_context import RequestContext
from tidelog.zk import ZkClient
from tidelog.zk.acls import ZkAclStore

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 4000
ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
ORD_PREFIX = ResourcePattern(ResourceType.TOPIC, "ord-", PatternType.PREFIXED)
ALICE_READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
BOB_WRITE = AccessControlEntry("User:bob", "10.0.0.9", AclOperation.WRITE, AclPermissionType.ALLOW)
CAROL_DENY = AccessControlEntry("User:carol", "*", AclOperation.ALL, AclPermissionType.DENY)


def ctx(user: str, host: str = "10.0.0.9") -> RequestContext:
    return RequestContext(KafkaPrincipal.user(user), host, "PLAINTEXT", "PLAINTEXT")


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not seen in time"
        await asyncio.sleep(0.05)


async def connect(zk_connect: str) -> ZkClient:
    return await ZkClient.connect(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)


def test_acls_in_kafkas_znodes_followed_by_a_second_broker(zk_connect: str) -> None:
    async def body() -> None:
        zk1, zk2 = await connect(zk_connect), await connect(zk_connect)
        first, second = AclAuthorizer(), AclAuthorizer()
        try:
            await first.start(zk1)
            await second.start(zk2)
            results = await first.create_acls(
                [
                    AclBinding(ORDERS, BOB_WRITE),
                    AclBinding(ORDERS, ALICE_READ),
                    AclBinding(ORD_PREFIX, CAROL_DENY),
                ]
            )
            assert [r.error for r in results] == [0, 0, 0]
            kz = zk1.kazoo

            # Kafka's JSON at Kafka's paths.
            data, _stat = kz.get("/kafka-acl/Topic/orders")
            assert data == (
                b'{"version":1,"acls":['
                b'{"principal":"User:alice","permissionType":"Allow","operation":"Read",'
                b'"host":"*"},'
                b'{"principal":"User:bob","permissionType":"Allow","operation":"Write",'
                b'"host":"10.0.0.9"}]}'
            )
            data, _stat = kz.get("/kafka-acl-extended/prefixed/Topic/ord-")
            assert json.loads(data) == {
                "version": 1,
                "acls": [
                    {
                        "principal": "User:carol",
                        "permissionType": "Deny",
                        "operation": "All",
                        "host": "*",
                    }
                ],
            }
            # One notification per changed resource.
            literal = kz.get_children("/kafka-acl-changes")
            assert len(literal) == 1
            assert literal[0].startswith("acl_changes_")
            assert kz.get(f"/kafka-acl-changes/{literal[0]}")[0] == b"TOPIC:orders"
            extended = kz.get_children("/kafka-acl-extended-changes")
            assert len(extended) == 1
            assert json.loads(kz.get(f"/kafka-acl-extended-changes/{extended[0]}")[0]) == {
                "version": 1,
                "resourceType": "TOPIC",
                "name": "ord-",
                "patternType": "PREFIXED",
            }

            # The writer knew at once; the other broker within seconds.
            topic = ResourceType.TOPIC
            assert first.authorize(AclOperation.WRITE, topic, "orders", ctx("bob"))
            await eventually(lambda: second.acls() == first.acls())
            assert second.authorize(AclOperation.WRITE, topic, "orders", ctx("bob"))
            assert not second.authorize(AclOperation.WRITE, topic, "orders", ctx("bob", "1.1.1.1"))
            assert second.authorize(AclOperation.DESCRIBE, topic, "orders", ctx("alice"))
            assert not second.authorize(AclOperation.READ, topic, "ord-x", ctx("carol"))

            # Removal by filter, from the second broker.
            deleted = await second.delete_acls(
                [AclBindingFilter(principal="User:bob"), AclBindingFilter(name="nothing")]
            )
            assert [list(r.deleted) for r in deleted] == [[AclBinding(ORDERS, BOB_WRITE)], []]
            await eventually(lambda: AclBinding(ORDERS, BOB_WRITE) not in first.acls())
            assert not first.authorize(AclOperation.WRITE, topic, "orders", ctx("bob"))
            # The last ACLs of a resource go with its znode.
            deleted = await first.delete_acls([AclBindingFilter(ResourceType.TOPIC)])
            assert sorted(deleted[0].deleted) == sorted(
                [AclBinding(ORDERS, ALICE_READ), AclBinding(ORD_PREFIX, CAROL_DENY)]
            )
            assert kz.exists("/kafka-acl/Topic/orders") is None
            assert kz.exists("/kafka-acl-extended/prefixed/Topic/ord-") is None
            assert len(kz.get_children("/kafka-acl-changes")) == 3
            await eventually(lambda: second.acls() == [])
            assert await ZkAclStore(zk1).load_all() == {}
        finally:
            await first.close()
            await second.close()
            await zk1.close()
            await zk2.close()

    asyncio.run(body())


def test_concurrent_writers_lose_nothing(zk_connect: str) -> None:
    async def body() -> None:
        zk1, zk2 = await connect(zk_connect), await connect(zk_connect)
        try:
            stores = [ZkAclStore(zk1), ZkAclStore(zk2)]
            entries = [
                AccessControlEntry(f"User:u{i}", "*", AclOperation.READ, AclPermissionType.ALLOW)
                for i in range(12)
            ]
            await asyncio.gather(
                *(stores[i % 2].add([AclBinding(ORDERS, entry)]) for i, entry in enumerate(entries))
            )
            assert await stores[0].load(ORDERS) == frozenset(entries)
            removed = await asyncio.gather(
                *(
                    stores[i % 2].remove([AclBindingFilter(principal=entry.principal)])
                    for i, entry in enumerate(entries)
                )
            )
            assert sorted(b for batch in removed for b in batch) == sorted(
                AclBinding(ORDERS, e) for e in entries
            )
            assert await stores[1].load_all() == {}
        finally:
            await zk1.close()
            await zk2.close()

    asyncio.run(body())


def test_reads_what_a_kafka_broker_wrote(zk_connect: str) -> None:
    """Kafka's key order differs and Kafka 2.x notified with ``Group:name``: both are read."""

    async def body() -> None:
        zk = await connect(zk_connect)
        auth = AclAuthorizer()
        try:
            await auth.start(zk)
            kz = zk.kazoo
            kafka_json = (
                b'{"acls":[{"host":"*","permissionType":"Allow","operation":"Read",'
                b'"principal":"User:alice"}],"version":1}'
            )
            kz.create("/kafka-acl/Group/g1", kafka_json, makepath=True)
            kz.create("/kafka-acl-changes/acl_changes_", b"Group:g1", sequence=True)
            kz.create("/kafka-acl-extended/prefixed/TransactionalId/tx-", kafka_json, makepath=True)
            kz.create(
                "/kafka-acl-extended-changes/acl_changes_",
                b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx-",'
                b'"patternType":"PREFIXED"}',
                sequence=True,
            )
            group = ResourcePattern(ResourceType.GROUP, "g1")
            txn = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED)
            await eventually(lambda: {b.pattern for b in auth.acls()} == {group, txn})
            alice = ctx("alice")
            assert auth.authorize(AclOperation.READ, ResourceType.GROUP, "g1", alice)
            assert auth.authorize(AclOperation.READ, ResourceType.TRANSACTIONAL_ID, "tx-1", alice)
        finally:
            await auth.close()
            await zk.close()

    asyncio.run(body())
