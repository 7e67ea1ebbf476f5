"""``tidelog bench --bootstrap-server`` (tidelog.bench.external, tidelog.bench.client_conf):
topic names and factors, the topics a run creates and deletes (a fake admin client), the
client settings of ``--command-config``, and the report's account of the cluster."""

from __future__ import annotations

import re
from array import array
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidelog.bench import e2e, external
from tidelog.bench.client_conf import librdkafka_settings
from tidelog.bench.report import render_markdown


def test_default_replication_factor_is_three_or_every_broker_of_a_smaller_cluster() -> None:
    assert [external.default_replication_factor(n) for n in (1, 2, 3, 5)] == [1, 2, 3, 3]


def test_topic_names_carry_the_prefix_and_the_run_id_and_differ() -> None:
    names = external.topic_names("perf.", "0a1b2c3d", [100, 65536], [1000])
    assert names == {
        "produce-acks-all-100": "perf.0a1b2c3d-produce-acks-all-100",
        "produce-acks-all-65536": "perf.0a1b2c3d-produce-acks-all-65536",
        "produce-acks-1-100": "perf.0a1b2c3d-produce-acks-1-100",
        "produce-acks-1-65536": "perf.0a1b2c3d-produce-acks-1-65536",
        "e2e-1000": "perf.0a1b2c3d-e2e-1000",
    }
    assert len(external.new_run_id()) == 8
    assert external.new_run_id() != external.new_run_id()


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        ("my topics-", "contains a character other than ASCII alphanumerics"),
        ("x" * 240, "can't be longer than 249 characters"),
    ],
)
def test_an_illegal_prefix_is_refused_with_kafkas_reason(prefix: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        external.topic_names(prefix, "0a1b2c3d", [100], [])


def test_acks_1_rows_are_rf_1_and_the_others_take_the_factor() -> None:
    target = external.Target("b:9092", {}, None, 3, "p-")
    topics = external.plan(target, 2, "r", [100], [1000, 10_000])
    factors = {key: t.replication_factor for key, t in topics.items()}
    assert factors == {
        "produce-acks-all-100": 2,
        "produce-acks-1-100": 1,
        "e2e-1000": 2,
        "e2e-10000": 2,
    }


# --- the topics of a run, on a fake admin client ------------------------------------------


def _done(value: Any = None) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def _failed(code: int, reason: str) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(KafkaException(KafkaError(code, reason)))
    return future


class FakeAdmin:
    """CreateTopics refuses the names in ``refuse`` with INVALID_REPLICATION_FACTOR;
    Metadata shows every existing topic led by broker 0 with a full ISR."""

    def __init__(self, existing: set[str], refuse: frozenset[str] = frozenset()) -> None:
        self.topics: dict[str, tuple[int, int]] = dict.fromkeys(existing, (1, 1))
        self.refuse = refuse
        self.deleted: list[str] = []
        #: False: Metadata gets no answer (the cluster went away).
        self.answering = True

    def create_topics(self, new: list[Any], **_: Any) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        for t in new:
            if t.topic in self.refuse:
                out[t.topic] = _failed(
                    38, "Replication factor: 2 larger than available brokers: 1."
                )
            else:
                self.topics[t.topic] = (t.num_partitions, t.replication_factor)
                out[t.topic] = _done()
        return out

    def delete_topics(self, names: list[str], **_: Any) -> dict[str, Future[Any]]:
        self.deleted += names
        for name in names:
            self.topics.pop(name, None)
        return {name: _done() for name in names}

    def poll(self, timeout: float) -> int:
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        if not self.answering:
            raise KafkaException(KafkaError(-185, "Failed while waiting for response"))

        def partitions(count: int, rf: int) -> dict[int, Any]:
            isr = list(range(rf))
            return {p: SimpleNamespace(id=p, leader=0, isrs=isr, error=None) for p in range(count)}

        topics = {
            name: SimpleNamespace(error=None, partitions=partitions(*shape))
            for name, shape in self.topics.items()
        }
        return SimpleNamespace(topics=topics, brokers={0: None}, cluster_id="cid", controller_id=0)


def _cluster(admin: FakeAdmin, prefix: str = "tidelog-bench-") -> external.ExternalCluster:
    target = external.Target("b:9092", {}, None, 3, prefix)
    info = external.ClusterInfo("b:9092", "cid", 1, 0)
    topics = external.plan(target, 1, "run1", [100], [1000])
    return external.ExternalCluster(target, admin, info, 1, topics)


def test_a_run_deletes_what_it_created_and_nothing_else() -> None:
    # A topic of the user's whose name starts with the prefix too.
    admin = FakeAdmin({"tidelog-bench-keep", "orders"})
    said: list[str] = []
    cluster = _cluster(admin)
    cluster.create_topics(said.append)
    mine = {t.name for t in cluster.topics.values()}
    assert set(cluster.created) == mine
    assert all(admin.topics[name] == (3, 1) for name in mine)
    assert said == ["created 3 topics on b:9092 (3 partitions, RF 1 for acks=all and e2e)"]

    cluster.delete(["tidelog-bench-run1-e2e-1000", "tidelog-bench-keep"], said.append)
    assert admin.deleted == ["tidelog-bench-run1-e2e-1000"]
    cluster.close(said.append)
    assert set(admin.deleted) == mine
    assert set(admin.topics) == {"tidelog-bench-keep", "orders"}
    cluster.close(said.append)  # nothing left: no DeleteTopics at all
    assert len(admin.deleted) == len(mine)


def test_a_cluster_gone_mid_run_fails_its_rows_at_once_and_leaves_its_topics_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = FakeAdmin(set())
    said: list[str] = []
    cluster = _cluster(admin)
    cluster.create_topics(said.append)
    admin.answering = False

    def no_worker(*_: Any) -> Any:
        raise AssertionError("a load generator started against a cluster that is gone")

    monkeypatch.setattr(external, "run_parallel", no_worker)
    monkeypatch.setattr(external, "measure_e2e", no_worker)
    gone = "cannot reach the cluster at b:9092 within 10 s: Failed while waiting for response"
    with pytest.raises(external.ExternalClusterError, match="^" + re.escape(gone) + "$"):
        cluster.produce_rows([100], 1.0, 1, said.append)
    with pytest.raises(external.ExternalClusterError, match="^" + re.escape(gone) + "$"):
        cluster.e2e_rows([1000], 1.0, said.append)
    assert admin.deleted == []
    # Each row's topic is named when its deletion is given up.
    assert said[1:] == [
        f"could not delete topics tidelog-bench-run1-produce-acks-all-100: {gone}",
        f"could not delete topics tidelog-bench-run1-e2e-1000: {gone}",
    ]
    assert set(cluster.created) == set(admin.topics)


def test_a_produce_row_says_what_was_not_acknowledged() -> None:
    values = {"sent": 1000, "records": 700, "errors": 200, "first_errors": ["Local: Timed out"]}
    assert external.unacknowledged(values) == (
        "300 of 1000 records sent were not acknowledged: 200 delivery errors (first: Local: "
        "Timed out); 100 still queued when the producer stopped waiting"
    )
    values = {"sent": 10, "records": 4, "errors": 6, "first_errors": []}
    assert external.unacknowledged(values) == (
        "6 of 10 records sent were not acknowledged: 6 delivery errors"
    )


def test_a_refused_topic_is_kafkas_error_and_the_created_ones_are_deleted() -> None:
    admin = FakeAdmin(set(), refuse=frozenset({"tidelog-bench-run1-e2e-1000"}))
    cluster = _cluster(admin)
    with pytest.raises(external.ExternalClusterError) as caught:
        cluster.create_topics(lambda _: None)
    assert caught.value.code == 38
    assert str(caught.value) == (
        "topic tidelog-bench-run1-e2e-1000: Replication factor: 2 larger than available brokers: 1."
    )
    cluster.close(lambda _: None)
    assert admin.topics == {}
    assert "tidelog-bench-run1-e2e-1000" not in admin.deleted


def test_an_unanswered_metadata_request_is_one_error_naming_the_servers() -> None:
    class Unreachable:
        """Metadata gets no answer; ``poll`` serves the errors librdkafka saw meanwhile."""

        def __init__(self, errors: external.ClientErrors, seen: list[KafkaError]) -> None:
            self.errors, self.seen = errors, seen

        def list_topics(self, timeout: float) -> Any:
            raise KafkaException(KafkaError(-195, "Failed to get metadata: transport failure"))

        def poll(self, timeout: float) -> None:
            for err in self.seen:
                self.errors(err)

    def refusal(seen: list[KafkaError]) -> external.ExternalClusterError:
        errors = external.ClientErrors()
        with pytest.raises(external.ExternalClusterError) as caught:
            external.describe_cluster(Unreachable(errors, seen), "h:1", 2, errors)
        return caught.value

    down = KafkaError(-187, "1/1 brokers are down")
    nobody = refusal([down])
    assert str(nobody) == (
        "cannot reach the cluster at h:1 within 2 s: Failed to get metadata: transport failure"
    )
    assert nobody.code is None  # a local error: no Kafka error code
    tls = refusal([KafkaError(-181, "h:1/bootstrap: SSL handshake failed"), down])
    assert str(tls).endswith("transport failure (last error: h:1/bootstrap: SSL handshake failed)")
    login = refusal([down, KafkaError(-169, "h:1/bootstrap: SASL authentication error: bad")])
    assert str(login) == (
        "the cluster at h:1 refused the login: h:1/bootstrap: SASL authentication error: bad"
    )
    assert login.code == 58  # SASL_AUTHENTICATION_FAILED


def test_e2e_values_leave_out_the_first_second() -> None:
    sent = {
        "sent": 4,
        "errors": 0,
        "unflushed": 0,
        "ack_latencies": array("d", [9.0, 0.001, 0.002, 0.003]).tobytes(),
    }
    got = {"received": 4, "latencies": array("d", [9.0, 0.010, 0.020, 0.030]).tobytes()}
    v = e2e.summarise_e2e(sent, got, rate=1)
    assert (v["measured"], v["received"], v["sent"]) == (3, 4, 4)
    assert v["latency_ms"]["max"] == pytest.approx(30.0)
    assert v["produce_ack_latency_ms"]["p99.9"] == pytest.approx(3.0)


# --- --command-config as librdkafka settings ----------------------------------------------


def test_java_names_map_to_librdkafkas() -> None:
    props = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="bench" password="s3cret";',
        "ssl.truststore.location": "/pki/ca.pem",
        "ssl.keystore.location": "/pki/client.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "ignored",
        "request.timeout.ms": "1",
    }
    assert librdkafka_settings(props) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "bench",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/pki/ca.pem",
        "ssl.certificate.location": "/pki/client.pem",
        "ssl.key.location": "/pki/client.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_librdkafka_names_pass_and_sasl_defaults_to_plain() -> None:
    assert librdkafka_settings(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"}
    ) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    assert librdkafka_settings(
        {"security.protocol": "SSL", "ssl.ca.location": "/ca", "sasl.username": "unused"}
    ) == {"security.protocol": "SSL", "ssl.ca.location": "/ca"}
    assert librdkafka_settings({"ssl.ca.location": "/ca"}) == {}  # PLAINTEXT


