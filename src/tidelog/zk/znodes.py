"""Kafka's ZooKeeper-era znodes: paths and JSON encodings (pure, no IO).

The shapes follow Kafka's ``kafka.zk.ZkData`` (2.8-3.x) so an operator who knows Kafka's
ZooKeeper layout, or ``zookeeper-shell``, recognises every node::

    /cluster/id                                   {"version":"1","id":"<base64 uuid>"}
    /feature                                      {"features":{},"version":2,"status":1}
    /controller            (ephemeral)            {"version":1,"brokerid":1,"timestamp":"..."}
    /controller_epoch                             1
    /brokers/ids/<id>      (ephemeral)            {"version":5,"host":..,"port":..,
                                                   "endpoints":["PLAINTEXT://h:p"],
                                                   "listener_security_protocol_map":{..},
                                                   "jmx_port":-1,"timestamp":"..","features":{}
                                                   [,"rack":".."]}
    /brokers/topics/<t>                           {"version":3,"partitions":{"0":[1,2,3]},
                                                   "topic_id":"<base64 uuid>",
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state      {"controller_epoch":1,"leader":1,"version":1,
                                                   "leader_epoch":0,"isr":[1,2,3]}
    /config/topics/<t>                            {"version":1,"config":{"k":"v"}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>                      (empty)
    /log_dir_event_notification/log_dir_event_<seq>
                                                  {"version":1,"broker":3,"event":1
                                                   [,"broker_epoch":123]}

Two numbers live in znode metadata, not in the JSON (as in Kafka): a broker's *broker
epoch* is the czxid of its ``/brokers/ids/<id>`` node, and a partition's *partition epoch*
is the znode version of its ``state`` node — which is why partition states are only ever
written with that version as a compare-and-set (docs/design.md, replication rule 5).

Malformed node data raises ``ZNodeDecodeError`` (a local fault: someone wrote garbage into
our ZooKeeper); it never comes from a client request.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.errors import TidelogError
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, PartitionEpoch
from tidelog.replication.partition import LeaderAndIsr

# -- paths --------------------------------------------------------------------------------------

CLUSTER_ID_PATH: Final = "/cluster/id"
FEATURE_PATH: Final = "/feature"
CONTROLLER_PATH: Final = "/controller"
CONTROLLER_EPOCH_PATH: Final = "/controller_epoch"
BROKER_IDS_PATH: Final = "/brokers/ids"
TOPICS_PATH: Final = "/brokers/topics"
CONFIG_TOPICS_PATH: Final = "/config/topics"
CONFIG_CHANGES_PATH: Final = "/config/changes"
CONFIG_CHANGE_PREFIX: Final = CONFIG_CHANGES_PATH + "/config_change_"
DELETE_TOPICS_PATH: Final = "/admin/delete_topics"
LOG_DIR_EVENT_NOTIFICATION_PATH: Final = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX: Final = LOG_DIR_EVENT_NOTIFICATION_PATH + "/log_dir_event_"

#: Persistent paths every cluster has (Kafka's ``ZkData.PersistentZkPaths``, the part we use).
PERSISTENT_PATHS: Final = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
)

#: Kafka's ``KafkaController.InitialControllerEpoch``: /controller_epoch is created with it;
#: the first controller therefore runs with epoch 1.
INITIAL_CONTROLLER_EPOCH: Final = ControllerEpoch(0)

#: Kafka's legal topic characters and maximum length (``org.apache.kafka.common.internals.Topic``).
TOPIC_LEGAL_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)
TOPIC_MAX_LENGTH: Final = 249


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def topic_name_error(topic: str) -> str | None:
    """Why ``topic`` is not a legal Kafka topic name, or None when it is.

    Kafka's rules (``Topic.validate``): non-empty, not ``.``/``..``, at most 249 characters,
    only ASCII letters, digits, ``.``, ``_`` and ``-``. Legal names are also safe znode names.
    """
    if not topic:
        return "Topic name is illegal, it can't be empty"
    if topic in {".", ".."}:
        return 'Topic name cannot be "." or ".."'
    if len(topic) > TOPIC_MAX_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {TOPIC_MAX_LENGTH} characters, "
            f"topic name: {topic}"
        )
    if not set(topic) <= TOPIC_LEGAL_CHARS:
        return (
            f'Topic name "{topic}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


# -- errors and helpers -------------------------------------------------------------------------


class ZNodeDecodeError(TidelogError):
    """A znode's data is not what Kafka's layout says it should be."""

    def __init__(self, what: str, data: bytes, reason: str) -> None:
        shown = data[:200].decode("utf-8", errors="replace")
        super().__init__(f"cannot decode {what} znode ({reason}): {shown!r}")
        self.data = data


def _dumps(obj: Mapping[str, Any]) -> bytes:
    # Jackson's compact form, as Kafka writes it.
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(what: str, data: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZNodeDecodeError(what, data, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ZNodeDecodeError(what, data, "not a JSON object")
    return obj


def _int(what: str, data: bytes, obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    # bool is an int in Python, but not a JSON number.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ZNodeDecodeError(what, data, f"{key!r} is not an integer")
    return value


def _int_list(what: str, data: bytes, value: Any, key: str) -> tuple[BrokerId, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZNodeDecodeError(what, data, f"{key!r} is not a list of integers")
    return tuple(BrokerId(v) for v in value)


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def decode_uuid(text: str) -> uuid.UUID:
    """Inverse of ``encode_uuid``; ValueError when ``text`` is not 22 base64url characters."""
    if len(text) != 22:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    raw = base64.urlsafe_b64decode(text + "==")
    return uuid.UUID(bytes=raw)


def _timestamp(what: str, data: bytes, obj: Mapping[str, Any]) -> int:
    # Kafka writes timestamps as decimal strings.
    value = obj.get("timestamp")
    try:
        return int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else -1
    except ValueError:
        raise ZNodeDecodeError(what, data, "'timestamp' is not a number") from None


# -- /cluster/id ---------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    # Kafka's ClusterIdZNode writes its version as a string.
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    obj = _loads("/cluster/id", data)
    value = obj.get("id")
    if not isinstance(value, str):
        raise ZNodeDecodeError("/cluster/id", data, "'id' is not a string")
    return value


# -- /feature ------------------------------------------------------------------------------------

#: Kafka's FeatureZNode: version 2 (no minimum levels), status 1 = enabled (KIP-584).
FEATURE_ZNODE_VERSION: Final = 2
FEATURE_ZNODE_ENABLED: Final = 1


def encode_feature_znode(levels: Mapping[str, int]) -> bytes:
    """The ``/feature`` data finalizing ``levels`` (name -> max level)."""
    return _dumps(
        {
            "features": {name: {"max_version_level": level} for name, level in levels.items()},
            "version": FEATURE_ZNODE_VERSION,
            "status": FEATURE_ZNODE_ENABLED,
        }
    )


def decode_feature_znode(data: bytes) -> dict[str, int]:
    """The finalized levels of ``/feature`` (none while its status is disabled)."""
    obj = _loads(FEATURE_PATH, data)
    if obj.get("status", FEATURE_ZNODE_ENABLED) != FEATURE_ZNODE_ENABLED:
        return {}
    features = obj.get("features", {})
    if not isinstance(features, dict):
        raise ZNodeDecodeError(FEATURE_PATH, data, "'features' is not an object")
    levels: dict[str, int] = {}
    for name, value in features.items():
        level = value.get("max_version_level") if isinstance(value, dict) else None
        if not isinstance(level, int):
            raise ZNodeDecodeError(FEATURE_PATH, data, f"no max_version_level for {name!r}")
        levels[name] = level
    return levels


# -- /brokers/ids/<id> ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener: ``PLAINTEXT://127.0.0.1:9092``."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, security_protocol: str = "PLAINTEXT") -> EndPoint:
        """Parse ``NAME://host:port`` (IPv6 hosts in brackets); ValueError otherwise."""
        name, sep, rest = text.partition("://")
        host, colon, port_text = rest.rpartition(":")
        if not sep or not name or not colon or not port_text.isdigit():
            raise ValueError(f"not an endpoint: {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(name, host, int(port_text), security_protocol)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """The data of ``/brokers/ids/<id>`` (Kafka's ``BrokerIdZNode``, JSON version 5).

    The broker epoch is not here: it is the znode's czxid (see ``zk.LiveBroker``).
    """

    broker_id: BrokerId
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = -1
    version: int = 5

    @property
    def host(self) -> str | None:
        """The legacy ``host`` field: the PLAINTEXT endpoint's host, if there is one."""
        plain = self._plaintext()
        return None if plain is None else plain.host

    @property
    def port(self) -> int:
        plain = self._plaintext()
        return -1 if plain is None else plain.port

    def _plaintext(self) -> EndPoint | None:
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": self.version,
            "host": self.host,
            "port": self.port,
            "endpoints": [e.connection_string for e in self.endpoints],
            "listener_security_protocol_map": {
                e.listener_name: e.security_protocol for e in self.endpoints
            },
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
            "features": {},
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return _dumps(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        what = f"/brokers/ids/{broker_id}"
        obj = _loads(what, data)
        protocols = obj.get("listener_security_protocol_map") or {}
        raw_endpoints = obj.get("endpoints")
        if not isinstance(protocols, dict) or not isinstance(raw_endpoints, list):
            raise ZNodeDecodeError(what, data, "bad 'endpoints'")
        endpoints: list[EndPoint] = []
        for text in raw_endpoints:
            if not isinstance(text, str):
                raise ZNodeDecodeError(what, data, "bad 'endpoints'")
            try:
                endpoint = EndPoint.parse(text)
            except ValueError as exc:
                raise ZNodeDecodeError(what, data, str(exc)) from None
            protocol = protocols.get(endpoint.listener_name, endpoint.listener_name)
            endpoints.append(
                EndPoint(endpoint.listener_name, endpoint.host, endpoint.port, protocol)
            )
        rack = obj.get("rack")
        return cls(
            broker_id=BrokerId(broker_id),
            endpoints=tuple(endpoints),
            rack=rack if isinstance(rack, str) else None,
            jmx_port=obj.get("jmx_port", -1) if isinstance(obj.get("jmx_port"), int) else -1,
            timestamp_ms=_timestamp(what, data, obj),
            version=_int(what, data, obj, "version"),
        )


# -- /controller and /controller_epoch -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerRegistration:
    """The data of the ephemeral ``/controller`` node (Kafka's ``ControllerZNode``)."""

    broker_id: BrokerId
    timestamp_ms: int = -1

    def encode(self) -> bytes:
        return _dumps(
            {"version": 1, "brokerid": int(self.broker_id), "timestamp": str(self.timestamp_ms)}
        )

    @classmethod
    def decode(cls, data: bytes) -> ControllerRegistration:
        obj = _loads(CONTROLLER_PATH, data)
        return cls(
            broker_id=BrokerId(_int(CONTROLLER_PATH, data, obj, "brokerid")),
            timestamp_ms=_timestamp(CONTROLLER_PATH, data, obj),
        )


def encode_controller_epoch(epoch: int) -> bytes:
    """``/controller_epoch`` holds the epoch as a bare decimal number."""
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> ControllerEpoch:
    try:
        return ControllerEpoch(int(data.decode("ascii").strip()))
    except (ValueError, UnicodeDecodeError):
        raise ZNodeDecodeError(CONTROLLER_EPOCH_PATH, data, "not a number") from None


# -- /brokers/topics/<t> -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicAssignment:
    """The data of ``/brokers/topics/<t>`` (Kafka's ``TopicZNode``, JSON version 3).

    ``partitions`` maps partition index to its replicas in assignment order (the first is the
    preferred leader). ``topic_id`` is None only for topics written by old Kafka versions.
    """

    partitions: Mapping[int, tuple[BrokerId, ...]]
    topic_id: uuid.UUID | None
    adding_replicas: Mapping[int, tuple[BrokerId, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[BrokerId, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def as_json(m: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
            return {str(p): [int(b) for b in replicas] for p, replicas in sorted(m.items())}

        obj: dict[str, Any] = {
            "version": 3,
            "partitions": as_json(self.partitions),
            "adding_replicas": as_json(self.adding_replicas),
            "removing_replicas": as_json(self.removing_replicas),
        }
        if self.topic_id is not None:
            obj["topic_id"] = encode_uuid(self.topic_id)
        return _dumps(obj)

    @classmethod
    def decode(cls, topic: str, data: bytes) -> TopicAssignment:
        what = topic_path(topic)
        obj = _loads(what, data)

        def as_map(key: str) -> dict[int, tuple[BrokerId, ...]]:
            raw = obj.get(key) or {}
            if not isinstance(raw, dict):
                raise ZNodeDecodeError(what, data, f"{key!r} is not an object")
            try:
                return {int(p): _int_list(what, data, r, key) for p, r in raw.items()}
            except ValueError:
                raise ZNodeDecodeError(what, data, f"{key!r} has a non-numeric key") from None

        if not isinstance(obj.get("partitions"), dict):
            raise ZNodeDecodeError(what, data, "'partitions' is missing")
        raw_id = obj.get("topic_id")
        topic_id: uuid.UUID | None = None
        if raw_id is not None:
            try:
                topic_id = decode_uuid(str(raw_id))
            except ValueError as exc:
                raise ZNodeDecodeError(what, data, str(exc)) from None
        return cls(
            partitions=as_map("partitions"),
            topic_id=topic_id,
            adding_replicas=as_map("adding_replicas"),
            removing_replicas=as_map("removing_replicas"),
        )


# -- /brokers/topics/<t>/partitions/<p>/state ----------------------------------------------------

#: A new state znode has version 0, so every partition starts at partition epoch 0.
_INITIAL_PARTITION_EPOCH: Final = PartitionEpoch(0)

#: KIP-704 leader recovery states (Kafka writes the key only when not RECOVERED).
LEADER_RECOVERY_RECOVERED: Final = 0
LEADER_RECOVERY_RECOVERING: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """A partition's leader, leader epoch and ISR (Kafka's ``LeaderIsrAndControllerEpoch``).

    ``partition_epoch`` is the state znode's version: it is not encoded, ``decode`` takes it
    from the znode's stat, and a write succeeds only if the znode still has it (CAS).
    ``controller_epoch`` is the epoch of the controller that last wrote the state.
    """

    leader: BrokerId
    leader_epoch: LeaderEpoch
    isr: tuple[BrokerId, ...]
    controller_epoch: ControllerEpoch
    partition_epoch: PartitionEpoch = _INITIAL_PARTITION_EPOCH
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    #: The znode's mzxid when read from ZooKeeper (0 = not read from ZooKeeper). Not
    #: encoded and not part of equality: a new controller compares it with the brokers'
    #: registration czxids (broker epochs) to find brokers that restarted after the state
    #: was last written, while no controller was there to see them go.
    modified_zxid: int = field(default=0, compare=False)

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_BROKER

    def leader_and_isr(self) -> LeaderAndIsr:
        """The state as the pure rules (``tidelog.controller.decisions``) take it."""
        return LeaderAndIsr(
            leader=self.leader,
            leader_epoch=int(self.leader_epoch),
            isr=self.isr,
            partition_epoch=int(self.partition_epoch),
        )

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "controller_epoch": int(self.controller_epoch),
            "leader": int(self.leader),
            "version": 1,
            "leader_epoch": int(self.leader_epoch),
            "isr": [int(b) for b in self.isr],
        }
        if self.leader_recovery_state != LEADER_RECOVERY_RECOVERED:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return _dumps(obj)

    @classmethod
    def decode(
        cls, data: bytes, *, zk_version: int, zk_mzxid: int = 0, what: str = "partition state"
    ) -> PartitionState:
        obj = _loads(what, data)
        recovery = obj.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED)
        if recovery not in (LEADER_RECOVERY_RECOVERED, LEADER_RECOVERY_RECOVERING):
            raise ZNodeDecodeError(what, data, "bad 'leader_recovery_state'")
        return cls(
            leader=BrokerId(_int(what, data, obj, "leader")),
            leader_epoch=LeaderEpoch(_int(what, data, obj, "leader_epoch")),
            isr=_int_list(what, data, obj.get("isr"), "isr"),
            controller_epoch=ControllerEpoch(_int(what, data, obj, "controller_epoch")),
            partition_epoch=PartitionEpoch(zk_version),
            leader_recovery_state=recovery,
            modified_zxid=zk_mzxid,
        )


# -- /config/topics/<t>, /config/changes, /admin/delete_topics/<t> -------------------------------


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    """``/config/topics/<t>`` (Kafka's ``ConfigEntityZNode``): only the overrides."""
    return _dumps({"version": 1, "config": dict(sorted(config.items()))})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    what = topic_config_path(topic)
    if not data:
        return {}
    obj = _loads(what, data)
    config = obj.get("config") or {}
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ZNodeDecodeError(what, data, "'config' is not a map of strings")
    return dict(config)


def encode_config_change(topic: str) -> bytes:
    """A ``/config/changes/config_change_<seq>`` notification (Kafka's version 2 form)."""
    return _dumps({"version": 2, "entity_path": f"topics/{topic}"})


def decode_config_change(data: bytes) -> str | None:
    """The topic a config change notification names, or None for other entity types."""
    obj = _loads(CONFIG_CHANGES_PATH, data)
    entity_path = obj.get("entity_path")
    if not isinstance(entity_path, str):
        raise ZNodeDecodeError(CONFIG_CHANGES_PATH, data, "'entity_path' is not a string")
    kind, _, name = entity_path.partition("/")
    return name if kind == "topics" and name else None


#: ``/admin/delete_topics/<t>`` carries no data; its existence is the request.
DELETE_TOPIC_MARKER: Final = b""


# -- log dir events (Kafka's LogDirEventNotificationZNode, KIP-112) ----------------------------

#: Kafka's ``LogDirUtils.LogDirFailureEvent``: a log dir of the broker went offline.
LOG_DIR_FAILURE_EVENT: Final = 1
#: tidelog's addition: the broker's offline log dirs have room again (Kafka keeps a failed
#: dir offline until the broker restarts; a full disk that was freed need not cost a restart).
LOG_DIR_RECOVERY_EVENT: Final = 2


@dataclass(frozen=True, slots=True)
class LogDirEvent:
    """One ``/log_dir_event_notification/log_dir_event_<seq>`` node.

    Kafka's shape plus an optional ``broker_epoch`` (the posting incarnation): the controller
    ignores an event of an incarnation that is no longer registered, so a failure posted
    just before a restart cannot mark the healthy new incarnation offline. Kafka's own nodes
    (no ``broker_epoch``) decode with -1 (not checked).
    """

    broker_id: BrokerId
    event: int
    broker_epoch: int = -1

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"version": 1, "broker": self.broker_id, "event": self.event}
        if self.broker_epoch >= 0:
            obj["broker_epoch"] = self.broker_epoch
        return _dumps(obj)

    @classmethod
    def decode(cls, data: bytes) -> LogDirEvent:
        what = LOG_DIR_EVENT_NOTIFICATION_PATH
        obj = _loads(what, data)
        broker_epoch = obj.get("broker_epoch", -1)
        if not isinstance(broker_epoch, int) or isinstance(broker_epoch, bool):
            raise ZNodeDecodeError(what, data, "'broker_epoch' is not a number")
        return cls(
            broker_id=BrokerId(_int(what, data, obj, "broker")),
            event=_int(what, data, obj, "event"),
            broker_epoch=broker_epoch,
        )
