"""One option's value of the ``tidelog`` format, read and checked; ``tidelog.spark.options``
builds the read and write options from these (pure: no Spark, and no IO but rule 2's).

Spark hands a data source its options with lower-cased keys: a value is looked up whatever
its case, and every error (a ``SparkOptionError``) names the option in Spark's spelling.

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
3. The parsed options carry the properties (``SecurityProperties``: plain strings, which
   pickle to executors; a ``ClientSecurity`` holds an ``ssl.SSLContext``, which does
   not), and ``client_security`` builds the ``ClientSecurity`` where a client is made.
   The options leave them out of their repr: a password must never reach a log line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.security.errors import SecurityConfigError
from tidelog.spark.errors import SparkOptionError

#: The prefix of the options that are Kafka client properties.
KAFKA_PREFIX: Final = "kafka."


def get_option(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` whatever the case of its key; None when not given."""
    low = name.lower()
    for key, value in options.items():
        if key.lower() == low:
            return str(value)
    return None


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Option ``name`` as true or false (any case); ``default`` when not given."""
    raw = get_option(options, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SparkOptionError(f"option '{name}' must be true or false, not {raw!r}")
    return value == "true"


def int_option(
    options: Mapping[str, str], name: str, default: int | None, minimum: int
) -> int | None:
    """Option ``name`` as an integer of at least ``minimum``; ``default`` when not given."""
    raw = get_option(options, name)
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


def parse_read_committed(options: Mapping[str, str]) -> bool:
    """``kafka.isolation.level``: True for read_committed (the default), False for
    read_uncommitted."""
    raw = get_option(options, "kafka.isolation.level")
    if raw is None:
        return True
    value = raw.strip().lower()
    if value not in ISOLATION_LEVELS:
        raise SparkOptionError(
            f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, "
            f"not {raw!r}"
        )
    return value == "read_committed"


def parse_bootstrap_servers(options: Mapping[str, str]) -> str:
    """``kafka.bootstrap.servers`` (required): a comma-separated list of host:port."""
    servers = get_option(options, "kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise SparkOptionError("option 'kafka.bootstrap.servers' is required (host:port,...)")
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SparkOptionError(
                f"option 'kafka.bootstrap.servers': {item.strip()!r} is not host:port"
            )
    return servers.strip()


_DURATION: Final = re.compile(r"\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_DURATION_MS: Final = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def duration_ms_option(options: Mapping[str, str], name: str, default: int) -> int:
    """A time like Spark's ``timeStringAsMs``: ``15m``, ``30s``, ``500ms``, ``2h``, ``1d``
    (a bare number is milliseconds)."""
    raw = get_option(options, name)
    if raw is None:
        return default
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise SparkOptionError(
            f"option '{name}' must be a time like 15m, 30s, 500ms, 2h (a bare number is "
            f"milliseconds), not {raw!r}"
        )
    return int(int(match.group(1)) * _DURATION_MS[(match.group(2) or "ms").lower()])


def choice_option(options: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """Option ``name``, lower-cased, one of ``choices``; the first of them when not given."""
    raw = get_option(options, name)
    if raw is None:
        return choices[0]
    value = raw.strip().lower()
    if value not in choices:
        raise SparkOptionError(f"option '{name}' must be {' or '.join(choices)}, not {raw!r}")
    return value


# --- security (rules 1-3) -------------------------------------------------------------------

#: Security options (rule 1), besides every ``kafka.ssl.*`` one.
SECURITY_OPTIONS: Final = (
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.sasl.username",
    "kafka.sasl.password",
)
SSL_OPTION_PREFIX: Final = "kafka.ssl."
#: Client properties, as (key, value) pairs sorted by key.
SecurityProperties = tuple[tuple[str, str], ...]


def _is_security_option(key: str) -> bool:
    """Whether ``key`` is a security option (rule 1)."""
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
        raise SparkOptionError(f"option '{KAFKA_PREFIX}{exc.key}': {detail}") from None


def parse_security(options: Mapping[str, str]) -> SecurityProperties:
    """Rules 1 and 2: the security options without their prefix, checked."""
    properties = {
        key.lower().removeprefix(KAFKA_PREFIX): str(value)
        for key, value in options.items()
        if _is_security_option(key)
    }
    result = tuple(sorted(properties.items()))
    client_security(result)
    return result