def test_a_store_librdkafka_cannot_read_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ssl.keystore.type: PKCS12: only PEM"):
        librdkafka_settings(
            {
                "security.protocol": "SSL",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": "/k.p12",
            }
        )


# --- the report ------------------------------------------------------------------------------


def test_the_report_names_the_cluster_measured() -> None:
    lat = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p99.9": 4.0, "max": 5.0}
    row = {
        "section": "produce",
        "system": "external",
        "workload": "RF=3 acks=all 100 B",
        "values": {
            "records_per_s": 1000.0,
            "mb_per_s": 0.1,
            "record_bytes": 100,
            "latency_ms": lat,
        },
        "note": "",
        "load_average": [1.0, 1.0, 1.0],
    }
    data = {
        "command": "tidelog bench --bootstrap-server k1:9092",
        "elapsed_s": 10.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "load_at_end": [1.0, 1.0, 1.0],
        "machine": {
            "started_utc": "2026-12-06T00:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "external_cluster": {
            "bootstrap_servers": "k1:9092",
            "cluster_id": "abc",
            "brokers": 5,
            "controller_id": 2,
            "replication_factor": 3,
            "partitions": 6,
            "topic_prefix": "tidelog-bench-",
            "security_protocol": "SASL_SSL",
        },
        "rows": [row],
        "skipped": [],
    }
    text = render_markdown(data)
    assert (
        "Cluster measured (system `external`, nothing started by the bench): `k1:9092`, "
        "cluster id `abc`, 5 broker(s) in Metadata, replication factor 3 (acks=1 rows: 1), "
        "6 partitions per topic, SASL_SSL" in text
    )
    assert "| external | RF=3 acks=all 100 B | 1,000 |" in text
    assert "## Targets" not in text  # tidelog's targets say nothing of another cluster
