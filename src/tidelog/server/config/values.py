"""Config values: the parsers and range checks every broker and topic key is declared with.

Each parser takes the raw string of a ``server.properties`` line or an AlterConfigs entry and
returns the value or raises ``ValueError`` with a message; each check takes the parsed value
and returns a problem or None. Value types parsed from one key (``PeerAddresses``,
``MetricsListener``) live here with their parsers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tidelog.storage.compression import COMPRESSION_TYPES

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

# --- value parsers: each takes the raw string and returns the value or raises ValueError ---


def _parse_int(raw: str) -> int:
    value = int(raw.strip())
    if not -(2**63) <= value <= LONG_MAX:
        raise ValueError("out of the range of a 64-bit integer")
    return value


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError("expected true or false")


def _parse_str(raw: str) -> str:
    return raw.strip()


def _parse_double(raw: str) -> float:
    value = float(raw.strip())
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _cleanup_policy(raw: str) -> str:
    """Kafka's ``cleanup.policy``: a LIST of ``delete`` and ``compact`` (kafka-configs'
    ``[compact,delete]`` is CLI syntax; the broker sees ``compact,delete``). The empty list
    is valid, as in Kafka 3.x's ``ValidList``: neither retention nor compaction removes
    anything (an IncrementalAlterConfigs SUBTRACT of every policy leaves it)."""
    if not raw.strip():
        return ""
    items = [item.strip() for item in raw.strip().split(",")]
    if any(item not in ("delete", "compact") for item in items):
        raise ValueError("must be a list of delete and compact")
    return ",".join(dict.fromkeys(items))


def _ratio(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0.0 and 1.0"


@dataclass(frozen=True, slots=True)
class PeerAddresses:
    """``tidelog.testing.peer.addresses`` (testing only): where THIS broker reaches some peer
    brokers instead of the address each peer registered in ZooKeeper, e.g. a fault
    harness's proxy for the one link this broker -> that peer. Peers not listed are reached
    at their registered address."""

    by_broker: tuple[tuple[int, str, int], ...] = ()

    def __str__(self) -> str:
        return ",".join(f"{b}={host}:{port}" for b, host, port in self.by_broker)

    def peer_address(
        self, broker_id: int, registered_host: str, registered_port: int
    ) -> tuple[str, int]:
        """Where to connect to broker ``broker_id``, registered at host:port."""
        for listed, host, port in self.by_broker:
            if listed == broker_id:
                return host, port
        return registered_host, registered_port


_PEER_HOST = re.compile(r"[A-Za-z0-9._-]+")
_DIGITS = re.compile(r"[0-9]+")


def parse_peer_addresses(raw: str) -> PeerAddresses:
    """``brokerId=host:port[,brokerId=host:port...]`` (empty: none); ValueError says what is
    wrong with which entry."""
    entries: list[tuple[int, str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        broker, sep, address = (text.strip() for text in item.partition("="))
        if not sep:
            raise ValueError(f"entry {item!r} must look like brokerId=host:port")
        if _DIGITS.fullmatch(broker) is None or int(broker) > INT_MAX:
            raise ValueError(f"entry {item!r}: broker id {broker!r} must be a non-negative integer")
        host, colon, port = address.rpartition(":")
        if not colon or _PEER_HOST.fullmatch(host) is None:
            raise ValueError(f"entry {item!r}: address {address!r} must be host:port")
        if _DIGITS.fullmatch(port) is None or not 1 <= int(port) <= 65535:
            raise ValueError(f"entry {item!r}: port {port!r} must be between 1 and 65535")
        if any(listed == int(broker) for listed, _, _ in entries):
            raise ValueError(f"broker {int(broker)} is listed twice")
        entries.append((int(broker), host, int(port)))
    return PeerAddresses(tuple(entries))


@dataclass(frozen=True, slots=True)
class MetricsListener:
    """``metrics.listener``: where the Prometheus endpoint listens (``http://host:port``; port
    0 picks a free one). The path is always ``/metrics``
    (``tidelog.server.observability.metrics``)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


_METRICS_LISTENER = re.compile(
    r"http://(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]+)/?"
)


def parse_metrics_listener(raw: str) -> MetricsListener | None:
    """``http://host:port`` (an IPv6 host in brackets) or empty (off); ValueError says what
    is wrong."""
    text = raw.strip()
    if not text:
        return None
    match = _METRICS_LISTENER.fullmatch(text)
    if match is None:
        raise ValueError("expected http://host:port (the path is always /metrics), or empty")
    port = int(match.group("port"))
    if port > 65535:
        raise ValueError(f"port {port} must be between 0 and 65535")
    return MetricsListener(match.group("ipv6") or match.group("host"), port)


def _metrics_listener_value(raw: str) -> str:
    """The key's value as stored: validated, kept as text (DescribeConfigs shows it)."""
    listener = parse_metrics_listener(raw)
    return "" if listener is None else str(listener)


def _at_least(minimum: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return check


def _between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}"

    return check


def _minus_one_or_between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        ok = value == -1 or low <= value <= high
        return None if ok else f"must be -1 or between {low} and {high}"

    return check


def _minus_one_or_at_least(minimum: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if value == -1 or value >= minimum else f"must be -1 or at least {minimum}"

    return check


#: Kafka's four security protocols (``SecurityProtocol``).
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's default ``listener.security.protocol.map``: each protocol names its own listener.
DEFAULT_PROTOCOL_MAP: Final = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)


def _enum_value(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


#: KIP-392: the one replica selector Kafka ships (``replica.selector.class``; empty: none,
#: consumers read from the leader only; ``tidelog.server.replica.selector``).
RACK_AWARE_REPLICA_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(raw: str) -> str:
    """``replica.selector.class``: empty or the rack-aware selector; ValueError as Kafka's
    ConfigDef words it for a class it cannot load."""
    name = raw.strip()
    if name not in {"", RACK_AWARE_REPLICA_SELECTOR}:
        raise ValueError(f"Class {name} cannot be found.")
    return name


def _message_format_version(raw: str) -> str:
    """Kafka's ``message.format.version``: a release name as ``MetadataVersion`` spells it
    (``2.8``, ``3.0-IV1``, ``0.10.2``); ignored since Kafka 3.0 (KIP-724), as here."""
    value = raw.strip()
    if _FORMAT_VERSION.fullmatch(value) is None:
        raise ValueError("must be a Kafka version such as 3.0-IV1 or 2.8")
    return value


_FORMAT_VERSION = re.compile(r"[0-9]+\.[0-9]+(?:\.[0-9]+)?(?:-IV[0-9]+)?")


def _compression_type(raw: str) -> str:
    """Kafka's ``compression.type`` (case-sensitive, as Kafka's ``ValidString``)."""
    value = raw.strip()
    if value not in COMPRESSION_TYPES:
        raise ValueError(f"must be one of {', '.join(COMPRESSION_TYPES)}")
    return value
