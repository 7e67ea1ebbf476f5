"""tidelog.security.certs: the CA and leaf certificates (extensions a strict verifier wants),
and ``generate_local_pki``'s files, modes and idempotence."""

from __future__ import annotations

import ipaddress
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from tidelog.security import certs, tls, x500
from tidelog.security.errors import SecurityError


def load(cert_pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(cert_pem)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_ca_is_a_self_signed_p256_ca() -> None:
    key_pem, cert_pem = certs.generate_ca("test CA")
    cert = load(cert_pem)
    key = serialization.load_pem_private_key(key_pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    assert cert.subject == cert.issuer
    cert.verify_directly_issued_by(cert)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert (constraints.value.ca, constraints.value.path_length) == (True, 0)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign
    assert usage.crl_sign
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime == certs.CA_VALIDITY


def test_a_broker_certificate_serves_and_connects_for_its_hosts() -> None:
    ca_key, ca_cert = certs.generate_ca()
    _, cert_pem = certs.issue_certificate(
        ca_key, ca_cert, "broker-1", hosts=("127.0.0.1", "::1", "localhost", "b1.example")
    )
    cert = load(cert_pem)
    cert.verify_directly_issued_by(load(ca_cert))
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature
    assert not usage.value.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "b1.example"]
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = load(ca_cert).extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest


def test_a_client_certificate_only_authenticates_clients() -> None:
    ca_key, ca_cert = certs.generate_ca()
    _, cert_pem = certs.issue_certificate(
        ca_key,
        ca_cert,
        "alice",
        server=False,
        extra_subject=(("OU", "eng"), ("O", "tidelog"), ("C", "NZ")),
    )
    cert = load(cert_pem)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    der = cert.public_bytes(serialization.Encoding.DER)
    assert x500.subject_dn(der) == "CN=alice,OU=eng,O=tidelog,C=NZ"
    assert cert.subject.rfc4514_string() == "CN=alice,OU=eng,O=tidelog,C=NZ"


def test_expired_and_encrypted_certificates() -> None:
    ca_key, ca_cert = certs.generate_ca()
    now = datetime.now(UTC)
    key_pem, cert_pem = certs.issue_certificate(
        ca_key,
        ca_cert,
        "old",
        not_before=now - timedelta(days=10),
        not_after=now - timedelta(days=1),
        key_password="pw",
    )
    assert load(cert_pem).not_valid_after_utc < now
    assert key_pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    serialization.load_pem_private_key(key_pem, b"pw")


def test_bad_requests_are_refused() -> None:
    ca_key, ca_cert = certs.generate_ca()
    with pytest.raises(ValueError, match="no use"):
        certs.issue_certificate(ca_key, ca_cert, "x", server=False, client=False)
    now = datetime.now(UTC)
    with pytest.raises(ValueError, match="later than"):
        certs.issue_certificate(ca_key, ca_cert, "x", not_before=now, not_after=now)
    with pytest.raises(ValueError, match="unknown subject keyword"):
        certs.issue_certificate(ca_key, ca_cert, "x", extra_subject=(("TITLE", "boss"),))
    other_key, _ = certs.generate_ca()
    with pytest.raises(ValueError, match="not the CA certificate's"):
        certs.issue_certificate(other_key, ca_cert, "x")


def test_local_pki_files_and_modes(tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    pki = certs.generate_local_pki(directory, brokers=[1, 2], clients=["alice"])
    assert mode(directory) == 0o700
    assert pki.ca_cert == directory / "ca.pem"
    assert pki.ca_key == directory / "ca-key.pem"
    assert pki.brokers == {1: directory / "broker-1.pem", 2: directory / "broker-2.pem"}
    assert pki.clients == {"alice": directory / "client-alice.pem"}
    assert mode(pki.ca_cert) == 0o644
    for private in (pki.ca_key, *pki.brokers.values(), *pki.clients.values()):
        assert mode(private) == 0o600
    assert sorted(p.name for p in directory.iterdir()) == [
        "broker-1.pem",
        "broker-2.pem",
        "ca-key.pem",
        "ca.pem",
        "client-alice.pem",
    ]
    ca = load(pki.ca_cert.read_bytes())
    for keystore, cn in ((pki.brokers[2], "broker-2"), (pki.clients["alice"], "alice")):
        data = keystore.read_bytes()
        assert data.startswith(b"-----BEGIN PRIVATE KEY-----")  # a Kafka PEM keystore
        cert = load(data)
        cert.verify_directly_issued_by(ca)
        assert cert.subject.rfc4514_string() == f"CN={cn}"
    # the properties it hands out build working contexts
    broker = pki.broker_ssl_properties(1)
    tls.server_context(lambda key: broker.get(key, ""))
    tls.client_context_from_properties(pki.client_ssl_properties("alice"))
    tls.client_context_from_properties(pki.client_ssl_properties("alice", librdkafka=True))


def test_local_pki_twice_reuses_the_ca_and_the_keystores(tmp_path: Path) -> None:
    first = certs.generate_local_pki(tmp_path, brokers=[1], clients=["alice"])
    files = {p: p.read_bytes() for p in tmp_path.iterdir()}
    second = certs.generate_local_pki(tmp_path, brokers=[1, 2], clients=["alice", "bob"])
    assert second.ca_cert == first.ca_cert
    for path, data in files.items():
        assert path.read_bytes() == data, path.name
    ca = load(second.ca_cert.read_bytes())
    load(second.brokers[2].read_bytes()).verify_directly_issued_by(ca)
    load(second.clients["bob"].read_bytes()).verify_directly_issued_by(ca)


def test_local_pki_reissues_stale_keystores_but_keeps_the_ca(tmp_path: Path) -> None:
    pki = certs.generate_local_pki(tmp_path, brokers=[1, 2], clients=[])
    ca_pem = pki.ca_cert.read_bytes()
    ca_key_pem = pki.ca_key.read_bytes()
    now = datetime.now(UTC)
    key, cert = certs.issue_certificate(
        ca_key_pem, ca_pem, "broker-2", not_before=now - timedelta(days=9), not_after=now
    )
    certs.write_file(pki.brokers[2], certs.keystore_pem(key, cert), private=True)
    broker_1 = pki.brokers[1].read_bytes()

    again = certs.generate_local_pki(tmp_path, brokers=[1, 2], clients=[])
    assert again.ca_cert.read_bytes() == ca_pem
    assert again.brokers[1].read_bytes() == broker_1
    renewed = load(again.brokers[2].read_bytes())
    assert renewed.not_valid_after_utc > now + timedelta(days=30)

    moved = certs.generate_local_pki(tmp_path, brokers=[1], hosts=("10.0.0.7",))
    assert moved.ca_cert.read_bytes() == ca_pem
    san = load(moved.brokers[1].read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert san.value.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]


def test_local_pki_refuses_half_a_ca_and_bad_names(tmp_path: Path) -> None:
    pki = certs.generate_local_pki(tmp_path, brokers=[1])
    pki.ca_key.unlink()
    with pytest.raises(SecurityError, match=r"ca-key\.pem"):
        certs.generate_local_pki(tmp_path, brokers=[1])
    with pytest.raises(ValueError, match="client name"):
        certs.generate_local_pki(tmp_path / "x", brokers=[], clients=["../evil"])
    with pytest.raises(ValueError, match="negative"):
        certs.generate_local_pki(tmp_path / "y", brokers=[-1])
