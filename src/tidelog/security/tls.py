"""TLS: ``ssl.SSLContext`` from Kafka's ``ssl.*`` properties (Kafka's ``SslFactory``).

Property rules (broker listeners, inter-broker and tidelog clients alike):

* ``get(key)`` returns the effective value of one ``ssl.*`` key, "" when unset. "" means
  Kafka's default (``DEFAULTS``) for every key but ``ssl.endpoint.identification.algorithm``,
  where "" turns hostname verification off, as in Kafka: a config layer registers
  ``DEFAULTS`` so that an unset key reads ``https``.
* PEM only. ``ssl.keystore.type`` and ``ssl.truststore.type`` are ``PEM`` (tidelog's default;
  Kafka's is JKS); JKS and PKCS12 are refused with a ``SecurityConfigError`` naming the key
  and saying how to convert. A keystore is a file (``ssl.keystore.location``: the private key
  and the certificate chain, leaf first, in one PEM file: Kafka's PEM keystore) or inline
  text (``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``), never both. The key may be
  encrypted (``ssl.key.password``); ``ssl.keystore.password`` and ``ssl.truststore.password``
  are refused with PEM, as Kafka refuses them.
* Everything is parsed with ``cryptography`` before OpenSSL sees it, so a file that is not
  PEM, a wrong password or a key that is not the certificate's fails at start-up naming the
  key (and the path). OpenSSL loads a key pair only from a path: inline text goes to an
  anonymous in-memory file (Linux ``memfd``) or else a ``mkstemp`` file (mode 0600) removed
  as soon as it is loaded. The text is written as given: a key is never stored decrypted.
  OpenSSL is always handed a password (maybe ""), so it never prompts on a terminal.
* Protocols: ``ssl.enabled.protocols`` (default ``TLSv1.2,TLSv1.3``) sets the minimum and
  maximum version; anything older than TLSv1.2 is refused. ``ssl.cipher.suites`` takes
  OpenSSL names (``ECDHE-ECDSA-AES128-GCM-SHA256``) for TLS 1.2. Python cannot narrow the
  TLS 1.3 suites (all AEAD), so their IANA names are accepted as they stand; a list naming
  only TLS 1.3 suites means TLS 1.3 only, as it does in Java.
* ``ssl.client.auth``: none/requested/required -> CERT_NONE/CERT_OPTIONAL/CERT_REQUIRED; the
  latter two need a truststore. A client with no truststore trusts the system's CAs (Java
  trusts the JVM's).

The principal a client certificate proves is ``tidelog.security.ssl_principal``'s job.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from tidelog.security.errors import SecurityConfigError

#: ``get(key)``: one listener's (or client's) value for an ``ssl.*`` key, "" when unset.
Getter = Callable[[str], str]

#: Kafka's defaults for the keys read here (the store types are tidelog's: PEM, not JKS).
DEFAULTS: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "ssl.keystore.type": "PEM",
        "ssl.truststore.type": "PEM",
        "ssl.client.auth": "none",
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
        "ssl.cipher.suites": "",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.principal.mapping.rules": "DEFAULT",
    }
)

_PROTOCOLS: Final = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_INSECURE_PROTOCOLS: Final = frozenset({"sslv2", "sslv3", "tlsv1", "tlsv1.1"})
_TLS13_SUITES: Final = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
_CLIENT_AUTH: Final = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)
_CONVERT_HINT: Final = (
    "convert it to PEM (keytool -importkeystore -srckeystore store.jks "
    "-destkeystore store.p12 -deststoretype PKCS12; openssl pkcs12 -in store.p12 "
    "-out store.pem) and set {type_key}=PEM"
)


# --- reading PEM -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Source:
    """PEM text and where it came from: ``key`` is the property that named it."""

    key: str
    text: str
    path: str | None = None  # None: inline text

    @property
    def where(self) -> str:
        return self.path if self.path is not None else f"the value of {self.key}"


def _read_file(key: str, path: str, type_key: str) -> _Source:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise SecurityConfigError(key, f"no such file: {path}") from None
    except IsADirectoryError:
        raise SecurityConfigError(key, f"{path} is a directory, not a PEM file") from None
    except OSError as exc:
        raise SecurityConfigError(key, f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if "-----BEGIN " not in text:
        hint = _CONVERT_HINT.format(type_key=type_key)
        raise SecurityConfigError(key, f"{path} is not a PEM file (JKS or PKCS12?): {hint}")
    return _Source(key, text, path)


def _blocks(source: _Source, *labels: str) -> list[str]:
    return [m.group(0) for m in _PEM_BLOCK.finditer(source.text) if m.group(1) in labels]


def _certificates(source: _Source) -> list[x509.Certificate]:
    blocks = _blocks(source, "CERTIFICATE")
    if not blocks:
        raise SecurityConfigError(source.key, f"no PEM certificate in {source.where}")
    certificates = []
    for block in blocks:
        try:
            certificates.append(x509.load_pem_x509_certificate(block.encode("ascii")))
        except (ValueError, UnicodeEncodeError) as exc:
            raise SecurityConfigError(
                source.key, f"unreadable certificate in {source.where}: {exc}"
            ) from None
    return certificates


_KEY_LABELS: Final = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY")


def _private_key(source: _Source, password_key: str, password: str) -> PrivateKeyTypes:
    blocks = _blocks(source, *_KEY_LABELS)
    if len(blocks) != 1:
        count = "no" if not blocks else str(len(blocks))
        raise SecurityConfigError(
            source.key, f"{count} private keys in {source.where}: a keystore holds exactly one"
        )
    block = blocks[0]
    encrypted = block.startswith("-----BEGIN ENCRYPTED") or "Proc-Type: 4,ENCRYPTED" in block
    if encrypted and not password:
        raise SecurityConfigError(
            password_key, f"the private key in {source.where} is encrypted: set {password_key}"
        )
    try:
        return serialization.load_pem_private_key(
            block.encode("ascii"), password.encode("utf-8") if encrypted else None
        )
    except ValueError:
        if encrypted:
            raise SecurityConfigError(
                password_key, f"cannot decrypt the private key in {source.where}: wrong password?"
            ) from None
        raise SecurityConfigError(source.key, f"unreadable private key in {source.where}") from None
    except (TypeError, UnicodeEncodeError) as exc:  # an algorithm cryptography cannot read
        raise SecurityConfigError(
            source.key, f"unreadable private key in {source.where}: {exc}"
        ) from None


def _spki(key: PrivateKeyTypes | x509.Certificate) -> bytes:
    public = key.public_key()
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# --- keystores and truststores -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Keystore:
    key: _Source  # holds the private key
    chain: _Source  # holds the certificate chain, leaf first (may be the same file as key)
    password_key: str
    password: str


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A path to ``text`` readable by this process only, gone when the block ends."""
    data = text.encode("utf-8")
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd_create("tidelog-keystore", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="tidelog-keystore-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _load_keystore(context: ssl.SSLContext, store: _Keystore) -> None:
    chain = _certificates(store.chain)
    key = _private_key(store.key, store.password_key, store.password)
    if _spki(key) != _spki(chain[0]):
        raise SecurityConfigError(
            store.chain.key,
            f"the first certificate in {store.chain.where} is not the private key's: "
            "a keystore's chain starts with its own certificate",
        )
    try:
        if store.key.path is not None and store.chain.path is not None:
            keyfile = None if store.key.path == store.chain.path else store.key.path
            context.load_cert_chain(store.chain.path, keyfile, store.password)
        else:
            with _private_file(store.chain.text + "\n" + store.key.text) as path:
                context.load_cert_chain(path, None, store.password)
    except ssl.SSLError as exc:
        raise SecurityConfigError(
            store.chain.key, f"OpenSSL refused the keystore in {store.chain.where}: {exc}"
        ) from None


def _load_truststore(context: ssl.SSLContext, source: _Source) -> None:
    pem = "".join(
        c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in _certificates(source)
    )
    try:
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise SecurityConfigError(
            source.key, f"OpenSSL refused the certificates in {source.where}: {exc}"
        ) from None


def _check_pem_type(get: Getter, type_key: str, password_key: str) -> None:
    value = get(type_key).strip()
    if value and value.upper() != "PEM":
        hint = _CONVERT_HINT.format(type_key=type_key)
        raise SecurityConfigError(type_key, f"{value} is not supported, only PEM: {hint}")
    if get(password_key):
        raise SecurityConfigError(
            password_key,
            "PEM stores have no store password (an encrypted key's is ssl.key.password)",
        )


def _java_keystore(get: Getter) -> _Keystore | None:
    _check_pem_type(get, "ssl.keystore.type", "ssl.keystore.password")
    location = get("ssl.keystore.location").strip()
    key_text = get("ssl.keystore.key")
    chain_text = get("ssl.keystore.certificate.chain")
    password = get("ssl.key.password")
    if location:
        if key_text or chain_text:
            raise SecurityConfigError(
                "ssl.keystore.location",
                "give ssl.keystore.location or ssl.keystore.key with "
                "ssl.keystore.certificate.chain, not both",
            )
        source = _read_file("ssl.keystore.location", location, "ssl.keystore.type")
        return _Keystore(source, source, "ssl.key.password", password)
    if not key_text and not chain_text:
        return None
    if not key_text:
        raise SecurityConfigError("ssl.keystore.key", "ssl.keystore.certificate.chain needs it")
    if not chain_text:
        raise SecurityConfigError("ssl.keystore.certificate.chain", "ssl.keystore.key needs it")
    return _Keystore(
        _Source("ssl.keystore.key", key_text),
        _Source("ssl.keystore.certificate.chain", chain_text),
        "ssl.key.password",
        password,
    )


def _java_truststore(get: Getter) -> _Source | None:
    _check_pem_type(get, "ssl.truststore.type", "ssl.truststore.password")
    location = get("ssl.truststore.location").strip()
    inline = get("ssl.truststore.certificates")
    if location and inline:
        raise SecurityConfigError(
            "ssl.truststore.location",
            "give ssl.truststore.location or ssl.truststore.certificates, not both",
        )
    if location:
        return _read_file("ssl.truststore.location", location, "ssl.truststore.type")
    if inline:
        return _Source("ssl.truststore.certificates", inline)
    return None


# --- protocols, ciphers, verification ----------------------------------------------------


def _split(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _apply_protocols_and_ciphers(context: ssl.SSLContext, get: Getter) -> None:
    names = _split(get("ssl.enabled.protocols")) or _split(DEFAULTS["ssl.enabled.protocols"])
    versions = []
    for name in names:
        version = _PROTOCOLS.get(name.lower())
        if version is None:
            why = "is insecure" if name.lower() in _INSECURE_PROTOCOLS else "is unknown"
            raise SecurityConfigError(
                "ssl.enabled.protocols", f"{name} {why}: give TLSv1.2 and/or TLSv1.3"
            )
        versions.append(version)
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)

    suites = _split(get("ssl.cipher.suites"))
    if not suites:
        return
    tls12 = [name for name in suites if name not in _TLS13_SUITES]
    for name in tls12:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            raise SecurityConfigError(
                "ssl.cipher.suites",
                f"unknown cipher suite {name}: give OpenSSL names "
                "(ECDHE-ECDSA-AES128-GCM-SHA256), not Java's (TLS_ECDHE_ECDSA_WITH_...)",
            ) from None
    if tls12:
        context.set_ciphers(":".join(tls12))
    elif context.maximum_version < ssl.TLSVersion.TLSv1_3:
        raise SecurityConfigError(
            "ssl.cipher.suites", "names only TLS 1.3 suites but TLSv1.3 is not enabled"
        )
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3


def _hostname_check(key: str, value: str) -> bool:
    algorithm = value.strip().lower()
    if algorithm == "https":
        return True
    if algorithm in ("", "none"):
        return False
    raise SecurityConfigError(key, f"{value!r}: expected https or an empty value")


def server_context(get: Getter) -> ssl.SSLContext:
    """The context of an SSL listener: its keystore, and a truststore for client
    certificates when ``ssl.client.auth`` is requested or required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols_and_ciphers(context, get)
    keystore = _java_keystore(get)
    if keystore is None:
        raise SecurityConfigError(
            "ssl.keystore.location",
            "an SSL listener needs a keystore: ssl.keystore.location (one PEM file with the "
            "private key and the certificate chain) or ssl.keystore.key with "
            "ssl.keystore.certificate.chain",
        )
    _load_keystore(context, keystore)
    auth = get("ssl.client.auth").strip().lower() or DEFAULTS["ssl.client.auth"]
    mode = _CLIENT_AUTH.get(auth)
    if mode is None:
        raise SecurityConfigError(
            "ssl.client.auth", f"{auth!r}: expected none, requested or required"
        )
    truststore = _java_truststore(get)
    if truststore is not None:
        _load_truststore(context, truststore)
    elif mode != ssl.CERT_NONE:
        raise SecurityConfigError(
            "ssl.client.auth",
            f"{auth} needs a truststore to verify client certificates: "
            "set ssl.truststore.location or ssl.truststore.certificates",
        )
    context.verify_mode = mode
    return context


def client_context(get: Getter) -> ssl.SSLContext:
    """A client's context from Java-style keys: the truststore verifies the server (the
    system's CAs when unset), the keystore (optional) is the client's certificate for
    mutual TLS, ``ssl.endpoint.identification.algorithm`` ``https`` checks the host name."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_ciphers(context, get)
    truststore = _java_truststore(get)
    if truststore is not None:
        _load_truststore(context, truststore)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    keystore = _java_keystore(get)
    if keystore is not None:
        _load_keystore(context, keystore)
    key = "ssl.endpoint.identification.algorithm"
    context.check_hostname = _hostname_check(key, get(key))
    return context


_TRUST_KEYS: Final = (
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.ca.location",
    "ssl.ca.pem",
)
_KEYSTORE_GROUPS: Final = (
    ("ssl.keystore.location",),
    ("ssl.keystore.key", "ssl.keystore.certificate.chain"),
    ("ssl.certificate.location", "ssl.key.location"),
    ("ssl.certificate.pem", "ssl.key.pem"),
)


def _librdkafka_keystore(props: Mapping[str, str]) -> _Keystore | None:
    password = props.get("ssl.key.password", "")
    cert_location = props.get("ssl.certificate.location", "").strip()
    key_location = props.get("ssl.key.location", "").strip()
    if cert_location or key_location:
        if not cert_location:
            raise SecurityConfigError("ssl.certificate.location", "ssl.key.location needs it")
        chain = _read_file("ssl.certificate.location", cert_location, "ssl.keystore.type")
        key = (
            _read_file("ssl.key.location", key_location, "ssl.keystore.type")
            if key_location
            else chain  # one PEM file with both
        )
        return _Keystore(key, chain, "ssl.key.password", password)
    cert_pem = props.get("ssl.certificate.pem", "")
    key_pem = props.get("ssl.key.pem", "")
    if cert_pem or key_pem:
        if not cert_pem or not key_pem:
            missing = "ssl.key.pem" if cert_pem else "ssl.certificate.pem"
            raise SecurityConfigError(missing, "ssl.certificate.pem and ssl.key.pem go together")
        return _Keystore(
            _Source("ssl.key.pem", key_pem),
            _Source("ssl.certificate.pem", cert_pem),
            "ssl.key.password",
            password,
        )
    return None


def _parse_flag(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise SecurityConfigError(key, f"{value!r}: expected true or false")


def client_context_from_properties(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client's context from a properties file that may use Java's names (as
    ``client_context``) or librdkafka's: ``ssl.ca.location`` (a PEM file, a directory of
    hashed certificates, or ``probe``: the system's), ``ssl.ca.pem``,
    ``ssl.certificate.location`` + ``ssl.key.location`` (may be one file),
    ``ssl.certificate.pem`` + ``ssl.key.pem``, ``ssl.key.password`` and
    ``enable.ssl.certificate.verification`` (``false``: no verification at all). One
    truststore and one keystore at most, in either spelling; an absent
    ``ssl.endpoint.identification.algorithm`` means ``https``."""

    def get(key: str) -> str:
        return props.get(key, "")

    trust_given = [key for key in _TRUST_KEYS if get(key).strip()]
    if len(trust_given) > 1:
        raise SecurityConfigError(trust_given[1], f"conflicts with {trust_given[0]}")
    keystores_given = [g for g in _KEYSTORE_GROUPS if any(get(key).strip() for key in g)]
    if len(keystores_given) > 1:
        raise SecurityConfigError(
            keystores_given[1][0], f"conflicts with {keystores_given[0][0]}: give one keystore"
        )

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_ciphers(context, get)
    ca_location = get("ssl.ca.location").strip()
    ca_pem = get("ssl.ca.pem")
    if ca_location == "probe":
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    elif ca_location and Path(ca_location).is_dir():
        try:
            context.load_verify_locations(capath=ca_location)
        except ssl.SSLError as exc:
            raise SecurityConfigError("ssl.ca.location", f"{ca_location}: {exc}") from None
    elif ca_location:
        _load_truststore(context, _read_file("ssl.ca.location", ca_location, "ssl.truststore.type"))
    elif ca_pem.strip():
        _load_truststore(context, _Source("ssl.ca.pem", ca_pem))
    else:
        truststore = _java_truststore(get)
        if truststore is not None:
            _load_truststore(context, truststore)
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)

    keystore = _librdkafka_keystore(props) or _java_keystore(get)
    if keystore is not None:
        _load_keystore(context, keystore)

    key = "ssl.endpoint.identification.algorithm"
    context.check_hostname = _hostname_check(key, props.get(key, "https"))
    verify_key = "enable.ssl.certificate.verification"
    if not _parse_flag(verify_key, props.get(verify_key, "true")):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
