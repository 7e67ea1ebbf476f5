"""SCRAM credentials on a real ZooKeeper (tidelog.zk.users): Kafka's
``/config/users`` JSON and ``/config/changes`` notifications, compare-and-set writes, the
watch-driven cache, and the admin APIs plus a SCRAM login end to end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.static.primitive import i8, i32

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.principal import KafkaPrincipal
from tidelog.security.scram import ScramClient, ScramMechanism, make_credential, salted_password
from tidelog.server.apis.scram_apis import ScramCredentialApis
from tidelog.server.network.sasl import SaslAuthenticatorFactory
from tidelog.zk import ZkClient
from tidelog.zk.users import (
    UserCredentialCache,
    ZkUserCredentialStore,
    encode_user_config,
    sanitize,
)
from tidelog.zk.znodes import CONFIG_CHANGES_PATH

pytestmark = pytest.mark.integration

T = TypeVar("T")
SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
CRED_256 = make_credential(SHA256, "alice-secret", salt=b"salt-256")
CRED_512 = make_credential(SHA512, "alice-secret", iterations=8192, salt=b"salt-512")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


@asynccontextmanager
async def session(zk_connect: str) -> AsyncIterator[ZkClient]:
    zk = await ZkClient.connect(zk_connect, session_timeout_ms=4000)
    try:
        yield zk
    finally:
        await zk.close()


@pytest.fixture
def raw(zk_connect: str) -> Iterator[Callable[[str], Any]]:
    """``raw(path)`` -> (data, stat) under the test's chroot (None when absent), plus
    ``raw.kz`` / ``raw.root`` for writes."""
    hosts, chroot = zk_connect.split("/", 1)
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    root = f"/{chroot}"
    client.ensure_path(root)

    def read(path: str) -> Any:
        return client.exists(root + path) and client.get(root + path)

    read.kz = client  # type: ignore[attr-defined]
    read.root = root  # type: ignore[attr-defined]
    try:
        yield read
    finally:
        client.stop()
        client.close()


def user_changes(raw: Any) -> list[bytes]:
    kz, root = raw.kz, raw.root
    names = sorted(kz.get_children(root + CONFIG_CHANGES_PATH))
    out = [kz.get(f"{root}{CONFIG_CHANGES_PATH}/{n}")[0] for n in names]
    return [data for data in out if b'"users/' in data]


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


# -- the store ------------------------------------------------------------------------------------


def test_upsert_writes_kafkas_json_and_a_change_notification(zk_connect: str, raw: Any) -> None:
    async def body() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            assert await store.get("alice") == {}
            await store.upsert("alice", SHA256, CRED_256)
            assert await store.get("alice") == {SHA256: CRED_256}

    run(body())
    data, stat = raw("/config/users/alice")
    assert data == (
        b'{"version":1,"config":{"SCRAM-SHA-256":"' + CRED_256.format().encode() + b'"}}'
    )
    assert CRED_256.format().startswith("salt=c2FsdC0yNTY=,stored_key=")
    assert CRED_256.format().endswith(",iterations=4096")
    assert stat.version == 0
    assert user_changes(raw) == [b'{"version":2,"entity_path":"users/alice"}']

    async def second() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            await store.upsert("alice", SHA512, CRED_512)
            assert await store.get("alice") == {SHA256: CRED_256, SHA512: CRED_512}
            assert await store.list_users() == {"alice": {SHA256: CRED_256, SHA512: CRED_512}}

    run(second())
    data, stat = raw("/config/users/alice")
    assert json.loads(data) == {
        "version": 1,
        "config": {"SCRAM-SHA-256": CRED_256.format(), "SCRAM-SHA-512": CRED_512.format()},
    }
    assert stat.version == 1  # one compare-and-set on top of the create
    assert len(user_changes(raw)) == 2


def test_delete(zk_connect: str, raw: Any) -> None:
    async def body() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            await store.upsert("alice", SHA256, CRED_256)
            await store.upsert("alice", SHA512, CRED_512)
            assert await store.delete("alice", SHA256)
            assert await store.get("alice") == {SHA512: CRED_512}
            assert not await store.delete("alice", SHA256)  # already gone
            assert not await store.delete("nobody", SHA256)
            assert await store.delete("alice", SHA512)
            assert await store.get("alice") == {}
            assert await store.list_users() == {}

    run(body())
    assert not raw("/config/users/alice")  # the last mechanism took the znode with it
    assert raw("/config/users")  # the parent stays
    changes = user_changes(raw)
    assert len(changes) == 4  # two upserts, two deletes; failed deletes post nothing
    assert set(changes) == {b'{"version":2,"entity_path":"users/alice"}'}


def test_other_user_configs_are_kept(zk_connect: str, raw: Any) -> None:
    # A user quota Kafka's kafka-configs.sh may have set.
    raw.kz.create(
        raw.root + "/config/users/bob",
        encode_user_config({"producer_byte_rate": "1024"}),
        makepath=True,
    )

    async def body() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            assert await store.list_users() == {}  # bob has no credential
            await store.upsert("bob", SHA256, CRED_256)
            assert json.loads(raw("/config/users/bob")[0])["config"] == {
                "SCRAM-SHA-256": CRED_256.format(),
                "producer_byte_rate": "1024",
            }
            assert await store.delete("bob", SHA256)

    run(body())
    assert json.loads(raw("/config/users/bob")[0]) == {
        "version": 1,
        "config": {"producer_byte_rate": "1024"},
    }


def test_user_names_are_sanitized_as_kafka_does(zk_connect: str, raw: Any) -> None:
    user = "we ird/ü*~+.-_"
    assert sanitize(user) == "we%20ird%2F%C3%BC%2A%7E%2B.-_"

    async def body() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            await store.upsert(user, SHA256, CRED_256)
            assert list(await store.list_users()) == [user]

    run(body())
    assert raw("/config/users/" + sanitize(user))
    assert user_changes(raw) == [
        b'{"version":2,"entity_path":"users/we%20ird%2F%C3%BC%2A%7E%2B.-_"}'
    ]


def test_concurrent_writers_lose_nothing(zk_connect: str) -> None:
    async def body() -> None:
        async with session(zk_connect) as zk1, session(zk_connect) as zk2:
            one, two = ZkUserCredentialStore(zk1), ZkUserCredentialStore(zk2)
            rounds = 8
            creds_256 = [make_credential(SHA256, "a", salt=b"a%d" % i) for i in range(rounds)]
            creds_512 = [make_credential(SHA512, "b", salt=b"b%d" % i) for i in range(rounds)]

            async def writes(
                store: ZkUserCredentialStore, mechanism: ScramMechanism, creds: list[Any]
            ) -> None:
                for cred in creds:
                    await store.upsert("racer", mechanism, cred)

            # Two sessions race on one user's znode, each rotating its own mechanism: a blind
            # write would drop the other's key; compare-and-set + re-read never does.
            await asyncio.gather(writes(one, SHA256, creds_256), writes(two, SHA512, creds_512))
            assert await one.get("racer") == {SHA256: creds_256[-1], SHA512: creds_512[-1]}

    run(body())


# -- the cache ------------------------------------------------------------------------------------


def test_cache_loads_then_follows_changes(zk_connect: str) -> None:
    async def body() -> None:
        async with session(zk_connect) as writer_zk, session(zk_connect) as broker_zk:
            writer = ZkUserCredentialStore(writer_zk)
            await writer.upsert("early", SHA256, CRED_256)
            cache = UserCredentialCache()
            changed: list[str] = []
            cache.on_change = changed.append
            await cache.start(broker_zk)
            try:
                # Loaded before start returned.
                assert cache.lookup("early", SHA256) == CRED_256
                assert cache.lookup("early", SHA512) is None
                assert cache.lookup("nobody", SHA256) is None
                # A new user, through another session.
                await writer.upsert("late", SHA512, CRED_512)
                await eventually(lambda: cache.lookup("late", SHA512) == CRED_512)
                # A changed credential.
                newer = make_credential(SHA256, "rotated")
                await writer.upsert("early", SHA256, newer)
                await eventually(lambda: cache.lookup("early", SHA256) == newer)
                # A removed mechanism, then a removed user.
                await writer.upsert("late", SHA256, CRED_256)
                await eventually(lambda: cache.lookup("late", SHA256) == CRED_256)
                assert await writer.delete("late", SHA512)
                await eventually(lambda: cache.lookup("late", SHA512) is None)
                assert cache.lookup("late", SHA256) == CRED_256
                assert await writer.delete("early", SHA256)
                await eventually(lambda: "early" not in cache.users())
                # And back again.
                await writer.upsert("early", SHA512, CRED_512)
                await eventually(lambda: cache.lookup("early", SHA512) == CRED_512)
                assert sorted(cache.users()) == ["early", "late"]
                assert "late" in changed
                assert "early" in changed
            finally:
                await cache.stop()

    run(body())


def test_cache_skips_a_corrupt_user(zk_connect: str, raw: Any) -> None:
    raw.kz.create(raw.root + "/config/users/broken", b"not json", makepath=True)
    raw.kz.create(
        raw.root + "/config/users/halfbad",
        encode_user_config({"SCRAM-SHA-256": "garbage", "SCRAM-SHA-512": CRED_512.format()}),
    )

    async def body() -> None:
        async with session(zk_connect) as zk:
            cache = UserCredentialCache()
            await cache.start(zk)
            try:
                assert cache.users() == {"halfbad": {SHA512: CRED_512}}
                await ZkUserCredentialStore(zk).upsert("fine", SHA256, CRED_256)
                await eventually(lambda: cache.lookup("fine", SHA256) == CRED_256)
            finally:
                await cache.stop()

    run(body())


# -- the admin APIs over ZooKeeper, then a login ---------------------------------------------------


def test_alter_describe_and_login(zk_connect: str) -> None:
    async def body() -> None:
        async with session(zk_connect) as zk:
            store = ZkUserCredentialStore(zk)
            cache = UserCredentialCache()
            await cache.start(zk)
            try:
                apis = ScramCredentialApis(store)
                handlers = apis.handlers()
                salt = b"kip-554-salt"
                upsert = alter_v0.ScramCredentialUpsertion(
                    name="alice",
                    mechanism=i8(2),
                    iterations=i32(4096),
                    salt=salt,
                    salted_password=salted_password(SHA512, "alice-secret", salt, 4096),
                )
                header = RequestHeader(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 1, "t")
                altered = await handlers[ApiKey.ALTER_USER_SCRAM_CREDENTIALS](
                    header,
                    alter_v0.AlterUserScramCredentialsRequest(upsertions=(upsert,), deletions=()),
                )
                assert [(r.user, int(r.error_code)) for r in altered.results] == [("alice", 0)]
                header = RequestHeader(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 2, "t")
                described = await handlers[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS](
                    header,
                    describe_v0.DescribeUserScramCredentialsRequest(
                        users=(describe_v0.UserName(name="alice"),)
                    ),
                )
                (result,) = described.results
                assert (result.user, int(result.error_code)) == ("alice", ErrorCode.NONE)
                assert [(int(i.mechanism), int(i.iterations)) for i in result.credential_infos] == [
                    (2, 4096)
                ]
                # The cache follows; a broker then authenticates alice from memory.
                await eventually(lambda: cache.lookup("alice", SHA512) is not None)
                auth = SaslAuthenticatorFactory(["SCRAM-SHA-512"], {}, cache.lookup).new("L")
                auth.handle_handshake(
                    1, handshake_v1.SaslHandshakeRequest(mechanism="SCRAM-SHA-512")
                )
                client = ScramClient(SHA512, "alice", "alice-secret")
                first = auth.handle_authenticate(
                    2, authenticate_v2.SaslAuthenticateRequest(auth_bytes=client.first_message())
                )
                final = auth.handle_authenticate(
                    2,
                    authenticate_v2.SaslAuthenticateRequest(
                        auth_bytes=client.receive(first.auth_bytes)
                    ),
                )
                client.receive_final(final.auth_bytes)
                assert auth.principal == KafkaPrincipal.user("alice")
            finally:
                await cache.stop()

    run(body())
