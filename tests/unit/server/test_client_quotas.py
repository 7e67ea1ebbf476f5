"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546): the precedence of the eight entity
levels, the op checks, the rate sensors and throttle times on a fake clock, the
Describe/AlterClientQuotas rules over an in-memory config store, and the fetch throttle
written into an encoded answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidelog.errors import ErrorCode
from tidelog.protocol.responses import encode_fetch_response, with_fetch_throttle
from tidelog.server.apis.client_quota_apis import ClientQuotaApis, matches, parse_filter
from tidelog.server.apis.throttling import with_throttle_time
from tidelog.server.observability.metrics.quota_collector import QuotaCollector
from tidelog.server.quotas.configs import QuotaConfigs
from tidelog.server.quotas.entity import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    check_op,
    find_quota,
    quota_values,
)
from tidelog.server.quotas.manager import ClientQuotaManager, ClientQuotas

# --- precedence (KIP-55: eight levels, each key on its own) ------------------------------

LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", DEFAULT), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "")),
    (QuotaEntity(DEFAULT, "app"), ("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
    (QuotaEntity(DEFAULT, None), ("alice", "")),
    (QuotaEntity(None, "app"), ("", "app")),
    (QuotaEntity(None, DEFAULT), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_level_set_wins(level: int) -> None:
    # Every level from ``level`` down sets a distinct bound: ``level``'s must be chosen.
    quotas = {entity: {PRODUCER_BYTE_RATE: 1000.0 + i} for i, (entity, _) in enumerate(LEVELS)}
    for entity, _ in LEVELS[:level]:
        del quotas[entity]
    assert find_quota(quotas, PRODUCER_BYTE_RATE, "alice", "app", "app") == (
        1000.0 + level,
        LEVELS[level][1],
    )


def test_each_key_resolves_on_its_own_and_nothing_matched_is_no_quota() -> None:
    quotas = {
        QuotaEntity("alice", "app"): {REQUEST_PERCENTAGE: 50.0},
        QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 10.0},
    }
    assert find_quota(quotas, PRODUCER_BYTE_RATE, "alice", "app", "app") == (10.0, ("", "app"))
    assert find_quota(quotas, REQUEST_PERCENTAGE, "alice", "app", "app") == (
        50.0,
        ("alice", "app"),
    )
    assert find_quota(quotas, REQUEST_PERCENTAGE, "bob", "app", "app") is None
    # Another user's pair quota never applies.
    assert find_quota(quotas, REQUEST_PERCENTAGE, "alice", "other", "other") is None


def test_wire_names_are_sanitized_and_null_is_the_default() -> None:
    entity = QuotaEntity.from_wire({"user": "CN=a b*", "client-id": None})
    assert entity == QuotaEntity("CN%3Da%20b%2A", DEFAULT)
    assert entity.to_wire() == [("user", "CN=a b*"), ("client-id", None)]
    # A user literally named <default> is not the default.
    assert QuotaEntity.from_wire({"user": "<default>"}).user == "%3Cdefault%3E"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("producer_byte_rate", 1024.0, ("1024", ErrorCode.NONE, None)),
        ("consumer_byte_rate", 2.0000000001, ("2", ErrorCode.NONE, None)),
        ("request_percentage", 200.0, ("200.0", ErrorCode.NONE, None)),
        ("producer_byte_rate", None, (None, ErrorCode.NONE, None)),
        (
            "producer_byte_rate",
            10.5,
            (
                None,
                ErrorCode.INVALID_REQUEST,
                "Configuration producer_byte_rate must be a LONG value",
            ),
        ),
        (
            "bogus_rate",
            1.0,
            (None, ErrorCode.INVALID_REQUEST, "Invalid configuration key bogus_rate"),
        ),
        (
            "bogus_rate",
            None,
            (None, ErrorCode.INVALID_REQUEST, "Invalid configuration key bogus_rate"),
        ),
    ],
)
def test_check_op(key: str, value: float | None, expected: tuple[Any, ...]) -> None:
    text, (error, message) = check_op(key, value)
    assert (text, error, message) == expected


