"""The ``kafka.*`` options: Kafka client properties, as Spark's Kafka connector hands them
(without the prefix) to its consumers and producers.

Rules:

1. A property this connector uses is checked and mapped onto its own client's settings
   (``READ_MAPPED``/``WRITE_MAPPED`` and the ones ``tidelog.spark.options`` parses itself:
   bootstrap servers, client id, request timeout, isolation level, acks, transaction
   timeout, security). A wrong value fails the query with a message naming the option.
2. A Kafka client property that tidelog's client has no use for (``READ_NO_EFFECT``/
   ``WRITE_NO_EFFECT``: consumer-group membership, socket buffers, ...) is checked the same
   way when its type is known, then ignored with a warning saying why.
3. Any other ``kafka.*`` key is ignored with a warning, as a Kafka client logs a property
   it does not know ("supplied but isn't a known config") and goes on.
4. The properties Spark's connector refuses because it manages them itself are refused
   with its reason (``READ_REFUSED``/``WRITE_REFUSED``).

Pure: no Spark, no IO; the warnings go to this module's logger on the driver, where the
options are parsed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.protocol.records import Compression
from tidelog.spark.errors import SparkOptionError
from tidelog.storage.compression import DEFAULT_LEVELS, CompressionLevels

log = logging.getLogger(__name__)

PREFIX: Final = "kafka."

#: ``kafka.compression.type`` values (the Kafka producer's ``compression.type``).
COMPRESSION_TYPES: Final = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

#: Rule 1, reads: property -> what it sets.
READ_MAPPED: Final = {
    "fetch.max.bytes": "the bytes of one fetch of an executor (default 8 MiB)",
    "max.partition.fetch.bytes": "the bytes of one fetch (a task fetches one partition)",
    "max.poll.records": "the rows of one Arrow batch a task hands to Spark",
}
#: Rule 1, writes.
WRITE_MAPPED: Final = {
    "compression.type": "the codec of the record batches the sink writes",
    "compression.gzip.level": "the gzip level (KIP-390)",
    "compression.lz4.level": "the lz4 level (KIP-390)",
    "compression.zstd.level": "the zstd level (KIP-390)",
    "batch.size": "the bytes of one record batch",
    "delivery.timeout.ms": "how long a task keeps retrying a produce",
}

_GROUP: Final = "tidelog reads assign partitions and join no consumer group"
_SOCKET: Final = "tidelog's client leaves socket buffers to the operating system"
_BACKOFF: Final = "retries back off 100 ms doubling to 2 s (kafkaConsumer.pollTimeoutMs)"
_FETCH_WAIT: Final = "an executor's fetch waits at most 500 ms and returns what there is"
_METADATA: Final = "metadata is refreshed on every retriable error"
#: Rule 2, reads: property -> why it has no effect.
READ_NO_EFFECT: Final = {
    "session.timeout.ms": _GROUP,
    "heartbeat.interval.ms": _GROUP,
    "max.poll.interval.ms": _GROUP,
    "auto.commit.interval.ms": _GROUP,
    "partition.assignment.strategy": _GROUP,
    "group.instance.id": _GROUP,
    "group.protocol": _GROUP,
    "fetch.min.bytes": _FETCH_WAIT,
    "fetch.max.wait.ms": _FETCH_WAIT,
    "retry.backoff.ms": _BACKOFF,
    "reconnect.backoff.ms": _BACKOFF,
    "reconnect.backoff.max.ms": _BACKOFF,
    "default.api.timeout.ms": "driver look-ups are bounded by kafkaConsumer.pollTimeoutMs",
    "receive.buffer.bytes": _SOCKET,
    "send.buffer.bytes": _SOCKET,
    "metadata.max.age.ms": _METADATA,
    "connections.max.idle.ms": "a task's connection lives as long as the task",
    "check.crcs": "executors always check batch CRCs",
    "client.rack": "tasks fetch from partition leaders",
    "allow.auto.create.topics": "reads never create topics",
    "exclude.internal.topics": "subscribePattern matches only the topics it names",
}
#: Rule 2, writes.
WRITE_NO_EFFECT: Final = {
    "linger.ms": (
        "a task's records wait in its buffer until a batch fills (kafka.batch.size) or the "
        "task's rows end, whatever linger.ms says"
    ),
    "buffer.memory": "a task buffers up to 8 record batches (kafka.batch.size) of rows",
    "max.block.ms": "a task's buffer never blocks; it sends when full",
    "max.request.size": "each record batch is sent in a request of its own",
    "retries": "retries are bounded by time: kafka.delivery.timeout.ms",
    "retry.backoff.ms": _BACKOFF,
    "reconnect.backoff.ms": _BACKOFF,
    "reconnect.backoff.max.ms": _BACKOFF,
    "max.in.flight.requests.per.connection": "a task sends one request per partition at a time",
    "enable.idempotence": (
        "writes are at-least-once, or transactional (and so idempotent) with exactlyOnce"
    ),
    "transactional.id": "exactlyOnce makes transactional ids from transactionalIdPrefix",
    "partitioner.class": "rows are partitioned as Kafka's default partitioner does",
    "partitioner.ignore.keys": "rows are partitioned as Kafka's default partitioner does",
    "receive.buffer.bytes": _SOCKET,
    "send.buffer.bytes": _SOCKET,
    "metadata.max.age.ms": _METADATA,
    "connections.max.idle.ms": "a task's connection lives as long as the task",
    "client.rack": "producers write to partition leaders",
}

#: Rule 4 (Spark's ``KafkaSourceProvider``): property -> why it is refused.
READ_REFUSED: Final = {
    "auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' to say where to "
        "start; later the query starts where it left off (its checkpoint)"
    ),
    "key.deserializer": (
        "keys are always read as bytes; use DataFrame operations to deserialize them"
    ),
    "value.deserializer": (
        "values are always read as bytes; use DataFrame operations to deserialize them"
    ),
    "enable.auto.commit": "the source commits no offsets; its checkpoint holds them",
    "interceptor.classes": "the source reads keys and values as bytes; interceptors would break it",
}
WRITE_REFUSED: Final = {
    "key.serializer": "keys are always written as bytes; cast the key column to string or binary",
    "value.serializer": (
        "values are always written as bytes; cast the value column to string or binary"
    ),
}

#: Properties the types of which are checked (rules 1-2): name -> (minimum, maximum).
_INTS: Final = {
    "fetch.max.bytes": (1024, None),
    "max.partition.fetch.bytes": (1024, None),
    "max.poll.records": (1, None),
    "batch.size": (0, None),
    "delivery.timeout.ms": (1, None),
    "compression.gzip.level": (-1, 9),
    "compression.lz4.level": (1, 17),
    "compression.zstd.level": (-131072, 22),
    "session.timeout.ms": (1, None),
    "heartbeat.interval.ms": (1, None),
    "max.poll.interval.ms": (1, None),
    "auto.commit.interval.ms": (0, None),
    "fetch.min.bytes": (0, None),
    "fetch.max.wait.ms": (0, None),
    "retry.backoff.ms": (0, None),
    "reconnect.backoff.ms": (0, None),
    "reconnect.backoff.max.ms": (0, None),
    "default.api.timeout.ms": (0, None),
    "receive.buffer.bytes": (-1, None),
    "send.buffer.bytes": (-1, None),
    "metadata.max.age.ms": (0, None),
    "connections.max.idle.ms": (-1, None),
    "linger.ms": (0, None),
    "buffer.memory": (0, None),
    "max.block.ms": (0, None),
    "max.request.size": (1, None),
    "retries": (0, None),
    "max.in.flight.requests.per.connection": (1, None),
}
_BOOLS: Final = frozenset(
    {"check.crcs", "allow.auto.create.topics", "exclude.internal.topics", "enable.idempotence"}
)


def _int(name: str, raw: str) -> int:
    low, high = _INTS[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"option '{PREFIX}{name}' must be an integer, not {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise SparkOptionError(f"option '{PREFIX}{name}' must be {bound}, not {value}")
    return value


def _check_type(name: str, raw: str) -> None:
    if name in _INTS:
        _int(name, raw)
    elif name in _BOOLS and raw.strip().lower() not in ("true", "false"):
        raise SparkOptionError(f"option '{PREFIX}{name}' must be true or false, not {raw!r}")


def _properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options, lower-cased and without the prefix."""
    return {
        key.lower().removeprefix(PREFIX): str(value)
        for key, value in options.items()
        if key.lower().startswith(PREFIX)
    }


