"""Options of the ``tidelog`` format, parsed and checked (pure: no Spark, no IO).

The names and meanings are those of Spark's Kafka connector (Structured Streaming + Kafka
Integration Guide), so a job switches from ``kafka`` to ``tidelog`` by changing one word.
Spark hands a data source its options with lower-cased keys; every error names the option
in Spark's spelling. An option this connector does not know, or does not support, is an
error rather than silently ignored.

Security (issue 20), as Spark's Kafka connector passes ``kafka.``-prefixed options to the
Kafka client:

1. ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
   ``kafka.sasl.username``, ``kafka.sasl.password`` and every ``kafka.ssl.*`` option are,
   without the prefix, Kafka client properties (``tidelog.security.client_config``). Both
   reads and writes take them.
2. They are checked on the driver, where the options are parsed, by building the client's
   ``ClientSecurity`` (which reads the ``ssl.*`` files: the one IO here); a bad one is a
   ``SparkOptionError`` naming the option, never its value. The files must also be
   readable at the same paths on the executors, as with Spark's Kafka connector.
3. The parsed options carry the properties (``security_properties``: plain strings, which
   pickle to executors; a ``ClientSecurity`` holds an ``ssl.SSLContext``, which does
   not), and ``client_security`` builds the ``ClientSecurity`` where a client is made.
   They are left out of the options' repr: a password must never reach a log line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidelog.errors import TidelogError
from tidelog.model import TopicPartition
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.security.errors import SecurityConfigError

#: Offsets in JSON specs with a special meaning (Spark's Kafka connector).
LATEST: Final = -1
EARLIEST: Final = -2

#: Options Spark itself may put beside the user's (streaming sinks get these).
_SPARK_OWN: Final = frozenset({"path", "checkpointlocation", "queryname"})

#: Security options (rule 1), besides every ``kafka.ssl.*`` one.
SECURITY_OPTIONS: Final = (
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.sasl.username",
    "kafka.sasl.password",
)
SSL_OPTION_PREFIX: Final = "kafka.ssl."
_KAFKA_PREFIX: Final = "kafka."

READ_OPTIONS: Final = (
    "kafka.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.isolation.level",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "fetch.max.bytes",
    "commitOffsetsToGroup",
    "kafka.group.id",
    *SECURITY_OPTIONS,
)
WRITE_OPTIONS: Final = (
    "kafka.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.acks",
    "topic",
    "includeHeaders",
    "exactlyOnce",
    "transactionalIdPrefix",
    "kafka.transaction.timeout.ms",
    *SECURITY_OPTIONS,
)
#: Options of Spark's Kafka connector that tidelog does not offer (named in the error).
_UNSUPPORTED: Final = {
    "groupidprefix": "tidelog reads use no consumer group",
    "minoffsetspertrigger": "Python data sources get one read limit; use maxOffsetsPerTrigger",
    "maxtriggerdelay": "Python data sources get one read limit; use maxOffsetsPerTrigger",
    "endingtimestamp": "use endingOffsets",
    "startingoffsetsbytimestamp": "use startingTimestamp or startingOffsets",
    "endingoffsetsbytimestamp": "use endingOffsets",
    "startingoffsetsbytimestampstrategy": "startingTimestamp falls back to latest",
    "fetchoffset.numretries": "retries are bounded by time: kafkaConsumer.pollTimeoutMs",
    "fetchoffset.retryintervalms": "retries are bounded by time: kafkaConsumer.pollTimeoutMs",
    "maxrecordsperpartition": "use minPartitions",
}

_CANONICAL: Final = {name.lower(): name for name in (*READ_OPTIONS, *WRITE_OPTIONS)}


class SparkOptionError(TidelogError, ValueError):
    """An option of the ``tidelog`` format is unknown, invalid or contradicts another."""


def _canonical(key: str) -> str:
    return _CANONICAL.get(key.lower(), key)


def _check_known(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    allowed_lower = {a.lower() for a in allowed}
    for key in options:
        low = key.lower()
        if low in allowed_lower or low in _SPARK_OWN or low.startswith(SSL_OPTION_PREFIX):
            continue
        if low in _UNSUPPORTED:
            raise SparkOptionError(
                f"option '{_canonical(key)}' of Spark's Kafka connector is not supported by "
                f"tidelog: {_UNSUPPORTED[low]}"
            )
        raise SparkOptionError(
            f"unknown option '{key}' for a tidelog {what}; known options: {', '.join(allowed)}, "
            f"{SSL_OPTION_PREFIX}*"
        )


def _get(options: Mapping[str, str], name: str) -> str | None:
    low = name.lower()
    for key, value in options.items():
        if key.lower() == low:
            return str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SparkOptionError(f"option '{name}' must be true or false, not {raw!r}")
    return value == "true"


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"option '{name}' must be an integer, not {raw!r}") from None
    if value < minimum:
        raise SparkOptionError(f"option '{name}' must be at least {minimum}, not {value}")
    return value


#: ``kafka.isolation.level`` values (the Kafka consumer's ``isolation.level``).
ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")


def _read_committed(options: Mapping[str, str]) -> bool:
    raw = _get(options, "kafka.isolation.level")
    if raw is None:
        return True
    value = raw.strip().lower()
    if value not in ISOLATION_LEVELS:
        raise SparkOptionError(
            f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, "
            f"not {raw!r}"
        )
    return value == "read_committed"


def _bootstrap(options: Mapping[str, str]) -> str:
    servers = _get(options, "kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise SparkOptionError("option 'kafka.bootstrap.servers' is required (host:port,...)")
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SparkOptionError(
                f"option 'kafka.bootstrap.servers': {item.strip()!r} is not host:port"
            )
    return servers.strip()


# --- security (rules 1-3) -------------------------------------------------------------------

#: Client properties, as (key, value) pairs sorted by key.
SecurityProperties = tuple[tuple[str, str], ...]


def _is_security_option(key: str) -> bool:
    low = key.lower()
    return low in {o.lower() for o in SECURITY_OPTIONS} or low.startswith(SSL_OPTION_PREFIX)


def client_security(properties: SecurityProperties) -> ClientSecurity:
    """Rule 3: the ``ClientSecurity`` of ``properties``; ``SparkOptionError`` naming the
    option (``kafka.<key>``) when one is wrong."""
    if not properties:
        return PLAINTEXT
    try:
        return ClientSecurity.from_properties(dict(properties))
    except SecurityConfigError as exc:
        detail = str(exc).removeprefix(f"{exc.key}: ")
        raise SparkOptionError(f"option '{_KAFKA_PREFIX}{exc.key}': {detail}") from None


def _security(options: Mapping[str, str]) -> SecurityProperties:
    """Rules 1 and 2: the security options without their prefix, checked."""
    properties = {
        key.lower().removeprefix(_KAFKA_PREFIX): str(value)
        for key, value in options.items()
        if _is_security_option(key)
    }
    result = tuple(sorted(properties.items()))
    client_security(result)
    return result


# --- subscriptions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: tuple[TopicPartition, ...]


Subscription = Subscribe | SubscribePattern | Assign


def _topic_partition_json(name: str, raw: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {topic: {partition: offset}}."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SparkOptionError(
            f"option '{name}' is not valid JSON ({exc.msg}); expected {{\"topic\": "
            f'{{"0": 23}}}} or "earliest"/"latest"'
        ) from None
    if not isinstance(parsed, dict):
        raise SparkOptionError(f"option '{name}' must be a JSON object of topics")
    result: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise SparkOptionError(
                f"option '{name}': topic {topic!r} must map partitions to offsets"
            )
        result[topic] = {}
        for partition, offset in parts.items():
            if not str(partition).lstrip("-").isdigit() or int(partition) < 0:
                raise SparkOptionError(f"option '{name}': bad partition {partition!r}")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise SparkOptionError(
                    f"option '{name}': offset of {topic}-{partition} must be an integer >= -2"
                )
            result[topic][int(partition)] = offset
    return result


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {
        name: _get(options, name)
        for name in ("subscribe", "subscribePattern", "assign")
        if _get(options, name) is not None
    }
    if len(given) != 1:
        named = ", ".join(f"'{n}'" for n in given) or "none"
        raise SparkOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
            f"given (got {named})"
        )
    ((name, raw),) = given.items()
    assert raw is not None
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise SparkOptionError("option 'subscribe' names no topic")
        return Subscribe(topics)
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise SparkOptionError(
                f"option 'subscribePattern': {raw!r} is not a regex ({exc})"
            ) from None
        return SubscribePattern(raw)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(v, list) and all(isinstance(p, int) and p >= 0 for p in v)
        for v in parsed.values()
    ):
        raise SparkOptionError(
            f"option 'assign' must be JSON like {{\"topicA\": [0, 1]}}, not {raw!r}"
        )
    partitions = tuple(TopicPartition(t, p) for t, ps in parsed.items() for p in ps)
    if not partitions:
        raise SparkOptionError("option 'assign' names no partition")
    return Assign(partitions)


# --- offsets specs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EarliestSpec:
    pass


@dataclass(frozen=True, slots=True)
class LatestSpec:
    pass


@dataclass(frozen=True, slots=True)
class SpecificSpec:
    """Per-partition offsets (-2 earliest, -1 latest); unnamed partitions use ``default``."""

    offsets: Mapping[str, Mapping[int, int]]


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    timestamp_ms: int


OffsetSpec = EarliestSpec | LatestSpec | SpecificSpec | TimestampSpec


def _offset_spec(options: Mapping[str, str], name: str) -> OffsetSpec | None:
    raw = _get(options, name)
    if raw is None:
        return None
    value = raw.strip()
    if value.lower() == "earliest":
        return EarliestSpec()
    if value.lower() == "latest":
        return LatestSpec()
    return SpecificSpec(_topic_partition_json(name, value))


# --- parsed options ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    #: How long an executor (or the driver) keeps retrying retriable failures.
    poll_timeout_ms: int
    fetch_max_bytes: int
    #: ``kafka.isolation.level``: read_committed (the default) reads up to the last stable
    #: offset and drops aborted transactions; False is read_uncommitted.
    read_committed: bool = True
    #: Rule 3: the client's security properties (never in the repr).
    security_properties: SecurityProperties = field(default=(), repr=False)
    #: ``commitOffsetsToGroup`` with ``kafka.group.id``: the consumer group a stream commits
    #: its offsets to after each micro-batch (``tidelog.spark.progress``); None: no commits.
    commit_group: str | None = None


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check the options of a batch (``streaming=False``) or streaming read."""
    kind = "streaming read" if streaming else "batch read"
    _check_known(options, READ_OPTIONS, kind)
    servers = _bootstrap(options)
    subscription = _subscription(options)
    starting = _offset_spec(options, "startingOffsets")
    ending = _offset_spec(options, "endingOffsets")
    timestamp = _int(options, "startingTimestamp", None, 0)
    if timestamp is not None:
        if starting is not None:
            raise SparkOptionError(
                "options 'startingOffsets' and 'startingTimestamp' contradict each other: "
                "give one of them"
            )
        starting = TimestampSpec(timestamp)
    if streaming:
        if ending is not None:
            raise SparkOptionError("option 'endingOffsets' is for batch queries only")
        starting = starting or LatestSpec()
        ending = LatestSpec()
    else:
        if isinstance(starting, LatestSpec):
            raise SparkOptionError(
                "option 'startingOffsets' cannot be 'latest' for a batch query "
                "(it would read nothing)"
            )
        if isinstance(ending, EarliestSpec):
            raise SparkOptionError("option 'endingOffsets' cannot be 'earliest' for a batch query")
        if isinstance(starting, SpecificSpec) and any(
            o == LATEST for parts in starting.offsets.values() for o in parts.values()
        ):
            raise SparkOptionError(
                "option 'startingOffsets': -1 (latest) is not allowed for a batch query"
            )
        if isinstance(ending, SpecificSpec) and any(
            o == EARLIEST for parts in ending.offsets.values() for o in parts.values()
        ):
            raise SparkOptionError(
                "option 'endingOffsets': -2 (earliest) is not allowed for a batch query"
            )
        starting = starting or EarliestSpec()
        ending = ending or LatestSpec()
    for spec_name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, SpecificSpec):
            _check_spec_against_subscription(spec_name, spec, subscription)
    max_offsets = _int(options, "maxOffsetsPerTrigger", None, 1)
    min_partitions = _int(options, "minPartitions", None, 1)
    request_timeout = _int(options, "kafka.request.timeout.ms", 30000, 1)
    poll_timeout = _int(options, "kafkaConsumer.pollTimeoutMs", 120000, 1)
    fetch_max = _int(options, "fetch.max.bytes", 8 << 20, 1024)
    assert request_timeout is not None
    assert poll_timeout is not None
    assert fetch_max is not None
    return ReadOptions(
        bootstrap_servers=servers,
        client_id=_get(options, "kafka.client.id") or "tidelog-spark",
        request_timeout_ms=request_timeout,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_offsets,
        min_partitions=min_partitions,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        poll_timeout_ms=poll_timeout,
        fetch_max_bytes=fetch_max,
        read_committed=_read_committed(options),
        security_properties=_security(options),
        commit_group=_commit_group(options, streaming),
    )


