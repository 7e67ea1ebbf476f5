"""Create-topic and alter-config policies (KIP-108, KIP-133) as Python classes, on a real
broker, seen by confluent-kafka's AdminClient and kafka-python's KafkaAdminClient."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import PolicyViolationError

from tests.harness import BrokerProcess

pytestmark = pytest.mark.integration

#: Written next to the broker's config: ``python -m tidelog`` runs with that directory as
#: its working directory, so the broker imports it like an operator's own module.
POLICY_MODULE = """
from tidelog.server.config.policies import PolicyViolationError


class NoScratchTopics:
    def validate(self, request):
        if request.topic.startswith("scratch-"):
            raise PolicyViolationError(f"Topic {request.topic}: scratch topics are not allowed.")
        if request.num_partitions is not None and request.num_partitions > 8:
            raise PolicyViolationError("At most 8 partitions.")


class RetentionAtLeastAMinute:
    def configure(self, configs):
        self.broker_id = configs["broker.id"]

    def validate(self, request):
        value = request.configs.get("retention.ms")
        if request.resource_type == "TOPIC" and value is not None and int(value) < 60000:
            raise PolicyViolationError(
                f"retention.ms={value} on {request.resource_name} is below one minute "
                f"(broker {self.broker_id})."
            )
"""


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("policed")
    (directory / "site_policies.py").write_text(POLICY_MODULE, encoding="utf-8")
    broker = BrokerProcess(
        directory,
        {
            "create.topic.policy.class.name": "site_policies.NoScratchTopics",
            "alter.config.policy.class.name": "site_policies:RetentionAtLeastAMinute",
        },
    ).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_create_topic_policy_refuses_with_policy_violation(policed: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": policed.bootstrap})
    futures = admin.create_topics(
        [NewTopic("scratch-1", 1, 1), NewTopic("big", 9, 1), NewTopic("fine", 2, 1)]
    )
    for name, expected in (
        ("scratch-1", "scratch topics are not allowed"),
        ("big", "At most 8 partitions."),
    ):
        with pytest.raises(KafkaException) as refused:
            futures[name].result(timeout=30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert expected in error.str()
    futures["fine"].result(timeout=30)
    # validate_only asks the policy too (Kafka's order).
    dry = admin.create_topics([NewTopic("scratch-2", 1, 1)], validate_only=True)
    with pytest.raises(KafkaException) as refused:
        dry["scratch-2"].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "scratch-2" not in admin.list_topics(timeout=30).topics


def test_alter_config_policy_sees_the_resulting_configs(policed: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": policed.bootstrap})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(timeout=30)

    def setting(value: str) -> ConfigResource:
        entry = ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)
        return ConfigResource("TOPIC", "kept", incremental_configs=[entry])

    resource = setting("1000")
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    error = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert "retention.ms=1000 on kept is below one minute (broker 0)." in error.str()
    allowed = setting("120000")
    admin.incremental_alter_configs([allowed])[allowed].result(timeout=30)
    described = admin.describe_configs([ConfigResource("TOPIC", "kept")])
    (entries,) = (f.result(timeout=30) for f in described.values())
    assert entries["retention.ms"].value == "120000"
    # kafka-python: the same refusal, as its PolicyViolationError.
    kadmin = KafkaAdminClient(bootstrap_servers=policed.bootstrap)
    try:
        with pytest.raises(PolicyViolationError):
            kadmin.create_topics([KNewTopic("scratch-k", 1, 1)])
    finally:
        kadmin.close()


def test_a_policy_that_cannot_load_stops_the_broker_naming_the_key(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"create.topic.policy.class.name": "no_such_module.Policy"})
    broker.write_config()
    done = subprocess.run(
        broker.command(), check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "invalid configuration: create.topic.policy.class.name: cannot load" in done.stderr
    assert "no_such_module" in done.stderr
