"""Options of the ``tidelog`` format, parsed and checked (pure: no Spark; no IO but
``option_values`` rule 2's).

The names and meanings are those of Spark's Kafka connector (Structured Streaming + Kafka
Integration Guide), so a job switches from ``kafka`` to ``tidelog`` by changing one word.
Spark hands a data source its options with lower-cased keys; every error names the option
in Spark's spelling. An option this connector does not know (outside ``kafka.*``) is an
error rather than silently ignored, so a misspelt option does not go unnoticed.

Each option's value is read and checked by ``tidelog.spark.option_values``, which also
holds the security options (issue 20: ``kafka.security.protocol``, ``kafka.sasl.*``,
``kafka.ssl.*``) and its rules 1-3; this module has the tables of known options, the
subscriptions and offset specs, and the rules that tie options together.

Every other ``kafka.*`` option is a Kafka client property too: ``tidelog.spark.kafka_params``
maps the ones tidelog's client uses, ignores the others with a warning (as a Kafka client
does with a property it does not know) and refuses the few Spark's connector refuses.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidelog.model import TopicPartition
from tidelog.protocol.records import Compression
from tidelog.spark import errors
from tidelog.spark.kafka_params import consumer_params, producer_params
from tidelog.spark.option_values import (
    KAFKA_PREFIX,
    SECURITY_OPTIONS,
    SSL_OPTION_PREFIX,
    SecurityProperties,
    bool_option,
    choice_option,
    duration_ms_option,
    get_option,
    int_option,
    parse_bootstrap_servers,
    parse_read_committed,
    parse_security,
)
from tidelog.storage.compression import DEFAULT_LEVELS, CompressionLevels

#: Offsets in JSON specs with a special meaning (Spark's Kafka connector).
LATEST: Final = -1
EARLIEST: Final = -2

#: Options Spark itself may put beside the user's (streaming sinks get these).
_SPARK_OWN: Final = frozenset({"path", "checkpointlocation", "queryname"})

#: ``kafka.*`` read options parsed here (the others: ``tidelog.spark.kafka_params``).
_READ_KAFKA: Final = (
    "kafka.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.isolation.level",
    "kafka.group.id",
)
READ_OPTIONS: Final = (
    *_READ_KAFKA,
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "fetch.max.bytes",
    "commitOffsetsToGroup",
    *SECURITY_OPTIONS,
)
#: ``kafka.*`` write options parsed here.
_WRITE_KAFKA: Final = (
    "kafka.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.acks",
    "kafka.transaction.timeout.ms",
)
WRITE_OPTIONS: Final = (
    *_WRITE_KAFKA,
    "topic",
    "includeHeaders",
    "exactlyOnce",
    "transactionalIdPrefix",
    *SECURITY_OPTIONS,
)
#: Read options that make no sense on a stream (Spark's ``validateStreamOptions``).
_BATCH_ONLY: Final = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")

log = logging.getLogger(__name__)

#: Raised for a bad option (defined in ``tidelog.spark.errors``; importable from here).
SparkOptionError = errors.SparkOptionError


def _check_known(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    """Every option outside ``kafka.*`` must be one of ``allowed`` (``kafka.*`` options
    are Kafka client properties: ``tidelog.spark.kafka_params``)."""
    allowed_lower = {a.lower() for a in allowed}
    for key in options:
        low = key.lower()
        if low in allowed_lower or low in _SPARK_OWN or low.startswith(KAFKA_PREFIX):
            continue
        raise SparkOptionError(
            f"unknown option '{key}' for a tidelog {what}; known options: {', '.join(allowed)}, "
            f"{KAFKA_PREFIX}* (Kafka client properties)"
        )


def _kafka_rest(options: Mapping[str, str], parsed_here: tuple[str, ...]) -> dict[str, str]:
    """The ``kafka.*`` options this module does not parse itself (not ``parsed_here``, the
    security options or ``kafka.ssl.*``), for ``tidelog.spark.kafka_params``."""
    handled = {o.lower() for o in (*parsed_here, *SECURITY_OPTIONS)}
    return {
        k: str(v)
        for k, v in options.items()
        if k.lower().startswith(KAFKA_PREFIX)
        and k.lower() not in handled
        and not k.lower().startswith(SSL_OPTION_PREFIX)
    }


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


def _topic_partition_json(
    name: str, raw: str, *, timestamps: bool = False
) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {topic: {partition: offset}}; with
    ``timestamps``, ``{"topic": {"0": 1700000000000}}`` (ms, no -1/-2 there)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SparkOptionError(
            f"option '{name}' is not valid JSON ({exc.msg}); expected "
            + (
                '{"topic": {"0": <timestamp ms>}}'
                if timestamps
                else '{"topic": {"0": 23}} or "earliest"/"latest"'
            )
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
            lowest, what = (0, "timestamp (ms)") if timestamps else (EARLIEST, "offset")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
                raise SparkOptionError(
                    f"option '{name}': {what} of {topic}-{partition} must be an integer "
                    f">= {lowest}, not {offset!r}"
                )
            result[topic][int(partition)] = offset
    return result


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {
        name: get_option(options, name)
        for name in ("subscribe", "subscribePattern", "assign")
        if get_option(options, name) is not None
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
    """``startingTimestamp``/``endingTimestamp``: every partition at its first offset whose
    timestamp is at or after ``timestamp_ms``."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PartitionTimestampSpec:
    """``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp``: a timestamp (ms) per
    partition, which must name every partition of the subscription (Spark's rule)."""

    timestamps: Mapping[str, Mapping[int, int]]


