"""Named listeners on one broker process (issue 20): PLAINTEXT, SASL_SSL (PLAIN and SCRAM
in memory) and SSL with client certificates side by side, each answering Metadata with
its own port, each refusing what it must with a clear answer and a broker log line."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.sasl_handshake.v1 import request as sasl_handshake_v1

from tests.harness import BrokerProcess, free_port
from tidelog.client import Client
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import AuthenticationFailedError, ClientConnectionError
from tidelog.client.security_admin import ScramUpsertion, alter_user_scram_credentials
from tidelog.errors import ErrorCode
from tidelog.security.certs import generate_ca, generate_local_pki, issue_certificate, keystore_pem
from tidelog.security.client_config import ClientSecurity
from tidelog.security.scram import ScramMechanism

pytestmark = pytest.mark.integration

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_bob="bob-secret" user_admin="admin-secret";'
)


@dataclass(frozen=True)
class Listeners:
    broker: BrokerProcess
    plaintext: int
    sasl_ssl: int
    ssl: int
    ca: Path
    alice_keystore: Path


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    directory = tmp_path_factory.mktemp("listeners")
    pki = generate_local_pki(directory / "pki", brokers=[0], clients=["alice"])
    broker = BrokerProcess(directory / "broker")
    sasl_ssl, tls = free_port(), free_port()
    broker.properties.update(
        {
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{sasl_ssl},"
                f"SSL://127.0.0.1:{tls}"
            ),
            "ssl.keystore.location": str(pki.brokers[0]),
            "ssl.truststore.location": str(pki.ca_cert),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        }
    )
    broker.start()
    try:
        yield Listeners(broker, broker.port, sasl_ssl, tls, pki.ca_cert, pki.clients["alice"])
    finally:
        broker.stop()


def _sasl(ca: Path, mechanism: str, user: str, password: str) -> ClientSecurity:
    return ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.truststore.location": str(ca),
        }
    )


async def _brokers_seen(port: int, security: ClientSecurity) -> list[tuple[str, int]]:
    async with Client(f"127.0.0.1:{port}", security=security) as client:
        metadata = await client.metadata()
        return [(b.host, b.port) for b in metadata.brokers.values()]


def test_each_listener_answers_metadata_with_its_own_port(listeners: Listeners) -> None:
    plain = asyncio.run(_brokers_seen(listeners.plaintext, ClientSecurity()))
    sasl = asyncio.run(
        _brokers_seen(listeners.sasl_ssl, _sasl(listeners.ca, "PLAIN", "bob", "bob-secret"))
    )
    mtls = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(listeners.ca),
            "ssl.keystore.location": str(listeners.alice_keystore),
        }
    )
    tls = asyncio.run(_brokers_seen(listeners.ssl, mtls))
    assert plain == [("127.0.0.1", listeners.plaintext)]
    assert sasl == [("127.0.0.1", listeners.sasl_ssl)]
    assert tls == [("127.0.0.1", listeners.ssl)]


def test_scram_users_made_through_the_api_can_log_in(listeners: Listeners) -> None:
    async def run() -> list[tuple[str, int]]:
        async with Client(f"127.0.0.1:{listeners.plaintext}") as admin:
            results = await alter_user_scram_credentials(
                admin,
                upsertions=[ScramUpsertion("carol", ScramMechanism.SCRAM_SHA_512, "carol-pw")],
            )
            assert all(r.error_code == ErrorCode.NONE for r in results.values()), results
        security = _sasl(listeners.ca, "SCRAM-SHA-512", "carol", "carol-pw")
        return await _brokers_seen(listeners.sasl_ssl, security)

    assert asyncio.run(run()) == [("127.0.0.1", listeners.sasl_ssl)]


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "message"),
    [
        ("PLAIN", "bob", "wrong", "Invalid username or password"),
        ("PLAIN", "nobody", "x", "Invalid username or password"),
        ("SCRAM-SHA-256", "nobody", "x", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ],
)
def test_a_refused_login_is_an_authentication_error_and_a_log_line(
    listeners: Listeners, mechanism: str, user: str, password: str, message: str
) -> None:
    security = _sasl(listeners.ca, mechanism, user, password)
    with pytest.raises(AuthenticationFailedError, match=message):
        asyncio.run(_brokers_seen(listeners.sasl_ssl, security))
    assert f"mechanism {mechanism}, user '{user}'" in listeners.broker.output()


def test_a_client_that_does_not_trust_the_broker_is_told_so(
    listeners: Listeners, tmp_path: Path
) -> None:
    _key, other_ca = generate_ca("another CA")
    (tmp_path / "other.pem").write_bytes(other_ca)
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "bob-secret",
            "ssl.truststore.location": str(tmp_path / "other.pem"),
        }
    )
    with pytest.raises(
        AuthenticationFailedError, match=r"TLS handshake with .* failed: self-signed certificate"
    ):
        asyncio.run(_brokers_seen(listeners.sasl_ssl, security))


def test_an_ssl_listener_requiring_certificates_refuses_one_from_another_ca(
    listeners: Listeners, tmp_path: Path
) -> None:
    ca_key, ca_cert = generate_ca("mallory's CA")
    key, cert = issue_certificate(ca_key, ca_cert, "mallory", server=False, client=True)
    (tmp_path / "mallory.pem").write_bytes(keystore_pem(key, cert))
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(listeners.ca),
            "ssl.keystore.location": str(tmp_path / "mallory.pem"),
        }
    )
    with pytest.raises((AuthenticationFailedError, ClientConnectionError)):
        asyncio.run(_brokers_seen(listeners.ssl, security))
    assert "on listener SSL: TLS handshake failed" in listeners.broker.output()


def _frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    client_id = b"raw"
    payload = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def _tls_socket(listeners: Listeners) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(listeners.ca))
    raw = socket.create_connection(("127.0.0.1", listeners.sasl_ssl), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_a_request_before_the_sasl_login_closes_the_connection(listeners: Listeners) -> None:
    with _tls_socket(listeners) as sock:
        # Metadata v4 with no topics (null array), before any SaslHandshake.
        sock.sendall(_frame(3, 4, struct.pack(">i?", -1, False)))
        assert sock.recv(4) == b""  # closed, nothing answered
    assert "METADATA request before SASL authentication on listener SASL_SSL" in (
        listeners.broker.output()
    )


def test_sasl_on_a_plaintext_listener_is_an_illegal_sasl_state(listeners: Listeners) -> None:
    async def run() -> int:
        conn = await BrokerConnection.connect("127.0.0.1", listeners.plaintext)
        try:
            response = await conn.send(sasl_handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
            return int(response.error_code)
        finally:
            await conn.close()

    assert asyncio.run(run()) == ErrorCode.ILLEGAL_SASL_STATE


def test_a_plaintext_client_on_a_tls_port_is_closed_and_logged(listeners: Listeners) -> None:
    with socket.create_connection(("127.0.0.1", listeners.sasl_ssl), timeout=10) as sock:
        sock.sendall(_frame(18, 0))
        assert sock.recv(1024)[:1] in (b"\x15", b"")  # a TLS alert record, or just closed
    assert "on listener SASL_SSL: TLS handshake failed" in listeners.broker.output()
    # And the listener still serves.
    sasl = _sasl(listeners.ca, "PLAIN", "bob", "bob-secret")
    assert asyncio.run(_brokers_seen(listeners.sasl_ssl, sasl)) == [
        ("127.0.0.1", listeners.sasl_ssl)
    ]


def test_before_the_login_a_frame_may_not_exceed_sasl_server_max_receive_size(
    listeners: Listeners,
) -> None:
    with _tls_socket(listeners) as sock:
        sock.sendall(struct.pack(">i", 600_000) + b"\0" * 64)  # > 524288, before any login
        assert sock.recv(4) == b""  # closed without buffering the 600 kB
    assert (
        "frame size 600000 before SASL authentication exceeds "
        "sasl.server.max.receive.size=524288" in listeners.broker.output()
    )
    # A logged-in client sends requests of any size (up to socket.request.max.bytes).
    sasl = _sasl(listeners.ca, "PLAIN", "bob", "bob-secret")
    assert asyncio.run(_brokers_seen(listeners.sasl_ssl, sasl)) == [
        ("127.0.0.1", listeners.sasl_ssl)
    ]
