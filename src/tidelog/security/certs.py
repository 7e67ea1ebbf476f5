"""A certificate authority and certificates for a local cluster (``tidelog cluster up
--security``) and for tests: EC P-256 keys, SHA-256 signatures, Kafka PEM keystores.

Rules:

* A CA is self-signed: ``basicConstraints CA:TRUE, pathlen:0`` and key usage keyCertSign +
  cRLSign, both critical. It signs leaf certificates only.
* A leaf is ``CA:FALSE`` with key usage digitalSignature (critical; ECDHE with an EC key
  needs nothing more) and extended key usage serverAuth and/or clientAuth: a broker gets
  both (it is its peers' client), a client only clientAuth. Its SubjectAltName lists every
  host, as an IP address when it parses as one and a DNS name otherwise: hostname
  verification reads the SAN, never the CN. Subject and authority key identifiers are always
  present (OpenSSL's strict verification wants the latter).
* Validity starts five minutes ago (clock skew); a CA lasts ten years, a leaf two. Pass
  ``not_before``/``not_after`` for anything else, e.g. an expired certificate for a test
  (``not_after`` in the past); a certificate "from a different CA" is one issued by
  another ``generate_ca()``.
* A keystore file (Kafka's PEM keystore) holds the private key then the certificate;
  ``ssl.keystore.location`` (Java) and both ``ssl.certificate.location`` and
  ``ssl.key.location`` (librdkafka) can name the same file.
* ``generate_local_pki`` writes ``ca.pem`` (0644), ``ca-key.pem``, ``broker-<id>.pem`` and
  ``client-<name>.pem`` (0600) to a temporary file renamed into place, so no reader sees
  half a file. It is idempotent: an existing CA is reused (a restarted local cluster keeps
  its trust, a client's copy of ``ca.pem`` stays good), and so is an existing keystore
  signed by that CA for the same hosts and usages with a day or more to live; anything else
  is (re)issued. The CA is replaced only when it has expired.
* Subjects: ``CN=broker-<id>`` and ``CN=<name>``, so principals read ``User:CN=broker-1``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidelog.security.errors import SecurityError

DEFAULT_HOSTS: Final = ("127.0.0.1", "localhost")
CA_VALIDITY: Final = timedelta(days=3650)
LEAF_VALIDITY: Final = timedelta(days=730)
CLOCK_SKEW: Final = timedelta(minutes=5)
#: A keystore with less left than this is reissued by ``generate_local_pki``.
RENEW_BEFORE: Final = timedelta(days=1)

#: Subject keywords ``extra_subject`` accepts (Java's RFC 2253 keywords, and EMAILADDRESS).
SUBJECT_KEYWORDS: Final[Mapping[str, x509.ObjectIdentifier]] = {
    "CN": NameOID.COMMON_NAME,
    "C": NameOID.COUNTRY_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "STREET": NameOID.STREET_ADDRESS,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
    "EMAILADDRESS": NameOID.EMAIL_ADDRESS,
}

_CLIENT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _now() -> datetime:
    return datetime.now(UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode("utf-8"))
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _validity(
    not_before: datetime | None, not_after: datetime | None, lifetime: timedelta
) -> tuple[datetime, datetime]:
    start = not_before if not_before is not None else _now() - CLOCK_SKEW
    end = not_after if not_after is not None else start + lifetime
    if end <= start:
        raise ValueError(f"not_after ({end}) must be later than not_before ({start})")
    return start, end


def generate_ca(
    common_name: str = "tidelog local CA",
    *,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> tuple[bytes, bytes]:
    """A new self-signed CA: (private key PEM, certificate PEM)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _validity(not_before, not_after, CA_VALIDITY)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _key_pem(key), _cert_pem(cert)


def _subject(common_name: str, extra_subject: Sequence[tuple[str, str]]) -> x509.Name:
    """``CN=<common_name>`` then ``extra_subject`` in the order Java prints a DN (most
    specific first); the DER order is the reverse."""
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    for keyword, value in extra_subject:
        oid = SUBJECT_KEYWORDS.get(keyword.upper())
        if oid is None:
            raise ValueError(f"unknown subject keyword {keyword!r}: use {sorted(SUBJECT_KEYWORDS)}")
        attributes.append(x509.NameAttribute(oid, value))
    return x509.Name(list(reversed(attributes)))


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _usages(server: bool, client: bool) -> list[x509.ObjectIdentifier]:
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if not usages:
        raise ValueError("a certificate for neither a server nor a client has no use")
    return usages


