"""TLS: ``ssl.SSLContext`` from Kafka's ``ssl.*`` properties, and the principal a client
certificate proves (Kafka's SSL principal, KIP-371 mapping rules).

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

Principal rules:

* No certificate -> ``User:ANONYMOUS``. Otherwise the subject DN as Java's
  ``X500Principal.getName()`` prints it (RFC 2253): RDNs most specific first, keywords only
  for CN, C, L, ST, O, OU, STREET, DC and UID, any other attribute as its dotted OID and
  ``#`` plus the hex of its DER value; ``, = + < > # ; " \\`` escaped with a backslash,
  leading and trailing spaces too, NUL as ``\\00``. The DN is read from the certificate's own
  DER, so encodings are never normalised away.
* ``ssl.principal.mapping.rules``: comma-separated ``DEFAULT`` (the DN itself) and
  ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash; ``\\``
  escapes a ``/``. A rule applies when its pattern matches the whole DN; the name is then
  the DN with every match replaced (Java's ``replaceAll``: ``$1``, ``${name}``, ``\\$``); the
  first rule that applies wins, and a DN no rule applies to fails authentication. As in
  Kafka, ``$n`` past the pattern's last group is literal text; a rule that could never work
  (bad pattern, a lone ``$`` or ``\\``, ``$1`` in a pattern without groups) is refused when
  parsed, not at the first connection. "" (unset) means ``DEFAULT``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import ssl
import tempfile
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.principal import ANONYMOUS, KafkaPrincipal

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

PRINCIPAL_MAPPING_RULES_KEY: Final = "ssl.principal.mapping.rules"

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


# --- the subject DN, as Java prints it ---------------------------------------------------

_RFC2253_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java prints as text: PrintableString, T61String, IA5String,
# GeneralString, BMPString, UTF8String (by their DER tags).
_STRING_CODECS: Final = {
    0x13: "ascii",
    0x14: "latin-1",
    0x16: "ascii",
    0x1B: "latin-1",
    0x1E: "utf-16-be",
    0x0C: "utf-8",
}
_ESCAPED: Final = frozenset(',=+<>#;"\\')
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_OID: Final = 0x06


def _element(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, end) of the DER element at ``pos``; ValueError if malformed."""
    if pos + 2 > len(data):
        raise ValueError("truncated DER")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise ValueError("multi-byte DER tag")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4 or pos + size > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[pos : pos + size], "big")
        pos += size
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(tag, content start, content end, element start) of each element in data[start:end]."""
    pos = start
    while pos < end:
        tag, content, after = _element(data, pos)
        if after > end:
            raise ValueError("DER element overruns its parent")
        yield tag, content, after, pos
        pos = after


def _dotted(body: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs or value:
        raise ValueError("bad OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


def _escape(value: str) -> str:
    text = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    lead = len(text) - len(text.lstrip(" \r"))  # leading spaces: escaped
    end = len(text.rstrip(" \r"))  # trailing spaces from here: escaped
    return "".join("\\" + c if i < lead or i >= end else c for i, c in enumerate(text))


def _attribute(data: bytes, start: int, end: int) -> str:
    parts = list(_children(data, start, end))
    if len(parts) != 2 or parts[0][0] != _OID:
        raise ValueError("bad AttributeTypeAndValue")
    oid = _dotted(data[parts[0][1] : parts[0][2]])
    tag, content, after, element = parts[1]
    keyword = _RFC2253_KEYWORDS.get(oid)
    codec = _STRING_CODECS.get(tag)
    if keyword is None or codec is None:
        return f"{keyword or oid}=#{data[element:after].hex()}"
    return f"{keyword}={_escape(data[content:after].decode(codec))}"


def subject_dn(der: bytes) -> str:
    """The subject DN of a DER certificate as Java's ``X500Principal.getName()`` prints it
    (RFC 2253: ``CN=alice,OU=eng,O=tidelog``). ValueError if the DER is malformed."""
    tag, start, end = _element(der, 0)
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    tag, start, end = _element(der, start)  # TBSCertificate
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    fields = list(_children(der, start, end))
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("certificate without a subject")
    _, name_start, name_end, _ = fields[4]
    rdns = []
    for rdn_tag, rdn_start, rdn_end, _ in _children(der, name_start, name_end):
        if rdn_tag != _SET:
            raise ValueError("bad RelativeDistinguishedName")
        avas = []
        for ava_tag, ava_start, ava_end, _ in _children(der, rdn_start, rdn_end):
            if ava_tag != _SEQUENCE:
                raise ValueError("bad AttributeTypeAndValue")
            avas.append(_attribute(der, ava_start, ava_end))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


# --- ssl.principal.mapping.rules ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Group:
    """A group reference in a replacement: its number or name."""

    ref: int | str


_Piece: TypeAlias = str | _Group  # replacement text: literal text or a group


@dataclass(frozen=True, slots=True)
class PrincipalMappingRule:
    """One rule: ``DEFAULT`` (``pattern`` None) or ``RULE:pattern/replacement/[L|U]``."""

    text: str
    pattern: re.Pattern[str] | None = None
    replacement: tuple[_Piece, ...] = ()
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        """The name this rule gives ``dn``; None when the rule does not apply."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(
            piece if isinstance(piece, str) else (match.group(piece.ref) or "")
            for piece in self.replacement
        )

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class PrincipalMappingRules:
    """Parsed ``ssl.principal.mapping.rules``: the first rule that applies names the DN."""

    rules: tuple[PrincipalMappingRule, ...]

    def name(self, dn: str) -> str | None:
        """The principal name for ``dn``; None when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        return None

    def __str__(self) -> str:
        return ",".join(str(rule) for rule in self.rules)


DEFAULT_RULES: Final = PrincipalMappingRules((PrincipalMappingRule("DEFAULT"),))

_JAVA_NAMED_GROUP: Final = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")


def _rule_error(rule: str, message: str) -> SecurityConfigError:
    return SecurityConfigError(PRINCIPAL_MAPPING_RULES_KEY, f"rule {rule!r}: {message}")


def _until_slash(text: str, pos: int) -> int:
    """The index of the first ``/`` at or after ``pos`` not escaped by ``\\`` (or the end)."""
    while pos < len(text) and text[pos] != "/":
        pos += 2 if text[pos] == "\\" else 1
    return min(pos, len(text))


def _replacement(rule: str, text: str, pattern: re.Pattern[str]) -> tuple[_Piece, ...]:
    """Java's replacement syntax: ``\\x`` is x, ``$n`` group n (digits taken while the group
    exists), ``${name}`` a named group; ``$n`` past the last group is literal (Kafka)."""
    groups = pattern.groups
    pieces: list[_Piece] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            pieces.append("".join(literal))
            literal.clear()

    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 == len(text):
                raise _rule_error(rule, "the replacement ends with a lone \\")
            literal.append(text[i + 1])
            i += 2
        elif c != "$":
            literal.append(c)
            i += 1
        elif i + 1 == len(text):
            raise _rule_error(rule, "the replacement ends with a lone $")
        elif text[i + 1] == "{":
            end = text.find("}", i + 2)
            name = text[i + 2 : end] if end > 0 else ""
            if name not in pattern.groupindex:
                raise _rule_error(rule, f"the pattern has no group named {name!r}")
            flush()
            pieces.append(_Group(name))
            i = end + 1
        elif text[i + 1] in "0123456789":
            ref = int(text[i + 1])
            if ref > groups:
                if groups == 0:
                    raise _rule_error(rule, f"${ref}: the pattern has no groups")
                literal.append("$")
                i += 1
                continue
            i += 2
            while i < len(text) and text[i] in "0123456789" and ref * 10 + int(text[i]) <= groups:
                ref = ref * 10 + int(text[i])
                i += 1
            flush()
            pieces.append(_Group(ref))
        else:
            raise _rule_error(rule, "$ must be followed by a group number or {name}")
    flush()
    return tuple(pieces)


def _parse_rule(rule: str) -> PrincipalMappingRule:
    """``RULE:pattern/replacement/`` with an optional ``L`` or ``U``; ``rule`` is complete."""
    body = rule[len("RULE:") :]
    end = _until_slash(body, 0)
    if end == len(body):
        raise _rule_error(rule, "expected RULE:pattern/replacement/")
    source = body[:end]
    replacement_end = _until_slash(body, end + 1)
    if replacement_end == len(body):
        raise _rule_error(rule, "expected RULE:pattern/replacement/ (the closing / is missing)")
    case = body[replacement_end + 1 :]
    if case not in ("", "L", "U"):
        raise _rule_error(rule, f"unexpected {case!r} after the last /: expected L, U or nothing")
    try:
        pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", source))
    except re.error as exc:
        raise _rule_error(rule, f"bad pattern: {exc}") from None
    replacement = _replacement(rule, body[end + 1 : replacement_end], pattern)
    return PrincipalMappingRule(rule, pattern, replacement, case)


def _split_rules(text: str) -> list[str]:
    """The rules of the list, in order: commas separate rules, but not inside a RULE's
    pattern or replacement (which end at their unescaped slashes)."""
    rules = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
            pos += 1  # empty entries are ignored, as in Kafka
        if pos == len(text):
            break
        start = pos
        if text.startswith("RULE:", pos):
            pos = _until_slash(text, pos + len("RULE:"))
            pos = _until_slash(text, pos + 1)
            pos = min(pos + 1, len(text))
        comma = text.find(",", pos)
        pos = len(text) if comma < 0 else comma
        rules.append(text[start:pos].strip())
    return rules


@functools.lru_cache(maxsize=32)
def _parse_cached(text: str) -> PrincipalMappingRules:
    if not text.strip():
        return DEFAULT_RULES
    rules = []
    for rule in _split_rules(text):
        if rule == "DEFAULT":
            rules.append(PrincipalMappingRule("DEFAULT"))
        elif rule.startswith("RULE:"):
            rules.append(_parse_rule(rule))
        else:
            raise _rule_error(rule, "expected DEFAULT or RULE:pattern/replacement/[L|U]")
    return PrincipalMappingRules(tuple(rules))


def parse_principal_mapping_rules(text: str) -> PrincipalMappingRules:
    """Parse ``ssl.principal.mapping.rules`` (the broker calls it at start-up to refuse a
    bad value); SecurityConfigError naming the key and the rule."""
    return _parse_cached(text)


def principal_from_certificate(
    der: bytes | None, rules: str | PrincipalMappingRules = "DEFAULT"
) -> KafkaPrincipal:
    """The principal a (verified) peer certificate proves: ANONYMOUS without one, else
    ``User:`` and the name ``rules`` give its subject DN. AuthenticationError when no rule
    applies or the certificate is unreadable."""
    if der is None:
        return ANONYMOUS
    mapping = rules if isinstance(rules, PrincipalMappingRules) else _parse_cached(rules)
    try:
        dn = subject_dn(der)
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationError("the client certificate's subject is unreadable") from None
    name = mapping.name(dn)
    if name is None:
        raise AuthenticationError(f"no {PRINCIPAL_MAPPING_RULES_KEY} rule applies to {dn}")
    return KafkaPrincipal.user(name)


def peer_principal(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, rules: str | PrincipalMappingRules = "DEFAULT"
) -> KafkaPrincipal:
    """``principal_from_certificate`` of a finished handshake's peer certificate."""
    return principal_from_certificate(ssl_object.getpeercert(binary_form=True), rules)
