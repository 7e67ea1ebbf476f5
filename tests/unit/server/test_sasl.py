"""The broker's SASL authenticator (tidelog.server.network.sasl), the SCRAM credential admin APIs
(tidelog.server.apis.scram_apis) over an in-memory store, and the client's ``sasl_authenticate``
(tidelog.client.sasl) against the authenticator over a real loopback socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.schema.sasl_authenticate.v0 import request as authenticate_v0
from kio.schema.sasl_authenticate.v1 import request as authenticate_v1
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v0 import request as handshake_v0
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.static.primitive import i8, i32

from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import AuthenticationFailedError, ClientConnectionError
from tidelog.client.sasl import sasl_authenticate
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import (
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_response,
)
from tidelog.protocol.framing import FrameDecoder
from tidelog.security.errors import SecurityConfigError
from tidelog.security.principal import KafkaPrincipal
from tidelog.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    make_credential,
    salted_password,
)
from tidelog.server.apis.scram_apis import ScramCredentialApis
from tidelog.server.auth.credentials import MemoryUserCredentialStore
from tidelog.server.network.connection import CloseConnection
from tidelog.server.network.sasl import SaslAuthenticatorFactory, SaslServerAuthenticator

T = TypeVar("T")

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_USERS = {"SASL_PLAINTEXT": {"alice": "alice-secret", "admin": "admin-secret"}}
SCRAM = MemoryUserCredentialStore(
    {
        "bob": {SHA256: make_credential(SHA256, "bob-secret")},
        "carol": {SHA512: make_credential(SHA512, "carol-secret")},
    }
)
FAILED = "Authentication failed during authentication due to invalid credentials with SASL "
INVALID_PLAIN = "Authentication failed: Invalid username or password"


def factory(
    mechanisms: tuple[str, ...] = ALL, max_receive_size: int = 524288
) -> SaslAuthenticatorFactory:
    return SaslAuthenticatorFactory(mechanisms, PLAIN_USERS, SCRAM.lookup, max_receive_size)


def new(mechanisms: tuple[str, ...] = ALL, **kwargs: Any) -> SaslServerAuthenticator:
    return factory(mechanisms, **kwargs).new("SASL_PLAINTEXT")


def handshake(auth: SaslServerAuthenticator, mechanism: str, version: int = 1) -> Any:
    request = (handshake_v0 if version == 0 else handshake_v1).SaslHandshakeRequest
    response = auth.handle_handshake(version, request(mechanism=mechanism))
    encode_response(RequestHeader(ApiKey.SASL_HANDSHAKE, version, 1, "t"), response)
    return response


def authenticate(auth: SaslServerAuthenticator, token: bytes, version: int = 2) -> Any:
    module = {0: authenticate_v0, 1: authenticate_v1, 2: authenticate_v2}[version]
    response = auth.handle_authenticate(version, module.SaslAuthenticateRequest(auth_bytes=token))
    encode_response(RequestHeader(ApiKey.SASL_AUTHENTICATE, version, 1, "t"), response)
    return response


def scram_login(
    auth: SaslServerAuthenticator,
    mechanism: ScramMechanism,
    user: str,
    password: str,
    version: int = 2,
) -> Any:
    """A full exchange over SaslAuthenticate; the last response."""
    client = ScramClient(mechanism, user, password)
    first = authenticate(auth, client.first_message(), version)
    if first.error_code != ErrorCode.NONE:
        return first
    final = authenticate(auth, client.receive(first.auth_bytes), version)
    if final.error_code == ErrorCode.NONE:
        client.receive_final(final.auth_bytes)
        assert client.complete
    return final


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="tidelog.server.network.sasl"):
        yield caplog


def failure_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tidelog.server.network.sasl" and r.levelno >= logging.INFO
    ]


# -- the factory ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanisms", "size", "key"),
    [
        (("GSSAPI",), 1, "sasl.enabled.mechanisms"),
        (("PLAIN", "OAUTHBEARER"), 1, "sasl.enabled.mechanisms"),
        ((), 1, "sasl.enabled.mechanisms"),
        (("PLAIN",), 0, "sasl.server.max.receive.size"),
    ],
)
def test_factory_refuses_bad_settings(mechanisms: tuple[str, ...], size: int, key: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        SaslAuthenticatorFactory(mechanisms, {}, SCRAM.lookup, size)
    assert info.value.key == key


def test_plain_users_are_per_listener() -> None:
    auth = factory().new("OTHER")
    handshake(auth, "PLAIN")
    response = authenticate(auth, b"\0alice\0alice-secret")
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert response.error_message == INVALID_PLAIN


# -- PLAIN ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_success(version: int, caplog_info: pytest.LogCaptureFixture) -> None:
    auth = new()
    assert (auth.complete, auth.failed, auth.principal) == (False, False, None)
    response = handshake(auth, "PLAIN")
    assert response.error_code == ErrorCode.NONE
    assert list(response.mechanisms) == list(ALL)
    assert not auth.expects_raw_token
    response = authenticate(auth, b"\0alice\0alice-secret", version)
    assert response.error_code == ErrorCode.NONE
    assert response.error_message is None
    assert response.auth_bytes == b""
    if version >= 1:
        assert response.session_lifetime.total_seconds() == 0
    assert auth.complete
    assert not auth.failed
    assert auth.principal == KafkaPrincipal.user("alice")
    assert failure_logs(caplog_info) == []


@pytest.mark.parametrize(
    ("token", "message", "reason"),
    [
        (b"\0alice\0wrong", INVALID_PLAIN, "wrong password"),
        (b"\0mallory\0whatever", INVALID_PLAIN, "unknown user"),
        (
            b"admin\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
            "authorization id",
        ),
        (b"\0alice\0", "Authentication failed: password not specified", "password not"),
        (b"garbage", "Invalid SASL/PLAIN response: expected 3 tokens, got 1", "expected 3"),
    ],
)
def test_plain_failures(
    token: bytes, message: str, reason: str, caplog_info: pytest.LogCaptureFixture
) -> None:
    auth = new()
    handshake(auth, "PLAIN")
    response = authenticate(auth, token)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert response.error_message == message
    assert auth.failed
    assert not auth.complete
    assert auth.principal is None
    logs = failure_logs(caplog_info)
    assert len(logs) == 1
    assert "mechanism PLAIN" in logs[0]
    assert reason in logs[0]
    assert "SASL_PLAINTEXT" in logs[0]
    # Never the password, whatever was sent.
    assert "alice-secret" not in logs[0]
    assert "whatever" not in logs[0]


# -- SCRAM ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [(SHA256, "bob", "bob-secret"), (SHA512, "carol", "carol-secret")],
)
def test_scram_success(version: int, mechanism: ScramMechanism, user: str, password: str) -> None:
    auth = new()
    assert handshake(auth, mechanism.value).error_code == ErrorCode.NONE
    response = scram_login(auth, mechanism, user, password, version)
    assert response.error_code == ErrorCode.NONE
    assert response.auth_bytes.startswith(b"v=")
    assert auth.complete
    assert auth.principal == KafkaPrincipal.user(user)


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "reason"),
    [
        (SHA256, "bob", "Pw-Guess-1", "proof"),
        (SHA256, "nobody", "Pw-Guess-2", "unknown user"),
        (SHA256, "carol", "carol-secret", "unknown user"),  # has only SHA-512
        (SHA512, "bob", "bob-secret", "unknown user"),
    ],
)
def test_scram_failures(
    mechanism: ScramMechanism,
    user: str,
    password: str,
    reason: str,
    caplog_info: pytest.LogCaptureFixture,
) -> None:
    auth = new()
    handshake(auth, mechanism.value)
    response = scram_login(auth, mechanism, user, password)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert response.error_message == FAILED + f"mechanism {mechanism.value}"
    assert auth.failed
    assert auth.principal is None
    logs = failure_logs(caplog_info)
    assert len(logs) == 1
    assert reason in logs[0]
    assert f"user {user!r}" in logs[0]
    assert password not in logs[0]


def test_scram_malformed_first_message() -> None:
    auth = new()
    handshake(auth, "SCRAM-SHA-256")
    response = authenticate(auth, b"y,,n=bob,r=abc")
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert response.error_message == FAILED + "mechanism SCRAM-SHA-256"
    assert auth.failed


def test_scram_lookup_is_read_per_login() -> None:
    store = MemoryUserCredentialStore()
    auth = SaslAuthenticatorFactory(["SCRAM-SHA-256"], {}, store.lookup).new("L")
    handshake(auth, "SCRAM-SHA-256")
    assert scram_login(auth, SHA256, "dave", "pw").error_code == 58
    asyncio.run(store.alter("dave", {SHA256: make_credential(SHA256, "pw")}, ()))
    auth = SaslAuthenticatorFactory(["SCRAM-SHA-256"], {}, store.lookup).new("L")
    handshake(auth, "SCRAM-SHA-256")
    assert scram_login(auth, SHA256, "dave", "pw").error_code == ErrorCode.NONE


# -- the handshake --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_unsupported_mechanism(version: int, caplog_info: pytest.LogCaptureFixture) -> None:
    auth = new(("PLAIN",))
    response = handshake(auth, "SCRAM-SHA-256", version)
    assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert list(response.mechanisms) == ["PLAIN"]
    assert auth.failed
    assert not auth.expects_raw_token
    assert len(failure_logs(caplog_info)) == 1
    # Unknown everywhere, too.
    other = new()
    assert handshake(other, "GSSAPI").error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert other.failed


def test_second_handshake_during_the_exchange_is_illegal() -> None:
    auth = new()
    handshake(auth, "SCRAM-SHA-256")
    authenticate(auth, ScramClient(SHA256, "bob", "x").first_message())
    response = handshake(auth, "PLAIN")
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert auth.failed


def test_authenticate_before_handshake_is_illegal() -> None:
    auth = new()
    response = authenticate(auth, b"\0alice\0alice-secret")
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert response.error_message == (
        "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake."
    )
    assert auth.failed
    assert auth.principal is None


def test_after_authentication_handshake_and_authenticate_are_illegal_but_harmless() -> None:
    auth = new()
    handshake(auth, "PLAIN")
    authenticate(auth, b"\0alice\0alice-secret")
    assert handshake(auth, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    response = authenticate(auth, b"\0alice\0alice-secret")
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert response.error_message == (
        "SaslAuthenticate request received after successful authentication"
    )
    assert auth.complete
    assert not auth.failed
    assert auth.principal == KafkaPrincipal.user("alice")


def test_anything_after_a_failure_stays_failed() -> None:
    auth = new()
    handshake(auth, "PLAIN")
    authenticate(auth, b"\0alice\0nope")
    assert authenticate(auth, b"\0alice\0alice-secret").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert handshake(auth, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert auth.failed
    assert auth.principal is None


# -- size limit -----------------------------------------------------------------------------------


def test_token_larger_than_max_receive_size() -> None:
    auth = new(max_receive_size=64)
    handshake(auth, "PLAIN")
    response = authenticate(auth, b"\0alice\0" + b"x" * 100)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert response.error_message == (
        "Invalid SASL token size 107 larger than sasl.server.max.receive.size 64"
    )
    assert auth.failed
    # Exactly at the limit is fine.
    auth = new(max_receive_size=len(b"\0alice\0alice-secret"))
    handshake(auth, "PLAIN")
    assert authenticate(auth, b"\0alice\0alice-secret").error_code == ErrorCode.NONE


# -- the raw (v0) exchange ------------------------------------------------------------------------


def flags(auth: SaslServerAuthenticator) -> tuple[bool, bool, bool]:
    """(complete, failed, expects_raw_token)."""
    return auth.complete, auth.failed, auth.expects_raw_token


def test_raw_plain() -> None:
    auth = new()
    assert handshake(auth, "PLAIN", version=0).error_code == ErrorCode.NONE
    assert flags(auth) == (False, False, True)
    assert auth.raw_token(b"\0alice\0alice-secret") == b""
    assert flags(auth) == (True, False, False)
    assert auth.principal == KafkaPrincipal.user("alice")


def test_raw_scram() -> None:
    auth = new()
    handshake(auth, "SCRAM-SHA-512", version=0)
    client = ScramClient(SHA512, "carol", "carol-secret")
    server_first = auth.raw_token(client.first_message())
    assert flags(auth) == (False, False, True)
    client.receive_final(auth.raw_token(client.receive(server_first)))
    assert flags(auth) == (True, False, False)
    assert auth.principal == KafkaPrincipal.user("carol")


def test_raw_failures_close_the_connection() -> None:
    auth = new()
    handshake(auth, "PLAIN", version=0)
    with pytest.raises(CloseConnection):
        auth.raw_token(b"\0alice\0wrong")
    assert auth.failed
    assert not auth.expects_raw_token
    # Too large.
    auth = new(max_receive_size=8)
    handshake(auth, "PLAIN", version=0)
    with pytest.raises(CloseConnection):
        auth.raw_token(b"\0alice\0alice-secret")
    assert auth.failed
    # Without a v0 handshake there is no raw exchange.
    with pytest.raises(CloseConnection):
        new().raw_token(b"\0alice\0alice-secret")


def test_saslauthenticate_after_a_v0_handshake_is_illegal() -> None:
    auth = new()
    handshake(auth, "PLAIN", version=0)
    response = authenticate(auth, b"\0alice\0alice-secret")
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert auth.failed


# -- DescribeUserScramCredentials / AlterUserScramCredentials ------------------------------------


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def call(apis: ScramCredentialApis, api: ApiKey, body: Any) -> Any:
    async def main() -> Any:
        header = RequestHeader(int(api), 0, 1, "test")
        response = await apis.handlers()[api](header, body)
        encode_response(header, response)
        return response

    return asyncio.run(main())


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> Any:
    salt = b"salt-" + name.encode()
    scram = ScramMechanism.from_type(mechanism) or SHA256
    salted = salted_password(scram, password, salt, max(iterations, 1))
    return alter_v0.ScramCredentialUpsertion(
        name=name,
        mechanism=i8(mechanism),
        iterations=i32(iterations),
        salt=salt,
        salted_password=salted,
    )


def deletion(name: str, mechanism: int = 1) -> Any:
    return alter_v0.ScramCredentialDeletion(name=name, mechanism=i8(mechanism))


def alter(
    apis: ScramCredentialApis, ups: Sequence[Any], dels: Sequence[Any] = ()
) -> dict[str, Any]:
    body = alter_v0.AlterUserScramCredentialsRequest(upsertions=tuple(ups), deletions=tuple(dels))
    response = call(apis, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
    return {r.user: (int(r.error_code), r.error_message) for r in response.results}


def describe(apis: ScramCredentialApis, users: list[str] | None) -> Any:
    names = None if users is None else tuple(describe_v0.UserName(name=u) for u in users)
    body = describe_v0.DescribeUserScramCredentialsRequest(users=names)
    return call(apis, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)


def infos(result: Any) -> list[tuple[int, int]]:
    return [(int(i.mechanism), int(i.iterations)) for i in result.credential_infos]


def test_alter_then_describe_and_login() -> None:
    store = MemoryUserCredentialStore()
    apis = ScramCredentialApis(store)
    assert alter(apis, [upsertion("alice", 1, 8192, "a-pw"), upsertion("alice", 2, 4096, "a")]) == {
        "alice": (0, None)
    }
    assert alter(apis, [upsertion("bob", 1)]) == {"bob": (0, None)}
    everyone = describe(apis, None)
    assert everyone.error_code == ErrorCode.NONE
    assert [(r.user, int(r.error_code), infos(r)) for r in everyone.results] == [
        ("alice", 0, [(1, 8192), (2, 4096)]),
        ("bob", 0, [(1, 4096)]),
    ]
    assert [r.user for r in describe(apis, []).results] == ["alice", "bob"]
    # The derived credential logs in with the password the client salted.
    auth = SaslAuthenticatorFactory(["SCRAM-SHA-256"], {}, store.lookup).new("L")
    handshake(auth, "SCRAM-SHA-256")
    assert scram_login(auth, SHA256, "alice", "a-pw").error_code == ErrorCode.NONE
    # Deleting one mechanism, then the other: the user is gone.
    assert alter(apis, [], [deletion("alice", 1)]) == {"alice": (0, None)}
    assert infos(describe(apis, ["alice"]).results[0]) == [(2, 4096)]
    assert alter(apis, [], [deletion("alice", 2)]) == {"alice": (0, None)}
    assert [r.user for r in describe(apis, None).results] == ["bob"]


def test_describe_named_users() -> None:
    store = MemoryUserCredentialStore({"bob": {SHA256: make_credential(SHA256, "x")}})
    response = describe(ScramCredentialApis(store), ["bob", "nobody", "", "twice", "twice"])
    assert response.error_code == ErrorCode.NONE
    got = [(r.user, int(r.error_code), r.error_message, infos(r)) for r in response.results]
    assert got == [
        ("bob", 0, None, [(1, 4096)]),
        (
            "nobody",
            91,
            "Attempt to describe a user credential that does not exist: nobody",
            [],
        ),
        ("", 91, "An empty user name is illegal", []),
        (
            "twice",
            92,
            "Cannot describe SCRAM credentials for the same user twice in a single request: twice",
            [],
        ),
    ]


def test_alter_refusals() -> None:
    store = MemoryUserCredentialStore({"bob": {SHA256: make_credential(SHA256, "x")}})
    apis = ScramCredentialApis(store)
    results = alter(
        apis,
        [
            upsertion("", 1),
            upsertion("few", 1, 4095),
            upsertion("many", 2, 16385),
            upsertion("unknown-mech", 3),
            upsertion("dup", 1),
            upsertion("dup", 1),
            upsertion("mixed", 1, 4096),
            upsertion("mixed", 2, 100),  # one bad entry fails the user
            upsertion("ok", 2, 16384),
            upsertion("updel", 1),
        ],
        [
            deletion("bob", 2),  # bob has no SHA-512 credential
            deletion("ghost", 1),
            deletion("updel", 1),
            deletion("", 2),
            deletion("badmech", 0),
        ],
    )
    assert results == {
        "": (93, "Username must not be empty"),
        "few": (93, "Too few iterations"),
        "many": (93, "Too many iterations"),
        "unknown-mech": (33, "Unknown SCRAM mechanism"),
        "badmech": (33, "Unknown SCRAM mechanism"),
        "dup": (92, "A user credential cannot be altered twice in the same request"),
        "updel": (92, "A user credential cannot be altered twice in the same request"),
        "mixed": (93, "Too few iterations"),
        "ok": (0, None),
        "bob": (91, "Attempt to delete a user credential that does not exist"),
        "ghost": (91, "Attempt to delete a user credential that does not exist"),
    }
    users = run(store.list_users())
    assert sorted(users) == ["bob", "ok"]
    assert set(users["bob"]) == {SHA256}  # untouched


def test_cluster_authorization() -> None:
    store = MemoryUserCredentialStore({"bob": {SHA256: make_credential(SHA256, "x")}})
    asked: list[str] = []

    def deny(operation: str) -> bool:
        asked.append(operation)
        return False

    apis = ScramCredentialApis(store, authorize_cluster=deny)
    response = describe(apis, ["bob", "carol"])
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert response.error_message == "Cluster authorization failed."
    assert [(r.user, int(r.error_code), r.error_message) for r in response.results] == [
        ("bob", 31, "Cluster authorization failed."),
        ("carol", 31, "Cluster authorization failed."),
    ]
    assert describe(apis, None).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert alter(apis, [upsertion("zed")], [deletion("bob")]) == {
        "bob": (31, "Cluster authorization failed."),
        "zed": (31, "Cluster authorization failed."),
    }
    assert asked == ["DESCRIBE", "DESCRIBE", "ALTER"]
    assert set(run(store.list_users())) == {"bob"}


def test_not_controller() -> None:
    apis = ScramCredentialApis(MemoryUserCredentialStore(), is_controller=lambda: False)
    assert alter(apis, [upsertion("zed")]) == {
        "zed": (41, "This is not the correct controller for this cluster.")
    }


class BrokenStore(MemoryUserCredentialStore):
    async def get(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        raise RuntimeError("zookeeper is away")

    async def alter(self, user: str, upsertions: Mapping[Any, Any], deletions: Any) -> bool:
        raise RuntimeError("zookeeper is away")

    async def list_users(self) -> dict[str, dict[ScramMechanism, ScramCredential]]:
        raise RuntimeError("zookeeper is away")


def test_store_failures_are_unknown_server_error() -> None:
    apis = ScramCredentialApis(BrokenStore())
    assert alter(apis, [upsertion("zed")])["zed"][0] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert int(describe(apis, ["zed"]).results[0].error_code) == ErrorCode.UNKNOWN_SERVER_ERROR
    assert describe(apis, None).error_code == ErrorCode.UNKNOWN_SERVER_ERROR


# -- the client against the authenticator, over loopback ------------------------------------------

SASL_TABLE = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}


class SaslBroker:
    """Answers ApiVersions, SaslHandshake and SaslAuthenticate through one authenticator
    per connection; closes after a failure, as the broker's dispatcher does."""

    def __init__(self, table: Mapping[ApiKey, tuple[int, int]] = SASL_TABLE) -> None:
        self.table = table
        self.factory = factory()
        self.authenticators: list[SaslServerAuthenticator] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> SaslBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await self.server.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        auth = self.factory.new("SASL_PLAINTEXT")
        self.authenticators.append(auth)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for payload in decoder.feed(data):
                    header, body = decode_request(payload, self.table)
                    handle: Callable[[int, Any], Any]
                    if header.api_key == ApiKey.API_VERSIONS:
                        response = api_versions_response(header.api_version, self.table)
                    else:
                        handle = (
                            auth.handle_handshake
                            if header.api_key == ApiKey.SASL_HANDSHAKE
                            else auth.handle_authenticate
                        )
                        response = handle(header.api_version, body)
                    writer.write(encode_response(header, response))
                    await writer.drain()
                    if auth.failed:
                        return
        finally:
            writer.close()