def _screen(
    properties: Mapping[str, str],
    mapped: Mapping[str, str],
    no_effect: Mapping[str, str],
    refused: Mapping[str, str],
    what: str,
) -> None:
    """Rules 2-4 (and the type checks of rule 1) for one read or write."""
    for name, raw in sorted(properties.items()):
        if name in refused:
            raise SparkOptionError(
                f"option '{PREFIX}{name}' (Kafka's '{name}') is not supported by Spark's Kafka "
                f"connector nor tidelog: {refused[name]}"
            )
        _check_type(name, raw)
        if name in mapped:
            continue
        if name in no_effect:
            log.warning(
                "option '%s%s' has no effect on a tidelog %s and is ignored: %s",
                PREFIX,
                name,
                what,
                no_effect[name],
            )
        else:
            log.warning(
                "option '%s%s' is not a Kafka client property tidelog uses for a %s; ignored",
                PREFIX,
                name,
                what,
            )


@dataclass(frozen=True, slots=True)
class ConsumerParams:
    """What the ``kafka.*`` options of a read set (None: the connector's default)."""

    fetch_max_bytes: int | None = None
    max_poll_records: int | None = None


@dataclass(frozen=True, slots=True)
class ProducerParams:
    """What the ``kafka.*`` options of a write set (None: the connector's default)."""

    compression: Compression = Compression.NONE
    levels: CompressionLevels = DEFAULT_LEVELS
    batch_bytes: int | None = None
    delivery_timeout_ms: int | None = None