def _load_ca(
    ca_key_pem: bytes, ca_cert_pem: bytes
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = serialization.load_pem_private_key(ca_key_pem, None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key (not made by generate_ca?)")
    cert = x509.load_pem_x509_certificate(ca_cert_pem)
    if _public(key) != _public(cert):
        raise ValueError("the CA key is not the CA certificate's")
    return key, cert


def _public(key: ec.EllipticCurvePrivateKey | x509.Certificate) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def issue_certificate(
    ca_key_pem: bytes,
    ca_cert_pem: bytes,
    common_name: str,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    server: bool = True,
    client: bool = True,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
    extra_subject: Sequence[tuple[str, str]] = (),
    key_password: str | None = None,
) -> tuple[bytes, bytes]:
    """A leaf certificate signed by the CA: (private key PEM, certificate PEM). A broker's
    is ``server`` and ``client``, a client's ``server=False``; ``extra_subject`` adds
    attributes after the CN as Java prints them (``(("OU", "eng"), ("O", "tidelog"))`` ->
    ``CN=alice,OU=eng,O=tidelog``); ``key_password`` encrypts the key (PKCS#8)."""
    ca_key, ca_cert = _load_ca(ca_key_pem, ca_cert_pem)
    key = _new_key()
    start, end = _validity(not_before, not_after, LEAF_VALIDITY)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_subject(common_name, extra_subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(_usages(server, client)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_alt_names(hosts)), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return _key_pem(key, key_password), _cert_pem(cert)


def keystore_pem(key_pem: bytes, cert_pem: bytes, *chain_pem: bytes) -> bytes:
    """A Kafka PEM keystore: the private key, the certificate, then any intermediates."""
    return b"".join(
        part if part.endswith(b"\n") else part + b"\n" for part in (key_pem, cert_pem, *chain_pem)
    )


def write_file(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``data`` to ``path`` atomically: mode 0600 when ``private``, else 0644."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o600 if private else 0o644)  # whatever the umask
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


@dataclass(frozen=True, slots=True)
class LocalPki:
    """Where ``generate_local_pki`` put things."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    brokers: Mapping[int, Path]
    clients: Mapping[str, Path]

    def broker_ssl_properties(self, broker_id: int) -> dict[str, str]:
        """A broker's ``ssl.*`` properties (Java names) for an SSL listener with mTLS."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.brokers[broker_id]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_cert),
        }

    def client_ssl_properties(self, name: str, *, librdkafka: bool = False) -> dict[str, str]:
        """A client's ``ssl.*`` properties in Java's names, or librdkafka's."""
        if librdkafka:
            return {
                "ssl.ca.location": str(self.ca_cert),
                "ssl.certificate.location": str(self.clients[name]),
                "ssl.key.location": str(self.clients[name]),
            }
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.clients[name]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_cert),
        }


def _reusable_ca(ca_key: Path, ca_cert: Path) -> tuple[bytes, bytes] | None:
    """The CA already in the directory; None when there is none or it has expired."""
    if not ca_key.exists() and not ca_cert.exists():
        return None
    if not ca_key.exists() or not ca_cert.exists():
        present, missing = (ca_cert, ca_key) if ca_cert.exists() else (ca_key, ca_cert)
        raise SecurityError(f"{present} exists without {missing}: remove it or restore both")
    key_pem, cert_pem = ca_key.read_bytes(), ca_cert.read_bytes()
    try:
        _, cert = _load_ca(key_pem, cert_pem)
    except ValueError as exc:
        raise SecurityError(f"{ca_key}, {ca_cert}: {exc}") from None
    if cert.not_valid_after_utc <= _now() + RENEW_BEFORE:
        return None
    return key_pem, cert_pem


def _keystore_current(
    path: Path, ca_cert: x509.Certificate, hosts: Sequence[str], server: bool, client: bool
) -> bool:
    """Whether the keystore at ``path`` is one ``issue_certificate`` would make now."""
    try:
        data = path.read_bytes()
        cert = x509.load_pem_x509_certificate(data)
        key = serialization.load_pem_private_key(data, None)
        cert.verify_directly_issued_by(ca_cert)
        alt_names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    if not isinstance(key, ec.EllipticCurvePrivateKey) or _public(key) != _public(cert):
        return False
    now = _now()
    return (
        cert.not_valid_before_utc <= now
        and cert.not_valid_after_utc > now + RENEW_BEFORE
        and set(alt_names) == set(_alt_names(hosts))
        and set(usages) == set(_usages(server, client))
    )


def generate_local_pki(
    directory: Path,
    *,
    brokers: Sequence[int],
    clients: Sequence[str] = (),
    hosts: Sequence[str] = DEFAULT_HOSTS,
) -> LocalPki:
    """A CA and a keystore per broker and client in ``directory`` (created, mode 0700),
    reusing what is already there and still good (see the module's rules)."""
    for broker_id in brokers:
        if broker_id < 0:
            raise ValueError(f"broker id {broker_id} is negative")
    for name in clients:
        if not _CLIENT_NAME.fullmatch(name):
            raise ValueError(f"client name {name!r}: use letters, digits, '.', '_' and '-'")
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
    ca_key_path, ca_cert_path = directory / "ca-key.pem", directory / "ca.pem"
    existing = _reusable_ca(ca_key_path, ca_cert_path)
    if existing is None:
        ca_key_pem, ca_cert_pem = generate_ca()
        write_file(ca_key_path, ca_key_pem, private=True)
        write_file(ca_cert_path, ca_cert_pem, private=False)
    else:
        ca_key_pem, ca_cert_pem = existing
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)

    def keystore(path: Path, common_name: str, *, server: bool) -> Path:
        if not _keystore_current(path, ca_cert, hosts, server, True):
            key_pem, cert_pem = issue_certificate(
                ca_key_pem, ca_cert_pem, common_name, hosts=hosts, server=server, client=True
            )
            write_file(path, keystore_pem(key_pem, cert_pem), private=True)
        return path

    broker_paths = {
        b: keystore(directory / f"broker-{b}.pem", f"broker-{b}", server=True) for b in brokers
    }
    client_paths = {c: keystore(directory / f"client-{c}.pem", c, server=False) for c in clients}
    return LocalPki(directory, ca_cert_path, ca_key_path, broker_paths, client_paths)
