"""Named listeners (issue 20): Kafka's rules for listeners, the protocol map, advertised
listeners, the inter-broker listener and listener-prefixed security keys."""

from __future__ import annotations

import pytest

from tidelog.server.config.broker_config import ConfigError, Endpoint, load_broker_config

BASE = {"log.dirs": "/tmp/x", "broker.id": "1"}


def test_a_bare_host_port_is_one_plaintext_listener_and_the_inter_broker_one() -> None:
    config = load_broker_config({**BASE, "listeners": "127.0.0.1:9092"})
    assert config.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_named_listeners_map_to_their_protocols() -> None:
    config = load_broker_config(
        {
            **BASE,
            "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093,CLIENT://127.0.0.1:0",
            "advertised.listeners": "EXTERNAL://broker1.example:9093",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    protocols = {e.name: e.security_protocol for e in config.listeners}
    assert protocols == {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL", "CLIENT": "PLAINTEXT"}
    advertised = {e.name: (e.host, e.port) for e in config.advertised_listeners}
    # Names not advertised fall back to the listener itself (Kafka's rule).
    assert advertised == {
        "INTERNAL": ("127.0.0.1", 9092),
        "EXTERNAL": ("broker1.example", 9093),
        "CLIENT": ("127.0.0.1", 0),
    }
    assert config.inter_broker_listener == Endpoint("INTERNAL", "127.0.0.1", 9092, "SSL")
    assert config.inter_broker_listener.uses_tls
    assert not config.inter_broker_listener.uses_sasl


def test_the_inter_broker_listener_may_be_named_by_its_protocol() -> None:
    config = load_broker_config(
        {
            **BASE,
            "listeners": "SSL://127.0.0.1:1,SASL_SSL://127.0.0.1:2",
            "security.inter.broker.protocol": "SASL_SSL",
        }
    )
    assert config.inter_broker_listener.port == 2


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        (
            {"listeners": "SSL://h:1,SASL_SSL://h:2"},
            "security.inter.broker.protocol",
            "no listener is named PLAINTEXT",
        ),
        (
            {"listeners": "SSL://h:1", "advertised.listeners": "SASL_SSL://h:1"},
            "advertised.listeners",
            "SASL_SSL is not one of the listeners (SSL)",
        ),
        (
            {
                "listeners": "SSL://h:1",
                "inter.broker.listener.name": "SSL",
                "security.inter.broker.protocol": "SSL",
            },
            "inter.broker.listener.name",
            "only one of",
        ),
        (
            {"listeners": "SSL://h:1,SSL://h:2"},
            "listeners",
            "listener name SSL is given twice",
        ),
        (
            {"listener.security.protocol.map": "A:SSL,a:SSL"},
            "listener.security.protocol.map",
            "listener a is mapped twice",
        ),
    ],
)
def test_listener_mistakes_name_the_key(props: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_broker_config({**BASE, **props})
    assert info.value.key == key
    assert message in str(info.value)


def test_listener_prefixed_security_keys_win_over_broker_wide_ones() -> None:
    config = load_broker_config(
        {
            **BASE,
            "listeners": "PLAINTEXT://h:1,SASL_SSL://h:2",
            "ssl.keystore.location": "/all.pem",
            "listener.name.sasl_ssl.ssl.keystore.location": "/sasl.pem",
            "listener.name.SASL_SSL.scram-sha-256.sasl.jaas.config": "x required;",
        }
    )
    assert config.listener_value("SASL_SSL", "ssl.keystore.location") == "/sasl.pem"
    assert config.listener_value("PLAINTEXT", "ssl.keystore.location") == "/all.pem"
    assert config.listener_value("SASL_SSL", "scram-sha-256.sasl.jaas.config") == "x required;"
    assert config.listener_value("PLAINTEXT", "ssl.truststore.location") == ""
    assert config.listener_value("SASL_SSL", "ssl.client.auth") == "none"


def test_an_unknown_listener_prefixed_key_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_broker_config({**BASE, "listener.name.ssl.log.retention.ms": "1"})
    assert info.value.key == "listener.name.ssl.log.retention.ms"
