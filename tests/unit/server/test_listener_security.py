"""How a broker secures its listeners and its own connections to peers
(``tidelog.server.network.listeners``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.errors import ConfigError
from tidelog.security.certs import generate_local_pki
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.network.listeners import (
    enabled_mechanisms,
    inter_broker_security,
    listener_security,
    plain_users,
)

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-pw";'
)


def test_a_plaintext_listener_needs_no_tls(tmp_path: Path) -> None:
    config = load_broker_config({"broker.id": "1", "log.dirs": str(tmp_path)})
    setup = listener_security(config, config.listener)
    assert setup.tls is None
    assert setup.tls_principal is None
    assert inter_broker_security(config).protocol == "PLAINTEXT"


def test_a_tls_listener_without_a_keystore_names_the_key(tmp_path: Path) -> None:
    config = load_broker_config(
        {"broker.id": "1", "log.dirs": str(tmp_path), "listeners": "SSL://127.0.0.1:1"}
    )
    with pytest.raises(ConfigError, match=r"ssl\.keystore"):
        listener_security(config, config.listener)


def test_tls_listeners_and_peers_use_the_listeners_keys(tmp_path: Path) -> None:
    pki = generate_local_pki(tmp_path / "pki", brokers=[1])
    config = load_broker_config(
        {
            "broker.id": "1",
            "log.dirs": str(tmp_path),
            "listeners": "INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.location": str(pki.brokers[1]),
            "ssl.truststore.location": str(pki.ca_cert),
            "listener.name.external.ssl.client.auth": "required",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        }
    )
    external = next(e for e in config.listeners if e.name == "EXTERNAL")
    setup = listener_security(config, external)
    assert setup.tls is not None
    assert setup.tls.verify_mode.name == "CERT_REQUIRED"
    peers = inter_broker_security(config)
    assert (peers.protocol, peers.sasl_mechanism, peers.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "broker",
    )
    assert peers.ssl_context is not None


def test_sasl_between_brokers_needs_the_brokers_own_login(tmp_path: Path) -> None:
    pki = generate_local_pki(tmp_path / "pki", brokers=[1])
    config = load_broker_config(
        {
            "broker.id": "1",
            "log.dirs": str(tmp_path),
            "listeners": "SASL_SSL://127.0.0.1:1",
            "ssl.keystore.location": str(pki.brokers[1]),
        }
    )
    with pytest.raises(ConfigError) as info:
        inter_broker_security(config)
    assert info.value.key == "sasl.jaas.config"
    assert 'username="..." password="..."' in str(info.value)


def test_plain_users_come_from_the_listeners_jaas_config(tmp_path: Path) -> None:
    config = load_broker_config(
        {
            "broker.id": "1",
            "log.dirs": str(tmp_path),
            "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="a" password="a-pw" user_a="a-pw" user_b="b-pw";'
            ),
        }
    )
    assert plain_users(config, "SASL_PLAINTEXT") == {"a": "a-pw", "b": "b-pw"}
    assert enabled_mechanisms(config, "SASL_PLAINTEXT") == [
        "PLAIN",
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    ]


@pytest.mark.parametrize(
    ("mechanisms", "message"), [("GSSAPI", "GSSAPI is not offered"), (" ", "enables no")]
)
def test_mechanisms_tidelog_cannot_serve_are_refused(
    tmp_path: Path, mechanisms: str, message: str
) -> None:
    config = load_broker_config(
        {"broker.id": "1", "log.dirs": str(tmp_path), "sasl.enabled.mechanisms": mechanisms}
    )
    with pytest.raises(ConfigError, match=message):
        enabled_mechanisms(config, "SASL_SSL")
