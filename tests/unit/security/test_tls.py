"""tidelog.security.tls: contexts from Kafka's ``ssl.*`` keys (and librdkafka's) proven by
real TLS handshakes over a socketpair (the principal from ``ssl_principal``); configuration
errors that name their key."""

from __future__ import annotations

import functools
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tidelog.security import certs, ssl_principal, tls
from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.principal import ANONYMOUS, KafkaPrincipal

# --- fixtures and the handshake harness --------------------------------------------------


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    ca_key_pem: bytes
    ca_cert_pem: bytes
    broker: Path  # keystore for 127.0.0.1 / localhost
    alice: Path  # client keystore, CN=Alice,OU=eng,O=tidelog
    other_ca: Path  # a CA that signed nothing here


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    local = certs.generate_local_pki(directory, brokers=[1], clients=[])
    ca_key_pem, ca_cert_pem = local.ca_key.read_bytes(), local.ca_cert.read_bytes()
    key, cert = certs.issue_certificate(
        ca_key_pem,
        ca_cert_pem,
        "Alice",
        server=False,
        extra_subject=(("OU", "eng"), ("O", "tidelog")),
    )
    alice = directory / "alice.pem"
    certs.write_file(alice, certs.keystore_pem(key, cert), private=True)
    _, other_cert = certs.generate_ca("some other CA")
    other_ca = directory / "other-ca.pem"
    other_ca.write_bytes(other_cert)
    return Pki(directory, local.ca_cert, ca_key_pem, ca_cert_pem, local.brokers[1], alice, other_ca)


def getter(props: Mapping[str, str]) -> Callable[[str], str]:
    return lambda key: props.get(key, "")


def server(**props: str) -> ssl.SSLContext:
    return tls.server_context(getter({k.replace("_", "."): v for k, v in props.items()}))


@dataclass
class Outcome:
    principal: KafkaPrincipal | None = None
    server_error: BaseException | None = None
    client_error: BaseException | None = None
    version: str | None = None
    cipher: str | None = None


def handshake(
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
    *,
    hostname: str = "localhost",
    rules: str = "DEFAULT",
) -> Outcome:
    """One TLS connection over a socketpair: the server thread records the peer's principal
    (or its error) and answers ``ok``; the client reads it (a TLS 1.3 client learns that the
    server refused its certificate only when it reads)."""
    outcome = Outcome()
    server_sock, client_sock = socket.socketpair()
    server_sock.settimeout(10)
    client_sock.settimeout(10)

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_sock, server_side=True) as conn:
                outcome.principal = ssl_principal.peer_principal(conn, rules)
                conn.sendall(b"ok")
        except (OSError, AuthenticationError) as exc:
            outcome.server_error = exc
        finally:
            server_sock.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(client_sock, server_hostname=hostname) as conn:
            outcome.version = conn.version()
            cipher = conn.cipher()
            outcome.cipher = cipher[0] if cipher else None
            if conn.recv(2) != b"ok":
                outcome.client_error = ConnectionError("the server closed the connection")
    except OSError as exc:
        outcome.client_error = exc
    finally:
        client_sock.close()
        thread.join(10)
    return outcome


def broker_context(pki: Pki, **extra: str) -> ssl.SSLContext:
    return server(ssl_keystore_location=str(pki.broker), **extra)


def trusting_client(pki: Pki, **extra: str) -> ssl.SSLContext:
    return tls.client_context_from_properties({"ssl.truststore.location": str(pki.ca), **extra})


# --- handshakes --------------------------------------------------------------------------


def test_handshake_succeeds_when_the_client_trusts_the_ca(pki: Pki) -> None:
    outcome = handshake(broker_context(pki), trusting_client(pki))
    assert outcome.client_error is None
    assert outcome.server_error is None
    assert outcome.principal == ANONYMOUS  # ssl.client.auth=none
    assert outcome.version == "TLSv1.3"


def test_handshake_with_librdkafka_names(pki: Pki) -> None:
    client = tls.client_context_from_properties(
        {
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.alice),
            "ssl.key.location": str(pki.alice),
        }
    )
    outcome = handshake(
        broker_context(pki, ssl_client_auth="required", ssl_truststore_location=str(pki.ca)),
        client,
    )
    assert outcome.client_error is None
    assert outcome.principal == KafkaPrincipal.user("CN=Alice,OU=eng,O=tidelog")


def test_handshake_fails_when_the_client_does_not_trust_the_ca(pki: Pki) -> None:
    client = tls.client_context_from_properties({"ssl.truststore.location": str(pki.other_ca)})
    outcome = handshake(broker_context(pki), client)
    error = outcome.client_error
    assert isinstance(error, ssl.SSLCertVerificationError)
    assert error.reason == "CERTIFICATE_VERIFY_FAILED"
    assert error.verify_code == 20
    assert error.verify_message == "unable to get local issuer certificate"
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.server_error.reason == "TLSV1_ALERT_UNKNOWN_CA"
    assert outcome.principal is None