def _commit_group(options: Mapping[str, str], streaming: bool) -> str | None:
    """``commitOffsetsToGroup`` (default false) and the ``kafka.group.id`` it commits to."""
    commit = _bool(options, "commitOffsetsToGroup", False)
    raw = _get(options, "kafka.group.id")
    group = raw.strip() if raw is not None else None
    if not commit:
        if group is not None:
            raise SparkOptionError(
                "option 'kafka.group.id' applies only with commitOffsetsToGroup=true "
                "(tidelog reads join no consumer group; Spark's checkpoint holds the offsets)"
            )
        return None
    if not streaming:
        raise SparkOptionError("option 'commitOffsetsToGroup' is for streaming queries only")
    if not group:
        raise SparkOptionError(
            "option 'commitOffsetsToGroup' needs 'kafka.group.id': the consumer group to "
            "commit the query's offsets to"
        )
    return group


def _check_spec_against_subscription(
    name: str, spec: SpecificSpec, subscription: Subscription
) -> None:
    named = {TopicPartition(t, p) for t, parts in spec.offsets.items() for p in parts}
    if isinstance(subscription, Assign):
        extra = named - set(subscription.partitions)
        if extra:
            raise SparkOptionError(
                f"option '{name}' names partitions that 'assign' does not: "
                + ", ".join(sorted(str(tp) for tp in extra))
            )
    elif isinstance(subscription, Subscribe):
        extra_topics = {tp.topic for tp in named} - set(subscription.topics)
        if extra_topics:
            raise SparkOptionError(
                f"option '{name}' names topics that 'subscribe' does not: "
                + ", ".join(sorted(extra_topics))
            )
    else:
        bad = {tp.topic for tp in named if not subscription.matches(tp.topic)}
        if bad:
            raise SparkOptionError(
                f"option '{name}' names topics that 'subscribePattern' does not match: "
                + ", ".join(sorted(bad))
            )


