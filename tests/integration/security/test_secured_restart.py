"""A secured cluster across broker restarts (issue 20 meets issue 18): a restarted broker
logs in to its peers again, has its SCRAM credentials and ACLs before it serves, and a
client with ACLs keeps producing with no client-visible error."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from tests.integration.security.conftest import Secured, unique

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_a_user_keeps_producing_while_brokers_restart(secured: Secured) -> None:
    topic = secured.create_topic(unique("restarts"), partitions=3)
    user, password = unique("carol"), "carol-secret"
    secured.add_user(user, password)
    secured.acls("add", "--allow-principal", f"User:{user}", "--producer", "--topic", topic)
    mark = secured.log_mark()
    errors: list[KafkaError] = []
    acked: list[bytes] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(message.value())  # type: ignore[attr-defined]

    producer = Producer(
        secured.sasl_conf(
            user,
            password,
            acks="all",
            # Idempotent, as Kafka's own producer is by default: a batch retried after its
            # answer was lost to the crash is written once, so the values read back are
            # exactly the acknowledged ones (KIP-679 lets the topic WRITE ACL allow it).
            **{
                "error_cb": errors.append,
                "message.timeout.ms": "120000",
                "enable.idempotence": "true",
            },
        )
    )
    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.produce(topic, f"v{sent}".encode(), on_delivery=delivered)
            sent += 1
            producer.poll(0.01)

    produce_for(2.0)
    for broker_id in (2, 3):  # a clean restart, then a crash and restart
        secured.cluster.restart_broker(broker_id, crash=broker_id == 3)
        produce_for(3.0)
    assert producer.flush(120) == 0
    # Transient transport errors while a broker is down are librdkafka's retries; an
    # authentication or authorization error, or a failed delivery, is what an application
    # would stop on.
    fatal = [
        e
        for e in errors
        if e.code() != KafkaError._TRANSPORT and e.code() != KafkaError._ALL_BROKERS_DOWN
    ]
    assert fatal == [], fatal
    assert len(acked) == sent
    assert sorted(secured.read_values(topic)) == sorted(acked)
    # Brokers logged in to each other again, and nothing was refused.
    assert not mark.matching("SASL authentication failed")
    assert not mark.matching(r"is Denied")