def test_handshake_fails_for_an_expired_server_certificate(pki: Pki, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    key, cert = certs.issue_certificate(
        pki.ca_key_pem,
        pki.ca_cert_pem,
        "broker-expired",
        not_before=now - timedelta(days=30),
        not_after=now - timedelta(days=1),
    )
    keystore = tmp_path / "expired.pem"
    certs.write_file(keystore, certs.keystore_pem(key, cert), private=True)
    outcome = handshake(server(ssl_keystore_location=str(keystore)), trusting_client(pki))
    error = outcome.client_error
    assert isinstance(error, ssl.SSLCertVerificationError)
    assert error.verify_code == 10
    assert error.verify_message == "certificate has expired"


def test_host_name_verification_is_on_by_default_and_off_with_an_empty_algorithm(
    pki: Pki, tmp_path: Path
) -> None:
    key, cert = certs.issue_certificate(
        pki.ca_key_pem, pki.ca_cert_pem, "elsewhere", hosts=("broker.example",)
    )
    keystore = tmp_path / "elsewhere.pem"
    certs.write_file(keystore, certs.keystore_pem(key, cert), private=True)
    listener = server(ssl_keystore_location=str(keystore))

    outcome = handshake(listener, trusting_client(pki))
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert outcome.client_error.verify_code == 62  # X509_V_ERR_HOSTNAME_MISMATCH

    outcome = handshake(
        listener, trusting_client(pki, **{"ssl.endpoint.identification.algorithm": ""})
    )
    assert outcome.client_error is None


def test_client_auth_required_refuses_a_client_without_a_certificate(pki: Pki) -> None:
    listener = broker_context(pki, ssl_client_auth="required", ssl_truststore_location=str(pki.ca))
    outcome = handshake(listener, trusting_client(pki))
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.server_error.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert isinstance(outcome.client_error, ssl.SSLError)
    assert outcome.client_error.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert outcome.principal is None


def test_client_auth_required_names_the_client_by_its_subject(pki: Pki) -> None:
    listener = broker_context(pki, ssl_client_auth="required", ssl_truststore_location=str(pki.ca))
    client = trusting_client(pki, **{"ssl.keystore.location": str(pki.alice)})
    outcome = handshake(listener, client)
    assert outcome.server_error is None
    assert outcome.client_error is None
    assert outcome.principal is not None
    assert str(outcome.principal) == "User:CN=Alice,OU=eng,O=tidelog"


def test_mapping_rules_name_the_client(pki: Pki) -> None:
    listener = broker_context(pki, ssl_client_auth="required", ssl_truststore_location=str(pki.ca))
    client = trusting_client(pki, **{"ssl.keystore.location": str(pki.alice)})
    outcome = handshake(listener, client, rules="RULE:^CN=(.*?),.*$/$1/L")
    assert outcome.principal == KafkaPrincipal.user("alice")


def test_client_auth_requested_admits_anonymous_and_certified_clients(pki: Pki) -> None:
    listener = broker_context(pki, ssl_client_auth="requested", ssl_truststore_location=str(pki.ca))
    assert handshake(listener, trusting_client(pki)).principal == ANONYMOUS
    client = trusting_client(pki, **{"ssl.keystore.location": str(pki.alice)})
    assert handshake(listener, client).principal == KafkaPrincipal.user("CN=Alice,OU=eng,O=tidelog")


def test_client_auth_refuses_a_certificate_from_another_ca(pki: Pki, tmp_path: Path) -> None:
    other_key, other_cert = certs.generate_ca("mallory CA")
    key, cert = certs.issue_certificate(other_key, other_cert, "alice", server=False)
    keystore = tmp_path / "mallory.pem"
    certs.write_file(keystore, certs.keystore_pem(key, cert), private=True)
    listener = broker_context(pki, ssl_client_auth="required", ssl_truststore_location=str(pki.ca))
    outcome = handshake(listener, trusting_client(pki, **{"ssl.keystore.location": str(keystore)}))
    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)
    assert outcome.principal is None
    assert isinstance(outcome.client_error, ssl.SSLError)


