"""Spark's ``kafka.security.protocol``/``kafka.sasl.*``/``kafka.ssl.*`` options: checked on
the driver (errors name the option, never a secret), carried as plain pickled strings, kept
out of reprs, and turned into the ``ClientSecurity`` of every client the connector builds,
on the driver and on executors."""

from __future__ import annotations

import datetime
import pickle
from pathlib import Path
from typing import Any

import pytest

from tidelog.security.client_config import PLAINTEXT
from tidelog.spark.option_values import client_security
from tidelog.spark.options import (
    ReadOptions,
    SparkOptionError,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)

SECRET = "spark-secret-pw"
READ = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}
WRITE = {"kafka.bootstrap.servers": "h:9092", "topic": "t"}
SCRAM = {
    "kafka.security.protocol": "SASL_PLAINTEXT",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="spark" password="{SECRET}";'
    ),
}


def _read(extra: dict[str, str]) -> ReadOptions:
    return parse_read_options({**READ, **extra}, streaming=False)


def _write(extra: dict[str, str]) -> WriteOptions:
    return parse_write_options({**WRITE, **extra})


def _ca_pem(tmp_path: Path) -> Path:
    """A self-signed CA certificate (PEM), enough for a truststore."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


# --- parsing -----------------------------------------------------------------------------------


def test_no_security_options_is_plaintext() -> None:
    options = _read({})
    assert options.security_properties == ()
    assert client_security(options.security_properties) is PLAINTEXT


@pytest.mark.parametrize("parse", [_read, _write])
def test_sasl_options_become_client_properties(parse: Any) -> None:
    options = parse(SCRAM)
    props = dict(options.security_properties)
    assert set(props) == {"security.protocol", "sasl.mechanism", "sasl.jaas.config"}
    security = client_security(options.security_properties)
    assert (security.protocol, security.sasl_mechanism, security.sasl_username) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "spark",
    )
    assert security.sasl_password == SECRET


def test_username_password_options_and_key_case() -> None:
    options = _write(
        {
            "KAFKA.security.protocol": "sasl_plaintext",
            "kafka.SASL.mechanism": "PLAIN",
            "kafka.sasl.username": "spark",
            "kafka.sasl.password": SECRET,
        }
    )
    assert dict(options.security_properties)["sasl.username"] == "spark"
    assert client_security(options.security_properties).sasl_mechanism == "PLAIN"


def test_ssl_options(tmp_path: Path) -> None:
    ca = _ca_pem(tmp_path)
    options = _read(
        {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": str(ca),
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    assert dict(options.security_properties)["ssl.truststore.location"] == str(ca)
    security = client_security(options.security_properties)
    assert security.uses_tls
    assert security.ssl_context is not None


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ({"kafka.security.protocol": "KERBEROS"}, "kafka.security.protocol"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"},
            "kafka.sasl.mechanism",
        ),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.password": SECRET},
            "kafka.sasl.username",
        ),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.jaas.config": f'Login required username="u" password="{SECRET}"',
            },
            "kafka.sasl.jaas.config",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/no/ca.pem"},
            "kafka.ssl.truststore.location",
        ),
    ],
)
@pytest.mark.parametrize("parse", [_read, _write])
def test_bad_security_option_names_it_not_the_secret(
    parse: Any, extra: dict[str, str], option: str
) -> None:
    with pytest.raises(SparkOptionError) as info:
        parse(extra)
    message = str(info.value)
    assert message.startswith(f"option '{option}': ")
    assert SECRET not in message


def test_unknown_kafka_properties_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As Spark's connector hands unknown kafka.* keys to the Kafka client, which logs them.
    _read({"kafka.sasl.kerberos.service.name": "kafka"})
    _write({"kafka.nonsense": "1"})
    assert "option 'kafka.sasl.kerberos.service.name' is not a Kafka client property" in (
        caplog.text
    )
    assert "option 'kafka.nonsense' is not a Kafka client property" in caplog.text


def test_secrets_stay_out_of_reprs_and_pickle_travels() -> None:
    read = _read(SCRAM)
    write = _write({**SCRAM, "exactlyOnce": "true"})
    for options in (read, write):
        assert SECRET not in repr(options)
        assert "security_properties" not in repr(options)
        back = pickle.loads(pickle.dumps(options))
        assert back == options
        assert client_security(back.security_properties).sasl_username == "spark"


# --- every client the connector builds ---------------------------------------------------------


class BuiltError(Exception):
    """Raised by the fake BlockingClient once it has seen its arguments."""


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    pytest.importorskip("pyarrow")  # the spark extra
    from tidelog.spark import session as connector

    captured: dict[str, Any] = {}

    def fake(bootstrap: str, **kwargs: Any) -> Any:
        captured.update(kwargs, bootstrap=bootstrap)
        raise BuiltError

    monkeypatch.setattr(connector, "BlockingClient", fake)
    return captured


def _check(seen: dict[str, Any]) -> None:
    assert seen["bootstrap"] == "h:9092"
    assert seen["security"].sasl_username == "spark"
    assert seen["security"].sasl_mechanism == "SCRAM-SHA-512"


def test_driver_offset_reader(seen: dict[str, Any]) -> None:
    from tidelog.spark.offset_reader import OffsetReader

    with pytest.raises(BuiltError):
        _ = OffsetReader(_read(SCRAM)).session.client
    _check(seen)


def test_executor_read_range(seen: dict[str, Any]) -> None:
    import pyarrow as pa

    from tidelog.model import TopicPartition
    from tidelog.spark.read_loop import read_range

    options = pickle.loads(pickle.dumps(_read(SCRAM)))  # as an executor gets it
    with pytest.raises(BuiltError):
        next(iter(read_range(options, TopicPartition("t", 0), 0, 10, pa.schema([]))))
    _check(seen)


def test_producers(seen: dict[str, Any]) -> None:
    from tidelog.spark.producer import Producer
    from tidelog.spark.transactions import TransactionalProducer, _session

    options = pickle.loads(pickle.dumps(_write({**SCRAM, "exactlyOnce": "true"})))
    producer = Producer(
        options.bootstrap_servers,
        client_id="c",
        request_timeout_ms=1000,
        acks=-1,
        retry_timeout_ms=1000,
        security_properties=options.security_properties,
    )
    for session in (
        producer.session,
        TransactionalProducer(options, "tx-0").session,
        _session(options),
    ):
        seen.clear()
        with pytest.raises(BuiltError):
            _ = session.client
        _check(seen)