def test_quota_values_leave_scram_credentials_out() -> None:
    config = {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "1024", "request_percentage": "x"}
    assert quota_values(config) == {"producer_byte_rate": 1024.0}


# --- the rate math (Kafka's Rate over 11 samples of 1 s) ---------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def manager(clock: FakeClock, bound: float, **kwargs: Any) -> ClientQuotaManager:
    m = ClientQuotaManager(
        PRODUCER_BYTE_RATE, window_num=11, window_size_s=1, clock=clock, **kwargs
    )
    m.update({QuotaEntity(None, "slow"): {PRODUCER_BYTE_RATE: bound}})
    return m


def test_within_the_quota_no_throttle_and_other_clients_untouched() -> None:
    clock = FakeClock()
    m = manager(clock, 1000)
    # 10 s of samples: a quiet quota allows bound * (window_num - 1) s before throttling.
    assert m.record("ANONYMOUS", "slow", 10_000) == 0
    assert m.record("ANONYMOUS", "fast", 10**9) == 0  # no quota for "fast"


def test_throttle_time_is_the_excess_share_of_the_window() -> None:
    clock = FakeClock()
    m = manager(clock, 1000)
    # 20,000 bytes over the minimum span of 10 windows = 2,000 B/s: (2000-1000)/1000 * 10 s.
    assert m.record("ANONYMOUS", "slow", 20_000) == 10_000
    # 5 s later the span is still the 10-window minimum: 2000 B/s, the same throttle.
    clock.now += 5_000
    assert m.throttle_ms("ANONYMOUS", "slow") == 10_000
    # Once the sample ages out of the 11-window span, the client is free again.
    clock.now += 6_000
    assert m.throttle_ms("ANONYMOUS", "slow") == 0


def test_steady_rate_below_the_bound_is_not_throttled_but_above_it_is() -> None:
    clock = FakeClock()
    m = manager(clock, 1000)
    throttles = []
    # 30 s at 900 B/s: the span holds 11 samples over 10 s at most (Kafka's Rate counts the
    # current window's sample in full), 990 B/s, within the bound.
    for _ in range(30):
        throttles.append(m.record("ANONYMOUS", "slow", 900))
        clock.now += 1000
    assert throttles == [0] * 30
    throttle = m.record("ANONYMOUS", "slow", 5_000)  # a burst over the bound
    assert throttle > 0


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    clock = FakeClock()
    m = ClientQuotaManager(
        REQUEST_PERCENTAGE, window_num=11, window_size_s=1, max_throttle_ms=1000, clock=clock
    )
    m.update({QuotaEntity(DEFAULT, None): {REQUEST_PERCENTAGE: 1.0}})
    assert m.record("ANONYMOUS", "any", 500.0) == 1000


def test_disabled_without_any_quota_for_the_key_and_sensors_dropped() -> None:
    clock = FakeClock()
    m = manager(clock, 1000)
    m.record("ANONYMOUS", "slow", 50_000)
    assert [v.tags for v in m.sensors()] == [("", "slow")]
    m.update({QuotaEntity(None, "slow"): {REQUEST_PERCENTAGE: 5.0}})
    assert not m.enabled
    assert m.sensors() == []
    assert m.record("ANONYMOUS", "slow", 50_000) == 0


def test_user_level_quota_is_shared_by_the_users_clients() -> None:
    clock = FakeClock()
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num=11, window_size_s=1, clock=clock)
    m.update({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000.0}})
    assert m.record("alice", "a", 10_000) == 0
    assert m.record("alice", "b", 10_000) == 10_000  # the two clients share one sensor
    assert m.record("bob", "a", 10**9) == 0


