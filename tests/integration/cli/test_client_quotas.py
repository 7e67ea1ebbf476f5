"""Client quotas on a real broker (KIP-13, KIP-124, KIP-219, KIP-546): ``tidelog configs
--entity-type users|clients`` sets and shows them, DescribeClientQuotas/AlterClientQuotas
answer Kafka's errors (raw requests: neither confluent-kafka nor kafka-python offers these
APIs), a confluent-kafka producer with ``client.id=slow`` is held to its
``producer_byte_rate`` while an unthrottled one beside it is not, and the sensors show on
/metrics."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.harness import BrokerProcess, free_port
from tests.integration.cli.conftest import Tidelog
from tests.integration.rawclient import FETCH_V, Raw, create
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

MB = 1 << 20


def test_cli_alter_and_describe_user_client_and_defaults(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    pair = ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients")
    r = tidelog(
        "configs", "alter", *bs, *pair, "--entity-name", "app",
        "--add-config", "producer_byte_rate=1024,request_percentage=200",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Completed updating config for user alice."
    r = tidelog(
        "configs", "alter", *bs, "--entity-type", "clients", "--entity-default",
        "--add-config", "consumer_byte_rate=2048",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Completed updating default config for clients in the cluster."

    r = tidelog("configs", "describe", *bs, *pair, "--entity-name", "app")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "Quota configs for user-principal 'alice', client-id 'app' are "
        "producer_byte_rate=1024.0, request_percentage=200.0"
    )
    r = tidelog("configs", "describe", *bs, "--entity-type", "clients")
    assert r.stdout.strip() == (
        "Quota configs for the default client-id are consumer_byte_rate=2048.0"
    )
    # Deleting a key; then the pair has one left.
    r = tidelog(
        "configs", "alter", *bs, *pair, "--entity-name", "app",
        "--delete-config", "request_percentage",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = tidelog("configs", "describe", *bs, *pair, "--entity-name", "app")
    assert r.stdout.strip().endswith("are producer_byte_rate=1024.0")

    # Bad input: the broker's INVALID_REQUEST for an unknown key, a usage error for a
    # value that is no number (nothing sent).
    r = tidelog(
        "configs", "alter", *bs, "--entity-type", "users", "--entity-name", "bob",
        "--add-config", "bogus_rate=1",
    )  # fmt: skip
    assert r.returncode == 1
    assert "INVALID_REQUEST" in r.stderr
    assert "Invalid configuration key bogus_rate" in r.stderr
    r = tidelog(
        "configs", "alter", *bs, "--entity-type", "users", "--entity-name", "bob",
        "--add-config", "producer_byte_rate=fast",
    )  # fmt: skip
    assert r.returncode == 2
    assert "producer_byte_rate: 'fast' is not a number" in r.stderr
    # Clean up the shared broker's quotas.
    for args in (
        (*pair, "--entity-name", "app", "--delete-config", "producer_byte_rate"),
        ("--entity-type", "clients", "--entity-default", "--delete-config", "consumer_byte_rate"),
    ):
        assert tidelog("configs", "alter", *bs, *args).returncode == 0


def _component(kind: str, match_type: int, match: str | None = None) -> dict[str, object]:
    return {"entity_type": kind, "match_type": match_type, "match": match}


def test_raw_requests_answer_kafkas_errors(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        body = raw.call(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            1,
            {"components": [_component("user", 2), _component("user", 1)], "strict": False},
        )
        assert body.error_code == ErrorCode.INVALID_REQUEST
        assert body.error_message == "Duplicate user filter component entity type"
        assert body.entries is None
        body = raw.call(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            0,
            {"components": [_component("group", 2)], "strict": False},
        )
        assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert body.error_message == "Custom entity type 'group' not supported"

        def entry(entity: list[tuple[str, str | None]], key: str, value: float) -> object:
            return {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": key, "value": value, "remove": False}],
            }

        body = raw.call(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            {
                "entries": [
                    entry([("client-id", "raw")], "producer_byte_rate", 10.5),
                    entry([], "producer_byte_rate", 1),
                    entry([("client-id", "raw")], "request_percentage", 50),
                ],
                "validate_only": True,
            },
        )
        assert [(e.error_code, e.error_message) for e in body.entries] == [
            (ErrorCode.INVALID_REQUEST, "Configuration producer_byte_rate must be a LONG value"),
            (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"),
            (ErrorCode.NONE, None),
        ]
        # validate_only wrote nothing.
        body = raw.call(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            1,
            {"components": [_component("client-id", 0, "raw")], "strict": True},
        )
        assert body.error_code == ErrorCode.NONE
        assert body.entries == ()
    finally:
        raw.close()


def _produce_for(
    client_id: str,
    bootstrap: str,
    topic: str,
    seconds: float,
    out: dict[str, list[float]],
    *,
    max_records: int = 1 << 30,
) -> None:
    """Produce 10 KB records as fast as allowed for ``seconds`` (or ``max_records``);
    ``out[client_id]`` gets the time of each acknowledged record, then the time it
    ended."""
    acked: list[float] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.kbytes": 4096,
        }
    )
    payload = b"x" * 10_000

    def delivered(err: object, _msg: object) -> None:
        if err is None:
            acked.append(time.monotonic())

    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline and sent < max_records:
        try:
            producer.produce(topic, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        sent += 1
        producer.poll(0)
    producer.flush(10)
    out[client_id] = [*acked, time.monotonic()]


@pytest.fixture
def quota_broker(new_broker: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, int]:
    port = free_port()
    # Two 1 s samples: a fresh quota's burst allowance is one window, so the steady
    # throttled rate shows within the test's seconds.
    broker = new_broker(
        {
            "quota.window.num": "2",
            "metrics.listener": f"http://127.0.0.1:{port}",
        }
    )
    return broker, port


def test_a_producer_is_held_to_its_byte_rate_and_another_is_not(
    quota_broker: tuple[BrokerProcess, int], tidelog: Tidelog
) -> None:
    broker, metrics_port = quota_broker
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    raw = Raw(broker)
    try:
        create(raw, topic)
    finally:
        raw.close()
    r = tidelog(
        "configs", "alter", "--bootstrap-server", broker.bootstrap,
        "--entity-type", "clients", "--entity-name", "slow",
        "--add-config", f"producer_byte_rate={MB}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr

    out: dict[str, list[float]] = {}
    started = time.monotonic()
    threads = [
        threading.Thread(target=_produce_for, args=("slow", broker.bootstrap, topic, 10.0, out)),
        # Beside it, unthrottled, 30 MB at most (the disk is shared with other tests).
        threading.Thread(
            target=_produce_for,
            args=("fast", broker.bootstrap, topic, 10.0, out),
            kwargs={"max_records": 3000},
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # The throttled rate over 8 s after a 2 s warm-up (the burst a fresh quota allows).
    window = [t for t in out["slow"][:-1] if started + 2.0 <= t < started + 10.0]
    slow_rate = len(window) * 10_000 / 8.0
    fast_rate = (len(out["fast"]) - 1) * 10_000 / (out["fast"][-1] - started)
    assert 0.5 * MB < slow_rate <= 1.1 * MB, slow_rate
    assert fast_rate > 1.5 * MB, fast_rate

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'kafka_server_produce_byte_rate{client_id="slow",user=""}' in text
    throttle = [
        line
        for line in text.splitlines()
        if line.startswith('kafka_server_produce_throttle_time{client_id="slow"')
    ]
    assert throttle, text[:2000]
    assert float(throttle[0].split()[-1]) > 0


def _fetch_request(topic: str) -> dict[str, object]:
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_a_consumer_over_its_byte_rate_is_answered_then_muted(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    topic = f"quota-fetch-{uuid.uuid4().hex[:8]}"
    raw = Raw(broker)
    try:
        create(raw, topic)
        # The size of this Fetch's answer (the size prefix included): what it counts.
        raw.client_id = "sizer"
        _cid, frame = raw.encode(ApiKey.FETCH, FETCH_V, _fetch_request(topic))
        raw.send_bytes(frame)
        answer = raw.recv_frame()
        assert answer is not None
        size = len(answer) + 4
    finally:
        raw.close()
    # One answer over a fresh 11-sample quota is measured over 10 s: size / 10 B/s, 1.25
    # times this bound, so the throttle is a quarter of 10 s.
    bound = size * 100 // 1250
    expected_ms = round((size / 10 - bound) / bound * 10_000)
    bs = ("--bootstrap-server", broker.bootstrap)
    slowc = ("--entity-type", "clients", "--entity-name", "slowc")
    r = tidelog("configs", "alter", *bs, *slowc, "--add-config", f"consumer_byte_rate={bound}")
    assert r.returncode == 0, r.stderr
    raw = Raw(broker)
    raw.client_id = "slowc"
    try:
        body = raw.call(ApiKey.FETCH, FETCH_V, _fetch_request(topic))
        throttle_ms = int(body.throttle_time.total_seconds() * 1000)
        assert throttle_ms == expected_ms
        # KIP-219: the connection is muted for that time; then it is served again.
        sent = time.monotonic()
        _cid, frame = raw.encode(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"
        })  # fmt: skip
        raw.send_bytes(frame)
        assert raw.recv_frame(timeout=15.0) is not None
        assert time.monotonic() - sent >= throttle_ms / 1000 * 0.9
    finally:
        raw.close()
        r = tidelog("configs", "alter", *bs, *slowc, "--delete-config", "consumer_byte_rate")
        assert r.returncode == 0, r.stderr


def test_request_percentage_throttles_any_request_capped_at_one_window(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    busy = ("--entity-type", "clients", "--entity-name", "busy")
    # So small that any handler time is over it: the throttle is the cap, one 1 s window.
    r = tidelog("configs", "alter", *bs, *busy, "--add-config", "request_percentage=0.00001")
    assert r.returncode == 0, r.stderr
    raw = Raw(broker)
    raw.client_id = "busy"
    try:
        request = {"topics": [], "allow_auto_topic_creation": False,
                   "include_topic_authorized_operations": False}  # fmt: skip
        first = raw.call(ApiKey.METADATA, 12, request)
        # The first request's time counts from the next one on.
        assert first.throttle_time.total_seconds() == 0
        second = raw.call(ApiKey.METADATA, 12, request)
        assert second.throttle_time.total_seconds() * 1000 == 1000
    finally:
        raw.close()
        r = tidelog("configs", "alter", *bs, *busy, "--delete-config", "request_percentage")
        assert r.returncode == 0, r.stderr