def test_inline_pem_keystore_and_truststore(pki: Pki) -> None:
    key, cert = certs.issue_certificate(pki.ca_key_pem, pki.ca_cert_pem, "broker-inline")
    listener = tls.server_context(
        getter(
            {
                "ssl.keystore.key": key.decode(),
                "ssl.keystore.certificate.chain": cert.decode(),
                "ssl.truststore.certificates": pki.ca_cert_pem.decode(),
                "ssl.client.auth": "required",
            }
        )
    )
    client = tls.client_context(
        getter(
            {
                "ssl.truststore.certificates": pki.ca_cert_pem.decode(),
                "ssl.keystore.location": str(pki.alice),
                "ssl.endpoint.identification.algorithm": "https",
            }
        )
    )
    outcome = handshake(listener, client)
    assert outcome.client_error is None
    assert outcome.principal == KafkaPrincipal.user("CN=Alice,OU=eng,O=tidelog")


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux memfd")
def test_inline_keystore_goes_through_an_anonymous_memory_file(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_load = ssl.SSLContext.load_cert_chain

    def spy(
        self: ssl.SSLContext, certfile: str, keyfile: str | None = None, password: str = ""
    ) -> None:
        seen.append(os.readlink(certfile))
        real_load(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    key, cert = certs.issue_certificate(pki.ca_key_pem, pki.ca_cert_pem, "b")
    tls.server_context(
        getter({"ssl.keystore.key": key.decode(), "ssl.keystore.certificate.chain": cert.decode()})
    )
    assert len(seen) == 1
    assert seen[0].startswith("/memfd:tidelog-keystore")


def test_inline_keystore_without_memfd_uses_a_private_temp_file_and_removes_it(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[int] = []
    real_load = ssl.SSLContext.load_cert_chain

    def spy(
        self: ssl.SSLContext, certfile: str, keyfile: str | None = None, password: str = ""
    ) -> None:
        seen.append(os.stat(certfile).st_mode & 0o777)
        assert Path(certfile).parent == scratch
        real_load(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    key, cert = certs.issue_certificate(pki.ca_key_pem, pki.ca_cert_pem, "b", key_password="pw")
    context = tls.server_context(
        getter(
            {
                "ssl.keystore.key": key.decode(),
                "ssl.keystore.certificate.chain": cert.decode(),
                "ssl.key.password": "pw",
            }
        )
    )
    assert seen == [0o600]
    assert list(scratch.iterdir()) == []
    monkeypatch.undo()
    assert handshake(context, trusting_client(pki)).client_error is None


def test_encrypted_key_needs_the_right_password(pki: Pki, tmp_path: Path) -> None:
    key, cert = certs.issue_certificate(
        pki.ca_key_pem, pki.ca_cert_pem, "broker-enc", key_password="s3cret"
    )
    assert b"ENCRYPTED PRIVATE KEY" in key
    keystore = tmp_path / "enc.pem"
    certs.write_file(keystore, certs.keystore_pem(key, cert), private=True)
    listener = server(ssl_keystore_location=str(keystore), ssl_key_password="s3cret")
    assert handshake(listener, trusting_client(pki)).client_error is None

    with pytest.raises(SecurityConfigError, match="is encrypted") as missing:
        server(ssl_keystore_location=str(keystore))
    assert missing.value.key == "ssl.key.password"
    with pytest.raises(SecurityConfigError, match="wrong password") as wrong:
        server(ssl_keystore_location=str(keystore), ssl_key_password="guess")
    assert wrong.value.key == "ssl.key.password"


def test_tls12_only_with_an_openssl_cipher_suite(pki: Pki) -> None:
    listener = broker_context(
        pki,
        ssl_enabled_protocols="TLSv1.2",
        ssl_cipher_suites="ECDHE-ECDSA-AES128-GCM-SHA256",
    )
    outcome = handshake(listener, trusting_client(pki))
    assert outcome.client_error is None
    assert outcome.version == "TLSv1.2"
    assert outcome.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_only_tls13_suites_mean_tls13_only(pki: Pki) -> None:
    listener = broker_context(pki, ssl_cipher_suites="TLS_AES_256_GCM_SHA384")
    assert listener.minimum_version == ssl.TLSVersion.TLSv1_3
    client = trusting_client(pki, **{"ssl.enabled.protocols": "TLSv1.2"})
    assert isinstance(handshake(listener, client).client_error, ssl.SSLError)


# --- configuration errors ----------------------------------------------------------------


def config_error(build: Callable[[], object]) -> SecurityConfigError:
    with pytest.raises(SecurityConfigError) as caught:
        build()
    return caught.value


def test_jks_and_pkcs12_are_refused_naming_the_type_key(pki: Pki) -> None:
    error = config_error(lambda: broker_context(pki, ssl_keystore_type="JKS"))
    assert error.key == "ssl.keystore.type"
    assert "convert it to PEM" in str(error)
    error = config_error(lambda: trusting_client(pki, **{"ssl.truststore.type": "PKCS12"}))
    assert error.key == "ssl.truststore.type"


def test_a_binary_keystore_file_is_not_pem(tmp_path: Path) -> None:
    jks = tmp_path / "server.keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02binary")
    error = config_error(lambda: server(ssl_keystore_location=str(jks)))
    assert error.key == "ssl.keystore.location"
    assert "is not a PEM file" in str(error)
    assert str(jks) in str(error)


def test_missing_files_name_the_key_and_the_path(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    error = config_error(lambda: server(ssl_keystore_location=str(missing)))
    assert (error.key, str(error)) == (
        "ssl.keystore.location",
        f"ssl.keystore.location: no such file: {missing}",
    )
    error = config_error(
        lambda: broker_context(
            pki, ssl_client_auth="required", ssl_truststore_location=str(missing)
        )
    )
    assert error.key == "ssl.truststore.location"
    assert str(missing) in str(error)
    error = config_error(
        lambda: tls.client_context_from_properties({"ssl.ca.location": str(missing)})
    )
    assert error.key == "ssl.ca.location"


def test_a_listener_needs_a_keystore() -> None:
    assert config_error(server).key == "ssl.keystore.location"
    error = config_error(lambda: server(ssl_keystore_key="-----BEGIN PRIVATE KEY-----"))
    assert error.key == "ssl.keystore.certificate.chain"


def test_client_auth_needs_a_truststore(pki: Pki) -> None:
    for value in ("requested", "required"):
        error = config_error(functools.partial(broker_context, pki, ssl_client_auth=value))
        assert error.key == "ssl.client.auth"
    assert config_error(lambda: broker_context(pki, ssl_client_auth="sometimes")).key == (
        "ssl.client.auth"
    )
    assert broker_context(pki, ssl_client_auth="NONE").verify_mode == ssl.CERT_NONE


def test_a_key_that_is_not_the_certificates_is_refused(pki: Pki) -> None:
    key, _ = certs.issue_certificate(pki.ca_key_pem, pki.ca_cert_pem, "one")
    _, cert = certs.issue_certificate(pki.ca_key_pem, pki.ca_cert_pem, "two")
    error = config_error(
        lambda: tls.server_context(
            getter(
                {"ssl.keystore.key": key.decode(), "ssl.keystore.certificate.chain": cert.decode()}
            )
        )
    )
    assert error.key == "ssl.keystore.certificate.chain"
    assert "not the private key's" in str(error)


def test_store_passwords_are_refused_with_pem(pki: Pki) -> None:
    error = config_error(lambda: broker_context(pki, ssl_keystore_password="changeit"))
    assert error.key == "ssl.keystore.password"


def test_protocols_older_than_tls12_are_refused(pki: Pki) -> None:
    for value in ("TLSv1.1", "TLSv1.2,TLSv1", "SSLv3", "TLSv9"):
        error = config_error(functools.partial(broker_context, pki, ssl_enabled_protocols=value))
        assert error.key == "ssl.enabled.protocols"
    context = broker_context(pki, ssl_enabled_protocols="TLSv1.3")
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3
    default = broker_context(pki)
    assert (default.minimum_version, default.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )


def test_java_cipher_names_are_refused(pki: Pki) -> None:
    error = config_error(
        lambda: broker_context(pki, ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
    )
    assert error.key == "ssl.cipher.suites"
    assert "OpenSSL names" in str(error)
    error = config_error(
        lambda: broker_context(
            pki, ssl_cipher_suites="TLS_AES_128_GCM_SHA256", ssl_enabled_protocols="TLSv1.2"
        )
    )
    assert error.key == "ssl.cipher.suites"


def test_client_verification_settings(pki: Pki) -> None:
    ca = {"ssl.truststore.location": str(pki.ca)}
    assert tls.client_context(
        getter({**ca, "ssl.endpoint.identification.algorithm": "https"})
    ).check_hostname
    assert not tls.client_context(getter(ca)).check_hostname  # "" is Kafka's "off"
    assert tls.client_context_from_properties(ca).check_hostname  # absent: https
    off = tls.client_context_from_properties({**ca, "enable.ssl.certificate.verification": "false"})
    assert (off.check_hostname, off.verify_mode) == (False, ssl.CERT_NONE)
    error = config_error(
        lambda: tls.client_context_from_properties(
            {**ca, "ssl.endpoint.identification.algorithm": "ldap"}
        )
    )
    assert error.key == "ssl.endpoint.identification.algorithm"
    system = tls.client_context_from_properties({})
    assert system.verify_mode == ssl.CERT_REQUIRED


def test_one_truststore_and_one_keystore_in_either_spelling(pki: Pki) -> None:
    error = config_error(
        lambda: tls.client_context_from_properties(
            {"ssl.truststore.location": str(pki.ca), "ssl.ca.location": str(pki.ca)}
        )
    )
    assert error.key == "ssl.ca.location"
    error = config_error(
        lambda: tls.client_context_from_properties(
            {"ssl.keystore.location": str(pki.alice), "ssl.certificate.location": str(pki.alice)}
        )
    )
    assert error.key == "ssl.certificate.location"
