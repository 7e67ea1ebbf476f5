"""ZooKeeper security against the real server: digest auth, secure ACLs on the nodes a
broker creates (``zookeeper.set.acl``), and securing a tree left open by an unsecured run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from tidelog.model import BrokerId
from tidelog.zk import ZkClient, znodes
from tidelog.zk.security import KAFKA_ROOT_PATHS, ZkAuth, secure_acls
from tidelog.zk.session import secure_existing_tree
from tidelog.zk.znodes import BrokerRegistration, EndPoint

pytestmark = pytest.mark.integration

T = TypeVar("T")

SESSION_TIMEOUT_MS = 4000
AUTH = ZkAuth("tidelog", "s3cret:with:colons")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


async def connect_secure(zk_connect: str, auth: ZkAuth = AUTH) -> ZkClient:
    return await ZkClient.connect(
        zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS, auth=auth, set_acl=True
    )


class Outsider:
    """A plain kazoo session on the test's chroot without any credentials, opened on first
    use (the chroot must exist by then: kazoo warns otherwise)."""

    def __init__(self, zk_connect: str) -> None:
        self._connect = zk_connect
        self._client: KazooClient | None = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = KazooClient(hosts=self._connect, timeout=SESSION_TIMEOUT_MS / 1000)
            self._client.start(timeout=10)
        return getattr(self._client, name)

    def close(self) -> None:
        if self._client is not None:
            self._client.stop()
            self._client.close()


@pytest.fixture
def outsider(zk_connect: str) -> Iterator[Any]:
    client = Outsider(zk_connect)
    try:
        yield client
    finally:
        client.close()


def acl_key(acls: Any) -> frozenset[tuple[int, str, str]]:
    return frozenset((int(a.perms), str(a.id.scheme), str(a.id.id)) for a in acls)


def walk(kz: KazooClient, path: str) -> Iterator[str]:
    yield path
    for child in kz.get_children(path):
        yield from walk(kz, f"{path.rstrip('/')}/{child}")


def test_secure_broker_creates_secured_persistent_paths(zk_connect: str, outsider: Any) -> None:
    async def scenario() -> None:
        zk = await connect_secure(zk_connect)
        try:
            await zk.register_broker(
                BrokerRegistration(
                    broker_id=BrokerId(1), endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9092),)
                )
            )
            zk.kazoo.create("/brokers/topics/t", b"{}")
            for path in (*znodes.PERSISTENT_PATHS, "/brokers", "/brokers/ids/1", "/"):
                # (ZooKeeper shows digest hashes only to sessions with ADMIN on the node.)
                acls, _ = zk.kazoo.get_acls(path)
                assert acl_key(acls) == acl_key(secure_acls(AUTH, path)), path
            # The world reads the layout...
            assert outsider.get_children("/brokers/ids") == ["1"]
            outsider.get("/brokers/ids/1")
            # ...but may not change it.
            with pytest.raises(NoAuthError):
                outsider.set("/brokers/ids", b"x")
            with pytest.raises(NoAuthError):
                outsider.create("/brokers/topics/evil", b"{}")
            with pytest.raises(NoAuthError):
                outsider.delete("/brokers/topics/t")
            with pytest.raises(NoAuthError):
                outsider.set_acls("/brokers/topics/t", OPEN_ACL_UNSAFE)
            with pytest.raises(NoAuthError):  # the chroot node itself
                outsider.create("/evil", b"")
        finally:
            await zk.close()

    run(scenario())


def test_scram_credentials_are_not_world_readable(zk_connect: str, outsider: Any) -> None:
    async def scenario() -> None:
        zk = await connect_secure(zk_connect)
        try:
            # makepath: /config/users gets its own (sensitive) ACL, /config stays readable.
            zk.kazoo.create("/config/users/alice", b'{"version":1,"config":{}}', makepath=True)
            # A transaction's create chooses by path too.
            tx = zk.kazoo.transaction()
            tx.create("/config/users/bob", b"{}")
            tx.create("/config/topics/t", b"{}")
            tx.commit()
        finally:
            await zk.close()

    run(scenario())
    for path in ("/config/users/alice", "/config/users/bob"):
        with pytest.raises(NoAuthError):
            outsider.get(path)
    with pytest.raises(NoAuthError):
        outsider.get_children("/config/users")
    outsider.get("/config/topics/t")
    assert sorted(outsider.get_children("/config")) == ["changes", "topics", "users"]


def test_another_identity_cannot_write(zk_connect: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        zk = await connect_secure(zk_connect)
        try:
            zk.kazoo.create("/brokers/topics/t", b"{}")
            # Another broker with the same credential shares the identity and may write.
            same = await connect_secure(zk_connect)
            try:
                same.kazoo.set("/brokers/topics/t", b'{"v":2}')
            finally:
                await same.close()
            # A different credential starts (the tree exists), cannot change the ACLs and
            # says so once, and cannot write.
            with caplog.at_level(logging.WARNING, "tidelog.zk.security"):
                other = await connect_secure(zk_connect, ZkAuth("mallory", "pw"))
            try:
                warnings = [r for r in caplog.records if "not allowed to secure" in r.message]
                assert len(warnings) == 1
                with pytest.raises(NoAuthError):
                    other.kazoo.set("/brokers/topics/t", b"x")
                with pytest.raises(NoAuthError):
                    other.kazoo.create("/brokers/topics/evil", b"{}")
                with pytest.raises(NoAuthError):
                    other.kazoo.delete("/brokers/topics/t")
            finally:
                await other.close()
        finally:
            await zk.close()

    run(scenario())


def test_existing_open_tree_is_secured_at_start_and_can_be_unsecured(
    zk_connect: str, outsider: Any
) -> None:
    async def scenario() -> None:
        # An earlier unsecured run left open nodes behind.
        plain = await ZkClient.connect(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)
        try:
            kz = plain.kazoo
            kz.create("/brokers/topics/t/partitions/0/state", b"{}", makepath=True)
            kz.create("/config/users/alice", b"{}", makepath=True)
            kz.create("/kafka-acl/Topic/t", b"{}", makepath=True)
            kz.create("/controller_epoch", b"1")
            kz.create("/not-kafka", b"")  # not one of Kafka's roots: left alone
        finally:
            await plain.close()
        kafka_nodes = [
            p for root in ("/brokers", "/config", "/kafka-acl") for p in walk(outsider, root)
        ]
        kafka_nodes += ["/controller_epoch", "/"]
        for path in kafka_nodes:
            assert acl_key(outsider.get_acls(path)[0]) == acl_key(OPEN_ACL_UNSAFE), path

        zk = await connect_secure(zk_connect)
        try:
            for path in kafka_nodes:
                acls, _ = zk.kazoo.get_acls(path)
                assert acl_key(acls) == acl_key(secure_acls(AUTH, path)), path
            assert acl_key(outsider.get_acls("/not-kafka")[0]) == acl_key(OPEN_ACL_UNSAFE)
            with pytest.raises(NoAuthError):
                outsider.set("/brokers/topics/t/partitions/0/state", b"x")
            with pytest.raises(NoAuthError):
                outsider.get("/config/users/alice")
            outsider.get("/kafka-acl/Topic/t")  # world-readable, as in Kafka

            # Start-up also created the persistent paths: every Kafka node now.
            everything = ["/"] + [
                path
                for root in KAFKA_ROOT_PATHS
                if zk.kazoo.exists(root)
                for path in walk(zk.kazoo, root)
            ]
            again = await secure_existing_tree(zk)
            assert (again.changed, again.unchanged, again.denied) == (0, len(everything), ())

            opened = await secure_existing_tree(zk, unsecure=True)
            assert opened.changed == len(everything)
            for path in everything:
                assert acl_key(outsider.get_acls(path)[0]) == acl_key(OPEN_ACL_UNSAFE), path
        finally:
            await zk.close()

    run(scenario())


def test_set_acl_without_credentials_is_refused(zk_connect: str) -> None:
    with pytest.raises(ValueError, match=r"zookeeper\.set\.acl"):
        run(ZkClient.connect(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS, set_acl=True))