def test_metrics_show_rate_and_average_throttle_per_entity() -> None:
    clock = FakeClock()
    quotas = ClientQuotas(clock=clock)
    quotas.update({QuotaEntity(None, "slow"): {PRODUCER_BYTE_RATE: 1000.0}})
    quotas.produce.record("ANONYMOUS", "slow", 10_000)
    quotas.produce.record("ANONYMOUS", "slow", 10_000)  # throttled 10,000 ms
    registry = CollectorRegistry()
    registry.register(QuotaCollector(quotas))
    text = generate_latest(registry).decode()
    assert 'kafka_server_produce_byte_rate{client_id="slow",user=""} 2000.0' in text
    assert 'kafka_server_produce_throttle_time{client_id="slow",user=""} 5000.0' in text
    listed = (Path(__file__).parents[3] / "docs" / "metrics.md").read_text()
    families = list(text_string_to_metric_families(text))
    assert len(families) == 6
    for family in families:
        assert "(kafka.server:type=" in family.documentation, family.name
        assert f"`{family.name}" in listed, f"{family.name} is not in docs/metrics.md"


# --- Describe/AlterClientQuotas over the in-memory store ---------------------------------


def entry(entity: dict[str, str | None], ops: list[tuple[str, float | None]]) -> Any:
    return SimpleNamespace(
        entity=[SimpleNamespace(entity_type=k, entity_name=v) for k, v in entity.items()],
        ops=[
            SimpleNamespace(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops
        ],
    )


def component(kind: str, match_type: int, match: str | None = None) -> Any:
    return SimpleNamespace(entity_type=kind, match_type=match_type, match=match)


def test_alter_then_describe_applies_to_the_managers() -> None:
    async def run() -> None:
        quotas = ClientQuotas()
        apis = ClientQuotaApis(QuotaConfigs(quotas))
        answer = await apis.alter(
            [
                entry({"user": "alice", "client-id": None}, [("producer_byte_rate", 1024.0)]),
                entry({"client-id": "slow"}, [("consumer_byte_rate", 2048.0)]),
                entry({"user": "bad"}, [("nope", 1.0)]),
                entry({}, [("producer_byte_rate", 1.0)]),
                entry({"ip": "1.2.3.4"}, [("producer_byte_rate", 1.0)]),
            ],
            validate_only=False,
        )
        assert [(e["error_code"], e["error_message"]) for e in answer["entries"]] == [
            (ErrorCode.NONE, None),
            (ErrorCode.NONE, None),
            (ErrorCode.INVALID_REQUEST, "Invalid configuration key nope"),
            (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"),
            (ErrorCode.UNSUPPORTED_VERSION, "Unsupported client quota entity type ip"),
        ]
        assert quotas.produce.enabled
        assert quotas.fetch.enabled
        described = await apis.describe([component("user", 2)], strict=False)
        assert described["entries"] == [
            {
                "entity": [
                    {"entity_type": "user", "entity_name": "alice"},
                    {"entity_type": "client-id", "entity_name": None},
                ],
                "values": [{"key": "producer_byte_rate", "value": 1024.0}],
            }
        ]
        strict = await apis.describe([component("user", 2)], strict=True)
        assert strict["entries"] == []
        # validate_only writes nothing; removing the last key drops the entity.
        await apis.alter([entry({"client-id": "x"}, [("request_percentage", 5.0)])], True)
        await apis.alter([entry({"client-id": "slow"}, [("consumer_byte_rate", None)])], False)
        everything = await apis.describe([], strict=False)
        assert len(everything["entries"]) == 1
        assert not quotas.fetch.enabled
        refused_alter = await apis.alter(
            [entry({"client-id": "x"}, [("request_percentage", 5.0)])], False, allowed=False
        )
        assert refused_alter["entries"] == [
            {
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.",
                "entity": [{"entity_type": "client-id", "entity_name": "x"}],
            }
        ]
        refused = await apis.describe([], strict=False, allowed=False)
        assert (refused["error_code"], refused["entries"]) == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            None,
        )

    asyncio.run(run())


@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        (
            [component("user", 2), component("user", 1)],
            ErrorCode.INVALID_REQUEST,
            "Duplicate user filter component entity type",
        ),
        (
            [component("", 2)],
            ErrorCode.INVALID_REQUEST,
            "Unexpected empty filter component entity type",
        ),
        (
            [component("group", 2)],
            ErrorCode.UNSUPPORTED_VERSION,
            "Custom entity type 'group' not supported",
        ),
        ([component("user", 7)], ErrorCode.INVALID_REQUEST, "Unexpected match type: 7"),
        (
            [component("ip", 2), component("user", 2)],
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component.",
        ),
    ],
)
def test_describe_filter_errors(components: list[Any], error: ErrorCode, message: str) -> None:
    _filter, outcome = parse_filter(components)
    assert outcome == (error, message)