def consumer_params(options: Mapping[str, str], what: str) -> ConsumerParams:
    """Rules 1-4 for a read (``what``: "batch read" or "streaming read"), given the
    ``kafka.*`` options ``tidelog.spark.options`` does not parse itself."""
    props = _properties(options)
    _screen(props, READ_MAPPED, READ_NO_EFFECT, READ_REFUSED, what)
    sizes = [
        _int(n, props[n]) for n in ("fetch.max.bytes", "max.partition.fetch.bytes") if n in props
    ]
    records = props.get("max.poll.records")
    return ConsumerParams(
        fetch_max_bytes=min(sizes) if sizes else None,
        max_poll_records=_int("max.poll.records", records) if records is not None else None,
    )


def producer_params(options: Mapping[str, str]) -> ProducerParams:
    """Rules 1-4 for a write."""
    props = _properties(options)
    _screen(props, WRITE_MAPPED, WRITE_NO_EFFECT, WRITE_REFUSED, "write")
    raw = props.get("compression.type")
    codec = Compression.NONE
    if raw is not None:
        value = raw.strip().lower()
        if value not in COMPRESSION_TYPES:
            raise SparkOptionError(
                f"option '{PREFIX}compression.type' must be one of "
                f"{', '.join(COMPRESSION_TYPES)}, not {raw!r}"
            )
        codec = COMPRESSION_TYPES[value]
    default = CompressionLevels()
    levels = CompressionLevels(
        gzip=_maybe_int(props, "compression.gzip.level", default.gzip),
        lz4=_maybe_int(props, "compression.lz4.level", default.lz4),
        zstd=_maybe_int(props, "compression.zstd.level", default.zstd),
    )
    batch = props.get("batch.size")
    delivery = props.get("delivery.timeout.ms")
    return ProducerParams(
        compression=codec,
        levels=levels,
        batch_bytes=_int("batch.size", batch) if batch is not None else None,
        delivery_timeout_ms=_int("delivery.timeout.ms", delivery) if delivery is not None else None,
    )


def _maybe_int(props: Mapping[str, str], name: str, default: int) -> int:
    raw = props.get(name)
    return default if raw is None else _int(name, raw)