async def connect(broker: SaslBroker) -> BrokerConnection:
    return await BrokerConnection.connect("127.0.0.1", broker.port, request_timeout_s=5)


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", "alice-secret"),
        ("SCRAM-SHA-256", "bob", "bob-secret"),
        ("SCRAM-SHA-512", "carol", "carol-secret"),
    ],
)
def test_client_authenticates(mechanism: str, user: str, password: str) -> None:
    async def main() -> None:
        async with SaslBroker() as broker:
            conn = await connect(broker)
            try:
                await sasl_authenticate(conn, mechanism=mechanism, username=user, password=password)
            finally:
                await conn.close()
            assert broker.authenticators[0].principal == KafkaPrincipal.user(user)

    asyncio.run(main())


@pytest.mark.parametrize("authenticate_max", [0, 1])
def test_client_uses_older_authenticate_versions(authenticate_max: int) -> None:
    async def main() -> None:
        table = {**SASL_TABLE, ApiKey.SASL_AUTHENTICATE: (0, authenticate_max)}
        async with SaslBroker(table) as broker:
            conn = await connect(broker)
            try:
                await sasl_authenticate(
                    conn, mechanism="SCRAM-SHA-256", username="bob", password="bob-secret"
                )
            finally:
                await conn.close()
            assert broker.authenticators[0].complete

    asyncio.run(main())


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "message"),
    [
        ("PLAIN", "alice", "wrong", INVALID_PLAIN),
        ("SCRAM-SHA-256", "bob", "wrong", FAILED + "mechanism SCRAM-SHA-256"),
        ("SCRAM-SHA-512", "bob", "bob-secret", FAILED + "mechanism SCRAM-SHA-512"),
    ],
)
def test_client_raises_the_brokers_message(
    mechanism: str, user: str, password: str, message: str
) -> None:
    async def main() -> None:
        async with SaslBroker() as broker:
            conn = await connect(broker)
            try:
                with pytest.raises(AuthenticationFailedError) as info:
                    await sasl_authenticate(
                        conn, mechanism=mechanism, username=user, password=password
                    )
            finally:
                await conn.close()
            assert str(info.value) == message

    asyncio.run(main())