def test_filter_matching() -> None:
    flt, _ = parse_filter([component("user", 0, "a b"), component("client-id", 1)])
    assert matches(QuotaEntity("a%20b", DEFAULT), flt, strict=True)
    assert not matches(QuotaEntity("a%20b", "c"), flt, strict=True)
    assert not matches(QuotaEntity("a%20b", None), flt, strict=False)
    only_user, _ = parse_filter([component("user", 1)])
    assert matches(QuotaEntity(DEFAULT, "c"), only_user, strict=False)
    assert not matches(QuotaEntity(DEFAULT, "c"), only_user, strict=True)


# --- the answers carry the throttle ---------------------------------------------------------


@pytest.mark.parametrize("version", [11, 12, 16])
def test_fetch_throttle_is_written_into_the_encoded_answer(version: int) -> None:
    frame = encode_fetch_response(7, version, [])[0]
    assert isinstance(frame, bytes)
    patched = with_fetch_throttle(frame, version, 1234)
    assert patched == bytes(encode_fetch_response(7, version, [], throttle_time_ms=1234)[0])


def test_kio_bodies_get_the_throttle_time() -> None:
    body = SimpleNamespace()  # no throttle_time field: unchanged
    assert with_throttle_time(body, 5) is body


class _Conn:
    """What ``RequestThrottler`` reads of a connection, with the mutes it asks for."""

    def __init__(self) -> None:
        self.principal = SimpleNamespace(name="ANONYMOUS")
        self.mutes: list[int] = []

    def throttle(self, throttle_ms: int) -> None:
        self.mutes.append(throttle_ms)


def test_a_throttled_produce_mutes_its_connection_before_the_answer() -> None:
    # Rule 5 of throttling: pipelined produce requests are not all counted before the first
    # answer mutes the connection; the answer mutes it again from when it is sent.
    from tidelog.protocol.apis import ApiKey
    from tidelog.protocol.header import RequestHeader
    from tidelog.server.apis.throttling import RequestThrottler

    clock = FakeClock()
    quotas = ClientQuotas(clock=clock)
    quotas.update({QuotaEntity(None, "slow"): {PRODUCER_BYTE_RATE: 1000.0}})
    throttler = RequestThrottler(quotas)
    conn = _Conn()
    header = RequestHeader(int(ApiKey.PRODUCE), 9, 1, "slow")
    within = throttler.before(conn, header, SimpleNamespace(), 5_000)  # type: ignore[arg-type]
    assert within is not None
    assert within.throttle_ms == 0
    throttler.after_handler(within)
    over = throttler.before(conn, header, SimpleNamespace(), 20_000)  # type: ignore[arg-type]
    assert over is not None
    # 25,000 bytes over the 10-window minimum span: (2500 - 1000) / 1000 * 10 s.
    assert over.throttle_ms == 15_000
    assert conn.mutes == [0, 15_000]
    throttler.after_handler(over)
    throttler.answer(over, conn, header, None)  # type: ignore[arg-type]
    assert conn.mutes == [0, 15_000, 15_000]