OffsetSpec = EarliestSpec | LatestSpec | SpecificSpec | TimestampSpec | PartitionTimestampSpec

#: ``startingOffsetsByTimestampStrategy``: what a partition with no record at or after its
#: starting timestamp does: fail the query ("error", Spark's default) or start at latest.
TIMESTAMP_STRATEGIES: Final = ("error", "latest")


def _offset_spec(options: Mapping[str, str], name: str) -> OffsetSpec | None:
    raw = get_option(options, name)
    if raw is None:
        return None
    value = raw.strip()
    if value.lower() == "earliest":
        return EarliestSpec()
    if value.lower() == "latest":
        return LatestSpec()
    return SpecificSpec(_topic_partition_json(name, value))


def _bound_spec(options: Mapping[str, str], side: str) -> tuple[str, OffsetSpec] | None:
    """The starting (``side`` "starting") or ending spec and the option that gave it, by
    Spark's precedence: ``<side>Timestamp`` over ``<side>OffsetsByTimestamp`` over
    ``<side>Offsets``; the options a higher one overrides are logged as ignored."""
    names = (f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets")
    given = [name for name in names if get_option(options, name) is not None]
    if not given:
        return None
    name = given[0]
    for ignored in given[1:]:
        log.warning("option '%s' is ignored: '%s' takes precedence (Spark's rule)", ignored, name)
    if name == names[0]:
        timestamp = int_option(options, name, None, 0)
        assert timestamp is not None
        return name, TimestampSpec(timestamp)
    if name == names[1]:
        raw = get_option(options, name)
        assert raw is not None
        return name, PartitionTimestampSpec(_topic_partition_json(name, raw, timestamps=True))
    spec = _offset_spec(options, name)
    assert spec is not None
    return name, spec


def _check_batch_bounds(starting: OffsetSpec | None, ending: OffsetSpec | None) -> None:
    """Spark's batch rules: no start at latest, no end at earliest."""
    if isinstance(starting, LatestSpec):
        raise SparkOptionError(
            "option 'startingOffsets' cannot be 'latest' for a batch query (it would read nothing)"
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


# --- parsed options ----------------------------------------------------------------------

#: ``groupIdPrefix`` defaults (Spark's): generated group ids of streams and of batch reads.
DEFAULT_STREAM_GROUP_PREFIX: Final = "spark-kafka-source"
DEFAULT_BATCH_GROUP_PREFIX: Final = "spark-kafka-relation"
#: ``maxTriggerDelay`` when none is given (Spark's default, 15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 900_000


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
    #: The client's security properties (``option_values`` rule 3; never in the repr).
    security_properties: SecurityProperties = field(default=(), repr=False)
    #: ``commitOffsetsToGroup`` with ``kafka.group.id``: the consumer group a stream commits
    #: its offsets to after each micro-batch (``tidelog.spark.progress``); None: no commits.
    commit_group: str | None = None
    #: ``startingOffsetsByTimestampStrategy``: "error" or "latest".
    starting_timestamp_strategy: str = "error"
    #: ``minOffsetsPerTrigger``: a micro-batch waits for this many new offsets, or for
    #: ``maxTriggerDelay`` (ms) since the last micro-batch.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    #: ``maxRecordsPerPartition``: offset ranges are cut into pieces of at most this many.
    max_records_per_partition: int | None = None
    #: ``kafka.group.id`` (reads assign partitions directly: a group only receives
    #: committed offsets) and ``groupIdPrefix`` (ignored when ``kafka.group.id`` is set).
    group_id: str | None = None
    group_id_prefix: str = DEFAULT_STREAM_GROUP_PREFIX
    #: ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: retries of each offset
    #: look-up and the wait between them (None: retry with backoff until
    #: ``kafkaConsumer.pollTimeoutMs``).
    fetch_offset_retries: int | None = None
    fetch_offset_retry_interval_ms: int | None = None
    #: ``kafka.max.poll.records``: rows per Arrow batch a read task yields (None: a fetch's).
    max_poll_records: int | None = None


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check the options of a batch (``streaming=False``) or streaming read."""
    kind = "streaming read" if streaming else "batch read"
    _check_known(options, READ_OPTIONS, kind)
    servers = parse_bootstrap_servers(options)
    subscription = _subscription(options)
    starting, ending = _bounds(options, subscription, streaming=streaming)
    request_timeout = int_option(options, "kafka.request.timeout.ms", 30000, 1)
    poll_timeout = int_option(options, "kafkaConsumer.pollTimeoutMs", 120000, 1)
    fetch_max = int_option(options, "fetch.max.bytes", 8 << 20, 1024)
    assert request_timeout is not None
    assert poll_timeout is not None
    assert fetch_max is not None
    client = consumer_params(_kafka_rest(options, _READ_KAFKA), kind)
    min_offsets, max_delay = _trigger_options(options)
    group_id, group_id_prefix = _group_options(options, streaming=streaming)
    return ReadOptions(
        bootstrap_servers=servers,
        client_id=get_option(options, "kafka.client.id") or "tidelog-spark",
        request_timeout_ms=request_timeout,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=int_option(options, "maxOffsetsPerTrigger", None, 1),
        min_partitions=int_option(options, "minPartitions", None, 1),
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
        include_headers=bool_option(options, "includeHeaders", False),
        poll_timeout_ms=poll_timeout,
        fetch_max_bytes=min(fetch_max, client.fetch_max_bytes or fetch_max),
        read_committed=parse_read_committed(options),
        security_properties=parse_security(options),
        commit_group=_commit_group(options, streaming),
        starting_timestamp_strategy=choice_option(
            options, "startingOffsetsByTimestampStrategy", TIMESTAMP_STRATEGIES
        ),
        max_records_per_partition=int_option(options, "maxRecordsPerPartition", None, 1),
        max_poll_records=client.max_poll_records,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_delay,
        group_id=group_id,
        group_id_prefix=group_id_prefix,
        fetch_offset_retries=int_option(options, "fetchOffset.numRetries", None, 0),
        fetch_offset_retry_interval_ms=int_option(options, "fetchOffset.retryIntervalMs", None, 0),
    )


def _bounds(
    options: Mapping[str, str], subscription: Subscription, *, streaming: bool
) -> tuple[OffsetSpec, OffsetSpec]:
    """The starting and ending specs of a read, checked (Spark's rules)."""
    start = _bound_spec(options, "starting")
    end = _bound_spec(options, "ending")
    for given in (start, end):
        if given is not None and isinstance(given[1], SpecificSpec | PartitionTimestampSpec):
            _check_spec_against_subscription(given[0], given[1], subscription)
    if streaming:
        named = [name for name in _BATCH_ONLY if get_option(options, name) is not None]
        if named:
            raise SparkOptionError(f"option '{named[0]}' is for batch queries only")
        return (start[1] if start else LatestSpec()), LatestSpec()
    starting, ending = (start[1] if start else None), (end[1] if end else None)
    _check_batch_bounds(starting, ending)
    return starting or EarliestSpec(), ending or LatestSpec()


def _trigger_options(options: Mapping[str, str]) -> tuple[int | None, int]:
    """``minOffsetsPerTrigger`` and ``maxTriggerDelay`` (streams; batch reads ignore them)."""
    minimum = int_option(options, "minOffsetsPerTrigger", None, 1)
    maximum = int_option(options, "maxOffsetsPerTrigger", None, 1)
    delay = duration_ms_option(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS)
    if minimum is not None and maximum is not None and minimum > maximum:
        raise SparkOptionError(
            f"option 'minOffsetsPerTrigger' ({minimum}) cannot be greater than "
            f"'maxOffsetsPerTrigger' ({maximum})"
        )
    if minimum is None and get_option(options, "maxTriggerDelay") is not None:
        log.warning("option 'maxTriggerDelay' applies only with 'minOffsetsPerTrigger': ignored")
    return minimum, delay


def _group_options(options: Mapping[str, str], *, streaming: bool) -> tuple[str | None, str]:
    """``kafka.group.id`` and ``groupIdPrefix``."""
    group_id = get_option(options, "kafka.group.id")
    if group_id is not None and not group_id.strip():
        raise SparkOptionError("option 'kafka.group.id' is empty")
    prefix = get_option(options, "groupIdPrefix")
    if prefix is not None and not prefix.strip():
        raise SparkOptionError("option 'groupIdPrefix' is empty")
    if group_id is not None and prefix is not None:
        log.warning("option 'groupIdPrefix' is ignored: 'kafka.group.id' is set")
    default = DEFAULT_STREAM_GROUP_PREFIX if streaming else DEFAULT_BATCH_GROUP_PREFIX
    return (
        group_id.strip() if group_id is not None else None,
        prefix.strip() if prefix is not None else default,
    )


def _commit_group(options: Mapping[str, str], streaming: bool) -> str | None:
    """``commitOffsetsToGroup`` (default false) and the ``kafka.group.id`` it commits to (a
    group named by the user: never one made from ``groupIdPrefix``)."""
    if not bool_option(options, "commitOffsetsToGroup", False):
        return None
    if not streaming:
        raise SparkOptionError("option 'commitOffsetsToGroup' is for streaming queries only")
    raw = get_option(options, "kafka.group.id")
    group = raw.strip() if raw is not None else None
    if not group:
        raise SparkOptionError(
            "option 'commitOffsetsToGroup' needs 'kafka.group.id': the consumer group to "
            "commit the query's offsets to"
        )
    return group


def _check_spec_against_subscription(
    name: str, spec: SpecificSpec | PartitionTimestampSpec, subscription: Subscription
) -> None:
    per_topic = spec.offsets if isinstance(spec, SpecificSpec) else spec.timestamps
    named = {TopicPartition(t, p) for t, parts in per_topic.items() for p in parts}
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
#: ``kafka.batch.size`` when none is given (larger than the Kafka producer's 16 KiB: a
#: Spark task has all its rows at hand).
DEFAULT_BATCH_BYTES: Final = 512 * 1024
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
    #: The client's security properties (``option_values`` rule 3; never in the repr).
    security_properties: SecurityProperties = field(default=(), repr=False)
    #: ``kafka.compression.type`` and KIP-390's ``kafka.compression.*.level``: the codec
    #: of the record batches the sink writes.
    compression: Compression = Compression.NONE
    compression_levels: CompressionLevels = DEFAULT_LEVELS
    #: ``kafka.batch.size``: a record batch is cut once it holds this many bytes.
    batch_bytes: int = DEFAULT_BATCH_BYTES


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    _check_known(options, WRITE_OPTIONS, "write")
    servers = parse_bootstrap_servers(options)
    topic = get_option(options, "topic")
    if topic is not None and not topic.strip():
        raise SparkOptionError("option 'topic' is empty")
    acks_raw = (get_option(options, "kafka.acks") or "all").strip().lower()
    acks_map = {"all": -1, "-1": -1, "1": 1, "0": 0}
    if acks_raw not in acks_map:
        raise SparkOptionError(f"option 'kafka.acks' must be all, -1, 1 or 0, not {acks_raw!r}")
    request_timeout = int_option(options, "kafka.request.timeout.ms", 30000, 1)
    assert request_timeout is not None
    if get_option(options, "includeHeaders") is not None:
        bool_option(options, "includeHeaders", False)  # accepted (a headers column is written)
    exactly_once = bool_option(options, "exactlyOnce", False)
    prefix = get_option(options, "transactionalIdPrefix")
    timeout = int_option(options, "kafka.transaction.timeout.ms", None, 1)
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
    client = producer_params(_kafka_rest(options, _WRITE_KAFKA))
    delivery = client.delivery_timeout_ms
    if delivery is not None and delivery < request_timeout:
        raise SparkOptionError(
            f"option 'kafka.delivery.timeout.ms' ({delivery}) must be at least "
            f"'kafka.request.timeout.ms' ({request_timeout})"
        )
    return WriteOptions(
        bootstrap_servers=servers,
        client_id=get_option(options, "kafka.client.id") or "tidelog-spark",
        request_timeout_ms=request_timeout,
        topic=topic.strip() if topic else None,
        acks=acks_map[acks_raw],
        retry_timeout_ms=delivery if delivery is not None else max(request_timeout * 2, 120000),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix.strip() if prefix else DEFAULT_TRANSACTIONAL_ID_PREFIX,
        transaction_timeout_ms=timeout if timeout is not None else DEFAULT_TRANSACTION_TIMEOUT_MS,
        security_properties=parse_security(options),
        compression=client.compression,
        compression_levels=client.levels,
        batch_bytes=client.batch_bytes if client.batch_bytes is not None else DEFAULT_BATCH_BYTES,
    )