def test_client_unsupported_mechanism() -> None:
    async def main() -> None:
        async with SaslBroker() as broker:
            broker.factory = factory(("SCRAM-SHA-512",))
            conn = await connect(broker)
            try:
                with pytest.raises(AuthenticationFailedError) as info:
                    await sasl_authenticate(conn, mechanism="PLAIN", username="a", password="b")
            finally:
                await conn.close()
            assert str(info.value) == (
                "Client SASL mechanism 'PLAIN' not enabled in the server, enabled mechanisms "
                "are [SCRAM-SHA-512]"
            )

    asyncio.run(main())


def test_client_refuses_an_unknown_mechanism_locally() -> None:
    async def main() -> None:
        async with SaslBroker() as broker:
            conn = await connect(broker)
            try:
                with pytest.raises(SecurityConfigError) as info:
                    await sasl_authenticate(conn, mechanism="GSSAPI", username="a", password="b")
            finally:
                await conn.close()
            assert info.value.key == "sasl.mechanism"
            assert broker.authenticators[0].mechanism is None

    asyncio.run(main())


def test_client_sees_a_closed_connection() -> None:
    async def main() -> None:
        async with SaslBroker() as broker:
            conn = await connect(broker)
            await conn.close()
            with pytest.raises(ClientConnectionError):
                await sasl_authenticate(conn, mechanism="PLAIN", username="a", password="b")

    asyncio.run(main())
