"""Real Kafka clients, unchanged, against secured clusters (issue 20): confluent-kafka
(librdkafka), kafka-python and aiokafka each produce with acks=all and consume in a group,
reading back every record, over

- SSL: mutual TLS with a client certificate ``CN=<name>`` issued for the test; ACLs are
  granted to ``User:<name>`` (``ssl.principal.mapping.rules``);
- SASL_PLAINTEXT with SCRAM-SHA-512;
- SASL_SSL with SCRAM-SHA-256 (three brokers, RF=3); there also PLAIN as the admin, and
  kcat once (with PLAIN: Debian's kcat, librdkafka 2.0.2, cannot log in with SCRAM; see
  test_kcat_scram_over_sasl_ssl).

After a SASL login, requests may exceed the pre-login frame limit (512 KiB).

Each mode's principal is made as an operator would: ``tidelog users add`` for SCRAM and
``tidelog acls add --producer --consumer`` on prefixed topic and group names.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.integration.security.conftest import Secured, unique

pytestmark = pytest.mark.integration

MODES = ["ssl", "sasl_plaintext", "sasl_ssl"]
#: The test principal's topics and groups (prefixed ACLs).
PREFIX = "app-"
RECORDS = 60


@dataclass
class Identity:
    """The test principal on one cluster and its settings for each client library."""

    secured: Secured
    name: str
    password: str = field(default="", repr=False)
    mechanism: str = ""
    keystore: Path | None = None

    @property
    def principal(self) -> str:
        return f"User:{self.name}"

    def librdkafka(self, **extra: str) -> dict[str, str]:
        if self.keystore is not None:
            return self.secured.cert_conf(self.keystore, **extra)
        return self.secured.sasl_conf(self.name, self.password, self.mechanism, **extra)

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.secured.tls_context(cert=self.keystore)

    def kafka_python(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap_servers": self.secured.bootstrap,
            "security_protocol": self.secured.protocol,
        }
        if self.secured.uses_tls:
            settings["ssl_cafile"] = str(self.secured.ca)
        if self.keystore is not None:
            settings["ssl_certfile"] = str(self.keystore)
            settings["ssl_keyfile"] = str(self.keystore)
        if self.mechanism:
            settings["sasl_mechanism"] = self.mechanism
            settings["sasl_plain_username"] = self.name
            settings["sasl_plain_password"] = self.password
        return settings

    def aiokafka(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap_servers": self.secured.bootstrap,
            "security_protocol": self.secured.protocol,
        }
        context = self.ssl_context()
        if context is not None:
            settings["ssl_context"] = context
        if self.mechanism:
            settings["sasl_mechanism"] = self.mechanism
            settings["sasl_plain_username"] = self.name
            settings["sasl_plain_password"] = self.password
        return settings


@pytest.fixture(scope="module")
def identity(secured: Secured) -> Identity:
    """A principal allowed to produce and consume ``app-*`` topics in ``app-*`` groups."""
    name = unique("app")
    if secured.mode == "ssl":
        ident = Identity(secured, name, keystore=secured.issue_client_cert(name))
    else:
        mechanism = "SCRAM-SHA-512" if secured.mode == "sasl_plaintext" else "SCRAM-SHA-256"
        ident = Identity(secured, name, password=f"pw-{name}-ü", mechanism=mechanism)
        secured.add_user(name, ident.password, mechanism)
    secured.acls(
        "add",
        "--allow-principal",
        ident.principal,
        "--producer",
        "--consumer",
        "--topic",
        PREFIX,
        "--group",
        PREFIX,
        "--resource-pattern-type",
        "prefixed",
    )
    return ident


def values(tag: str, n: int = RECORDS) -> list[bytes]:
    return [f"{tag}-{i:04d}".encode() for i in range(n)]


def assert_stored(secured: Secured, topic: str, sent: list[bytes]) -> None:
    """The admin reads exactly what was sent, each record once."""
    stored = secured.read_values(topic)
    assert sorted(stored) == sorted(sent)


# --- confluent-kafka --------------------------------------------------------------------------


def confluent_produce(conf: dict[str, str], topic: str, sent: list[bytes]) -> None:
    delivered: list[Any] = []
    producer = Producer({**conf, "acks": "all", "linger.ms": "5"})
    for i, value in enumerate(sent):
        producer.produce(
            topic, value, key=b"k%d" % i, on_delivery=lambda e, m: delivered.append((e, m))
        )
    assert producer.flush(60) == 0
    errors = [e for e, _ in delivered if e is not None]
    assert not errors, errors
    assert len(delivered) == len(sent)


def confluent_consume_group(conf: dict[str, str], topic: str, expected: int) -> list[bytes]:
    """Subscribe in a new group, read ``expected`` records, commit, and check the commit."""
    group = unique(f"{PREFIX}group")
    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                got.append(message.value())
        consumer.commit(asynchronous=False)
        partitions = consumer.assignment()
        committed = consumer.committed(partitions, timeout=10)
        assert sum(tp.offset for tp in committed) == expected, committed
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_confluent_kafka_produce_and_consume_in_a_group(
    secured: Secured, identity: Identity
) -> None:
    topic = secured.create_topic(unique(f"{PREFIX}confluent"), partitions=3)
    sent = values("confluent")
    confluent_produce(identity.librdkafka(), topic, sent)
    got = confluent_consume_group(identity.librdkafka(), topic, len(sent))
    assert sorted(got) == sorted(sent)
    assert_stored(secured, topic, sent)


# --- kafka-python -----------------------------------------------------------------------------


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_kafka_python_produce_and_consume_in_a_group(secured: Secured, identity: Identity) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = secured.create_topic(unique(f"{PREFIX}kafka-python"), partitions=3)
    sent = values("kafka-python")
    # kafka-python 3 turns idempotence on with acks=all: InitProducerId is authorized by
    # WRITE on a topic (KIP-679), which the principal has.
    producer = KafkaProducer(acks="all", **identity.kafka_python())
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=v) for i, v in enumerate(sent)]
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close()
    assert len(offsets) == len(sent)

    consumer = KafkaConsumer(
        topic,
        group_id=unique(f"{PREFIX}group"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **identity.kafka_python(),
    )
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    assert_stored(secured, topic, sent)


# --- aiokafka ---------------------------------------------------------------------------------


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_aiokafka_produce_and_consume_in_a_group(secured: Secured, identity: Identity) -> None:
    import aiokafka

    topic = secured.create_topic(unique(f"{PREFIX}aiokafka"), partitions=3)
    sent = values("aiokafka")

    async def scenario() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(acks="all", **identity.aiokafka())
        await producer.start()
        try:
            futures = [
                await producer.send(topic, key=b"k%d" % i, value=v) for i, v in enumerate(sent)
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            group_id=unique(f"{PREFIX}group"),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **identity.aiokafka(),
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < len(sent) and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got += [r.value for r in records if r.value is not None]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    assert sorted(got) == sorted(sent)
    assert_stored(secured, topic, sent)


@pytest.mark.parametrize("secured", ["sasl_plaintext", "sasl_ssl"], indirect=True)
def test_requests_larger_than_the_login_limit_after_login(
    secured: Secured, identity: Identity
) -> None:
    """Before a SASL login a frame may not exceed sasl.server.max.receive.size (512 KiB);
    after it, a 700 KB record (a larger Produce) goes through, and comes back in a Fetch."""
    topic = secured.create_topic(unique(f"{PREFIX}large"), partitions=1)
    big = bytes(range(256)) * (700_000 // 256)
    confluent_produce(identity.librdkafka(**{"message.max.bytes": "1000000"}), topic, [big])
    assert secured.read_values(topic) == [big]


# --- SASL_SSL only: PLAIN as the admin, kcat --------------------------------------------------


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_plain_login_as_admin(secured: Secured) -> None:
    """PLAIN knows the admin from the listener's JAAS config (user_admin=...)."""
    topic = secured.create_topic(unique("plain"), partitions=3)
    conf = secured.sasl_conf("admin", secured.admin_password, "PLAIN")
    sent = values("plain", 30)
    confluent_produce(conf, topic, sent)
    consumer = Consumer({**conf, "group.id": unique("plain"), "enable.auto.commit": "false"})
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(3)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def kcat_security(secured: Secured, mechanism: str, user: str, password: str) -> list[str]:
    return [
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        f"sasl.mechanisms={mechanism}",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={password}",
        "-X",
        f"ssl.ca.location={secured.ca}",
    ]


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_kcat_over_sasl_ssl(secured: Secured) -> None:
    """kcat (Debian's, librdkafka 2.0.2) produces and consumes over SASL_SSL. It logs in
    with PLAIN: its SCRAM is refused (test_kcat_scram_over_sasl_ssl)."""
    topic = secured.create_topic(unique(f"{PREFIX}kcat"), partitions=1)
    security = kcat_security(secured, "PLAIN", "admin", secured.admin_password)
    lines = [f"line-{i}" for i in range(50)]
    subprocess.run(
        ["kcat", "-b", secured.bootstrap, *security, "-P", "-t", topic, "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        ["kcat", "-b", secured.bootstrap, *security, "-C", "-t", topic, "-e", "-J"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(r["offset"], r["payload"]) for r in records] == list(enumerate(lines))
    assert secured.read_values(topic) == [line.encode() for line in lines]


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_kcat_scram_over_sasl_ssl(secured: Secured, identity: Identity) -> None:
    result = subprocess.run(
        [
            "kcat",
            "-b",
            secured.bootstrap,
            *kcat_security(secured, "SCRAM-SHA-256", identity.name, identity.password),
            "-L",
            "-m",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_launcher_tls_probe_closes_its_socket(secured: Secured) -> None:
    import gc
    import warnings

    from tidelog.testing.processes import api_versions_round_trip

    context = secured.tls_context()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert api_versions_round_trip("127.0.0.1", secured.port(), tls=context)
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
