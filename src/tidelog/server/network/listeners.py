"""The broker's listeners and the security of each (issue 20).

Rules:

1. One asyncio server per ``listeners`` entry; a connection knows its listener's name and
   security protocol (``tidelog.server.network.connection`` rule 6).
2. SSL and SASL_SSL listeners get a server ``ssl.SSLContext`` built from the listener's
   ``ssl.*`` keys (``listener.name.<l>.ssl.*`` first, then the broker-wide key: Kafka's
   precedence). With ``ssl.client.auth`` requested/required, a client certificate's subject
   becomes the principal through ``ssl.principal.mapping.rules``.
3. SASL_PLAINTEXT and SASL_SSL listeners give each connection an authenticator. Its PLAIN
   users come from the listener's JAAS config (``listener.name.<l>.plain.sasl.jaas.config``,
   else ``sasl.jaas.config``: ``user_<name>="<password>"`` options); SCRAM credentials from
   ZooKeeper's ``/config/users`` (``tidelog.zk.users``), cached in memory.
4. The broker's own connections to its peers (replica fetchers, the controller's requests,
   transaction markers) use the inter-broker listener's protocol, its TLS trust, and the
   ``username``/``password`` of its JAAS config for ``sasl.mechanism.inter.broker.protocol``.
5. Everything is checked at start-up: a listener that cannot be secured (no keystore, bad
   JAAS text, SASL with no mechanism enabled) stops the broker with the key named.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.errors import ConfigError
from tidelog.security import ssl_principal, tls
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.security.errors import SecurityConfigError
from tidelog.security.plain import parse_jaas_config
from tidelog.security.plain import plain_users as users_of
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.config.broker_config import BrokerConfig, Endpoint

#: Mechanisms tidelog can serve.
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What a new connection on one listener needs (rules 2-3)."""

    endpoint: Endpoint
    tls: ssl.SSLContext | None = None
    tls_principal: Callable[[ssl.SSLObject], KafkaPrincipal] | None = None


def enabled_mechanisms(config: BrokerConfig, listener: str) -> list[str]:
    raw = config.listener_value(listener, "sasl.enabled.mechanisms")
    mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
    for mechanism in mechanisms:
        if mechanism not in SERVED_MECHANISMS:
            raise ConfigError(
                "sasl.enabled.mechanisms",
                f"{mechanism} is not offered (tidelog serves {', '.join(SERVED_MECHANISMS)})",
            )
    if not mechanisms:
        raise ConfigError("sasl.enabled.mechanisms", f"listener {listener} enables no mechanism")
    return mechanisms


def jaas_text(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """(key, JAAS text) for ``mechanism`` on ``listener`` (rule 3): the listener- and
    mechanism-prefixed key, then ``sasl.jaas.config``."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.prefixed.get(key)
    if text is not None:
        return key, text
    return "sasl.jaas.config", config.get_str("sasl.jaas.config")


def plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    key, text = jaas_text(config, listener, "PLAIN")
    if not text:
        return {}
    try:
        return dict(users_of(parse_jaas_config(text, key=key)))
    except SecurityConfigError as exc:
        raise ConfigError(exc.key, str(exc)) from None


def listener_security(config: BrokerConfig, endpoint: Endpoint) -> ListenerSecurity:
    """Rule 2 for one listener (rule 5: errors name the key)."""
    if not endpoint.uses_tls:
        return ListenerSecurity(endpoint)

    def get(key: str) -> str:
        return config.listener_value(endpoint.name, key)

    try:
        context = tls.server_context(get)
        rules = get("ssl.principal.mapping.rules") or "DEFAULT"
        ssl_principal.parse_principal_mapping_rules(rules)
    except SecurityConfigError as exc:
        raise ConfigError(exc.key, f"listener {endpoint.name}: {exc}") from None

    def principal(ssl_object: ssl.SSLObject) -> KafkaPrincipal:
        return ssl_principal.principal_from_certificate(
            ssl_object.getpeercert(binary_form=True), rules
        )

    return ListenerSecurity(endpoint, context, principal)


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """Rule 4: how this broker connects to its peers."""
    endpoint = config.inter_broker_listener
    if endpoint.security_protocol == "PLAINTEXT":
        return PLAINTEXT
    props: dict[str, str] = {"security.protocol": endpoint.security_protocol}
    if endpoint.uses_tls:
        for key in (
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.certificates",
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.key",
            "ssl.keystore.certificate.chain",
            "ssl.key.password",
            "ssl.endpoint.identification.algorithm",
            "ssl.enabled.protocols",
        ):
            value = config.listener_value(endpoint.name, key)
            if value:
                props[key] = value
    if endpoint.uses_sasl:
        mechanism = config.get_str("sasl.mechanism.inter.broker.protocol").upper()
        key, text = jaas_text(config, endpoint.name, mechanism)
        if not text:
            raise ConfigError(
                key,
                f"the inter-broker listener {endpoint.name} uses SASL {mechanism}: give the "
                'broker\'s own username="..." password="..." in its JAAS config',
            )
        props["sasl.mechanism"] = mechanism
        props["sasl.jaas.config"] = text
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise ConfigError(exc.key, f"inter-broker listener {endpoint.name}: {exc}") from None