#: ``transactionalIdPrefix`` when none is given (exactlyOnce).
DEFAULT_TRANSACTIONAL_ID_PREFIX: Final = "tidelog-spark"
#: ``kafka.transaction.timeout.ms`` when none is given: the brokers' default
#: ``transaction.max.timeout.ms`` (15 minutes).
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 900_000


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int
    topic: str | None
    acks: int
    #: How long a task keeps retrying retriable produce failures.
    retry_timeout_ms: int
    #: ``exactlyOnce``: each write task writes in a Kafka transaction that the driver
    #: commits with the micro-batch (docs/exactly-once.md).
    exactly_once: bool = False
    #: ``transactionalIdPrefix``: transactional ids are
    #: ``<prefix>-<query id>-<batch id>-<partition>``.
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    #: ``kafka.transaction.timeout.ms``: a transaction open longer is aborted by its
    #: coordinator (the micro-batch's commit then fails).
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    #: Rule 3: the client's security properties (never in the repr).
    security_properties: SecurityProperties = field(default=(), repr=False)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    _check_known(options, WRITE_OPTIONS, "write")
    servers = _bootstrap(options)
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise SparkOptionError("option 'topic' is empty")
    acks_raw = (_get(options, "kafka.acks") or "all").strip().lower()
    acks_map = {"all": -1, "-1": -1, "1": 1, "0": 0}
    if acks_raw not in acks_map:
        raise SparkOptionError(f"option 'kafka.acks' must be all, -1, 1 or 0, not {acks_raw!r}")
    request_timeout = _int(options, "kafka.request.timeout.ms", 30000, 1)
    assert request_timeout is not None
    if _get(options, "includeHeaders") is not None:
        _bool(options, "includeHeaders", False)  # accepted (a headers column is written)
    exactly_once = _bool(options, "exactlyOnce", False)
    prefix = _get(options, "transactionalIdPrefix")
    timeout = _int(options, "kafka.transaction.timeout.ms", None, 1)
    if not exactly_once:
        for name, given in (
            ("transactionalIdPrefix", prefix),
            ("kafka.transaction.timeout.ms", timeout),
        ):
            if given is not None:
                raise SparkOptionError(f"option '{name}' applies only with exactlyOnce=true")
    if prefix is not None and not prefix.strip():
        raise SparkOptionError("option 'transactionalIdPrefix' is empty")
    if exactly_once and acks_map[acks_raw] != -1:
        raise SparkOptionError(
            f"option 'kafka.acks' must be all with exactlyOnce=true (transactional writes are "
            f"idempotent, which needs acks=all), not {acks_raw!r}"
        )
    return WriteOptions(
        bootstrap_servers=servers,
        client_id=_get(options, "kafka.client.id") or "tidelog-spark",
        request_timeout_ms=request_timeout,
        topic=topic.strip() if topic else None,
        acks=acks_map[acks_raw],
        retry_timeout_ms=max(request_timeout * 2, 120000),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix.strip() if prefix else DEFAULT_TRANSACTIONAL_ID_PREFIX,
        transaction_timeout_ms=timeout if timeout is not None else DEFAULT_TRANSACTION_TIMEOUT_MS,
        security_properties=_security(options),
    )
