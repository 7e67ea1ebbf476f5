"""``tidelog cluster up --security``: the settings a secured local cluster runs with."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tidelog.cli import local_security
from tidelog.server.config.broker_config import load_broker_config


def test_plaintext_needs_nothing(tmp_path: Path) -> None:
    assert local_security.prepare(tmp_path, "plaintext") is None
    assert not (tmp_path / "security").exists()


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--security must be one of plaintext, ssl"):
        local_security.prepare(tmp_path, "kerberos")


def test_secrets_are_private_and_reused(tmp_path: Path) -> None:
    first = local_security.prepare(tmp_path, "sasl_ssl")
    again = local_security.prepare(tmp_path, "sasl_ssl")
    assert first is not None
    assert again is not None
    assert (first.admin_password, first.zk_digest) == (again.admin_password, again.zk_digest)
    secrets_file = tmp_path / "security" / "secrets.json"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "security").stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", ["ssl", "sasl_plaintext", "sasl_ssl"])
def test_every_mode_gives_a_valid_broker_config(tmp_path: Path, mode: str) -> None:
    security = local_security.prepare(tmp_path, mode)
    assert security is not None
    props = security.broker_properties(2, 9093, [1, 2, 3])
    config = load_broker_config({**props, "broker.id": "2", "log.dirs": str(tmp_path / "l")})
    (listener,) = config.listeners
    assert (listener.security_protocol, listener.port) == (mode.upper(), 9093)
    assert config.inter_broker_listener_name == mode.upper()
    assert config.get_bool("zookeeper.set.acl")
    assert config.get_str("authorizer.class.name")
    assert "User:admin" in config.get_str("super.users").split(";")
    if mode == "ssl":
        assert config.get_str("ssl.client.auth") == "required"
        assert "User:broker-2" in config.get_str("super.users").split(";")


def test_the_admin_client_properties_log_in_as_admin(tmp_path: Path) -> None:
    security = local_security.prepare(tmp_path, "sasl_ssl")
    assert security is not None
    path = security.write_client_properties(tmp_path, [1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text(encoding="utf-8")
    assert "security.protocol=SASL_SSL\n" in text
    assert "sasl.username=admin\n" in text
    client = security.client_security()
    assert client.uses_tls
    assert client.uses_sasl
    assert (client.sasl_mechanism, client.sasl_username) == ("SCRAM-SHA-512", "admin")
    assert client.sasl_password not in repr(client)
