"""Kafka client properties (a ``--command-config`` file, a local cluster's
``client.properties``) as librdkafka configuration for the bench's confluent-kafka clients.

The file may use Java's names or librdkafka's, as ``tidelog.security.client_config`` reads
it for tidelog's own client. Rules:

1. ``security.protocol`` PLAINTEXT (the default) needs nothing: the result is empty. Any
   other protocol is passed on upper-cased.
2. SASL: ``sasl.mechanisms`` from ``sasl.mechanism`` or ``sasl.mechanisms`` (PLAIN when
   neither is set, as tidelog's client: librdkafka's own default is GSSAPI), and
   ``sasl.username``/``sasl.password``, or the ``username``/``password`` options of Java's
   ``sasl.jaas.config`` (librdkafka has no such key).
3. TLS: Java's PEM stores map to librdkafka's keys: ``ssl.truststore.location`` ->
   ``ssl.ca.location``, ``ssl.truststore.certificates`` -> ``ssl.ca.pem``,
   ``ssl.keystore.location`` (one PEM file with the key and the chain) ->
   ``ssl.certificate.location`` and ``ssl.key.location``, ``ssl.keystore.key`` /
   ``ssl.keystore.certificate.chain`` -> ``ssl.key.pem`` / ``ssl.certificate.pem``.
   librdkafka's own ``ssl.*`` keys pass as they are. Java's empty
   ``ssl.endpoint.identification.algorithm`` (no host name check) is librdkafka's ``none``.
   A store whose ``ssl.truststore.type``/``ssl.keystore.type`` is not PEM (JKS, PKCS12) is
   a ``ValueError``: librdkafka reads PEM.
4. Every other key (``client.id``, ``request.timeout.ms``, ...) is left out, as the
   ``tidelog`` commands leave it: the bench's clients keep the settings its rows describe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tidelog.security.plain import parse_jaas_config

#: Java's PEM store keys -> librdkafka's (rule 3).
_JAVA_TLS: Final = {
    "ssl.truststore.location": ("ssl.ca.location",),
    "ssl.truststore.certificates": ("ssl.ca.pem",),
    "ssl.keystore.location": ("ssl.certificate.location", "ssl.key.location"),
    "ssl.keystore.key": ("ssl.key.pem",),
    "ssl.keystore.certificate.chain": ("ssl.certificate.pem",),
}
#: librdkafka's TLS keys, passed as they are (rule 3).
_LIBRDKAFKA_TLS: Final = (
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.cipher.suites",
    "enable.ssl.certificate.verification",
)
_ENDPOINT_CHECK: Final = "ssl.endpoint.identification.algorithm"


def librdkafka_settings(props: Mapping[str, str]) -> dict[str, str]:
    """Rules 1-4: the librdkafka settings of ``props`` (empty for PLAINTEXT)."""
    protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol == "PLAINTEXT":
        return {}
    out = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        out.update(_sasl(props))
    if protocol.endswith("SSL"):
        out.update(_tls(props))
    return out


def _sasl(props: Mapping[str, str]) -> dict[str, str]:
    mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "PLAIN"
    username = props.get("sasl.username", "")
    password = props.get("sasl.password", "")
    jaas = props.get("sasl.jaas.config", "")
    if jaas and not username:
        options = parse_jaas_config(jaas).options
        username = options.get("username", "")
        password = options.get("password", "")
    out = {"sasl.mechanisms": mechanism.strip().upper()}
    if username:
        out.update({"sasl.username": username, "sasl.password": password})
    return out


def _tls(props: Mapping[str, str]) -> dict[str, str]:
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = props.get(key, "PEM").strip().upper() or "PEM"
        if kind != "PEM":
            raise ValueError(f"{key}: {kind}: only PEM stores map to librdkafka's ssl.* keys")
    out: dict[str, str] = {}
    for java, names in _JAVA_TLS.items():
        if value := props.get(java, "").strip():
            out.update(dict.fromkeys(names, value))
    out.update({k: props[k] for k in _LIBRDKAFKA_TLS if props.get(k, "").strip()})
    if _ENDPOINT_CHECK in props:
        algorithm = props[_ENDPOINT_CHECK].strip().lower()
        out[_ENDPOINT_CHECK] = algorithm or "none"
    return out
