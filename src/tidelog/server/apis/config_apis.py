"""Config APIs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44, KIP-339)
and ListConfigResources (74, KIP-1142), for topics and brokers (KIP-226 dynamic configs).

Rules (Kafka's ``ConfigHelper``, ``ConfigAdminManager``, ``ZkAdminManager``):

1. Authorization first, per resource: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on
   the cluster for a broker (``authz.config_resource_refusal``). A refused describe carries
   the error's own message and no configs; a refused alteration no message.
   ListConfigResources needs DESCRIBE_CONFIGS on the cluster.
2. A broker resource is named by this broker's id (its own configs) or "" (the cluster-wide
   default, ``/config/brokers/<default>``). Another id is INVALID_REQUEST "Unexpected broker
   id ..."; a name that is no integer INVALID_REQUEST "Broker id must be an integer ...".
   Describing "" lists only the dynamic default entries (Kafka's answer).
3. Each entry carries its source, synonyms (when ``include_synonyms``), documentation (when
   ``include_documentation``), ``config_type``, ``is_sensitive`` and ``read_only``
   (``tidelog.server.config.dynamic`` rule 5; ``config_docs``). A sensitive value is null.
4. Alterations: the same key twice in one resource is INVALID_REQUEST "Error due to
   duplicate config keys"; a null value other than DELETE's INVALID_REQUEST "Null value not
   supported for : <names>". IncrementalAlterConfigs applies SET, DELETE, APPEND and
   SUBTRACT in order to the entity's current overrides; APPEND/SUBTRACT need a LIST key,
   else INVALID_CONFIG "Config value append (subtract) is not allowed for config key: <k>";
   an op id outside 0-3 is INVALID_REQUEST. AlterConfigs replaces the entity's overrides.
   Topics: unknown key or bad value INVALID_CONFIG naming the key. Brokers:
   ``dynamic_config.check_alteration``. ``validate_only`` checks everything, writes nothing.
5. Broker alterations are read-modify-writes of the entity's znode with compare-and-set
   (``zk_broker_configs``); every broker's watch then applies it
   (``DynamicBrokerConfig.update``) without a restart. The answer waits until this broker
   has applied it and, for the default, the other live brokers describe it
   (``tidelog.server.cluster.propagation`` rule 4). A broker without ZooKeeper has no
   dynamic configs: a valid alteration is INVALID_REQUEST saying so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import config_to_string, validate_topic_configs
from tidelog.server.config.docs import ConfigSource, broker_doc, topic_doc
from tidelog.server.config.dynamic import DynamicBrokerConfig, Synonym, check_alteration
from tidelog.server.config.keys import TOPIC_KEYS, ConfigType
from tidelog.server.config.policies import AlterConfigRequest
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.manager import ReplicaManager
from tidelog.zk import ZkClient, ZkError
from tidelog.zk.broker_configs import (
    DEFAULT_ENTITY,
    BrokerConfigWatch,
    ZkBrokerConfigStore,
)

if TYPE_CHECKING:
    from tidelog.server.metadata.local import TopicInfo

log = logging.getLogger(__name__)

#: Kafka's ConfigResource.Type codes.
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
RESOURCE_BROKER_LOGGER: Final = 8
RESOURCE_CLIENT_METRICS: Final = 16
RESOURCE_GROUP: Final = 32
#: ListConfigResources v1 with no types: every type Kafka knows (KIP-1142).
ALL_RESOURCE_TYPES: Final = (
    RESOURCE_TOPIC,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
)
#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

Outcome = tuple[ErrorCode, str | None]
Operation = tuple[str, int, str | None]


# --- pure pieces ---------------------------------------------------------------------------


def broker_entity(name: str, broker_id: int) -> tuple[str | None, Outcome]:
    """Rule 2: the ZooKeeper entity of a broker resource name, or None and the error."""
    if name == "":
        return DEFAULT_ENTITY, (ErrorCode.NONE, None)
    try:
        asked = int(name)
    except ValueError:
        return None, (ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}")
    if asked != broker_id:
        return None, (
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker_id} or empty string, but received {name}",
        )
    return str(broker_id), (ErrorCode.NONE, None)


def request_problem(names: Sequence[str], values: Sequence[tuple[str, bool]]) -> Outcome:
    """Rule 4's request checks: duplicate keys, then null values (``(name, null_allowed)``
    pairs whose value is null)."""
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    nulls = [name for name, allowed in values if not allowed]
    if nulls:
        return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}"
    return ErrorCode.NONE, None


def apply_operations(
    current: Mapping[str, str],
    ops: Sequence[Operation],
    type_of: Callable[[str], ConfigType | None],
    base_value: Callable[[str], str | None],
) -> tuple[dict[str, str] | None, Outcome]:
    """Rule 4: IncrementalAlterConfigs' operations on an entity's current overrides.
    ``base_value``: a key's value when not overridden (APPEND/SUBTRACT start from it)."""
    new = dict(current)
    for name, op, value in ops:
        if op == OP_SET:
            assert value is not None  # request_problem refused nulls
            new[name] = value
        elif op == OP_DELETE:
            new.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            verb = "append" if op == OP_APPEND else "subtract"
            if type_of(name) is not ConfigType.LIST:
                return None, (
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            old = new.get(name)
            if old is None:
                old = base_value(name) or ""
            items = [item.strip() for item in old.split(",") if item.strip()]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            if op == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            new[name] = ",".join(items)
        else:
            return None, (ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")
    return new, (ErrorCode.NONE, None)


def _broker_type(name: str) -> ConfigType | None:
    doc = broker_doc(name)
    return None if doc is None else doc.type


def _topic_type(name: str) -> ConfigType | None:
    doc = topic_doc(name)
    return None if doc is None else doc.type


def _synonyms(chain: Sequence[Synonym]) -> list[dict[str, Any]]:
    return [{"name": s.name, "value": s.value, "source": int(s.source)} for s in chain]


class ConfigApis:
    """The config handlers of one broker (each given the request helper, the metadata backend
    and the replica manager) and its dynamic
    broker config (``dynamic``), kept current from ZooKeeper once ``start`` ran."""

    def __init__(
        self, helper: RequestHelper, backend: MetadataBackend, replica_manager: ReplicaManager
    ) -> None:
        self.helper = helper
        self.backend = backend
        self.replica_manager = replica_manager
        self.dynamic = DynamicBrokerConfig(helper.config)
        self.dynamic.listeners.append(self.broker_config_changed)
        self.store: ZkBrokerConfigStore | None = None
        self._watch: BrokerConfigWatch | None = None

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.LIST_CONFIG_RESOURCES: self.handle_list_config_resources,
        }

    async def start(self, zk: ZkClient | None) -> None:
        """Read this broker's and the default dynamic configs from ZooKeeper, apply them,
        keep watching (a lone broker's dynamic configs live in memory: nothing to read)."""
        if zk is None:
            return
        self.store = ZkBrokerConfigStore(zk)
        self._watch = BrokerConfigWatch(self._on_zk_change)
        await self._watch.start(zk, self.helper.broker_id)

    def broker_config_changed(self) -> None:
        """A dynamic broker config changed (KIP-226): every hosted topic's log config and
        ``min.insync.replicas`` follow the new topic defaults, and the backend rereads what
        it reads (in a cluster: the controller's ``unclean.leader.election.enable``)."""
        for info in list(self.backend.topics.values()):
            self.replica_manager.update_topic_config(info.name, self.helper.topic_config(info))
        self.backend.broker_config_changed()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _on_zk_change(self, entity: str, config: dict[str, str]) -> None:
        self.dynamic.update(per_broker=entity != DEFAULT_ENTITY, raw=config)

    # --- DescribeConfigs (32) ---------------------------------------------------------------

    def handle_describe_configs(self, header: RequestHeader, body: Any) -> Any:
        synonyms = bool(getattr(body, "include_synonyms", False))
        documentation = bool(getattr(body, "include_documentation", False))
        authorizer = self.helper.authorizer
        results = []
        for resource in body.resources:
            rtype = int(resource.resource_type)
            rname = str(resource.resource_name)
            keys = resource.configuration_keys
            entries: list[dict[str, Any]] = []
            error: ErrorCode = ErrorCode.NONE
            message: str | None = None
            refusal = (
                None
                if authorizer is None
                else authz.config_resource_refusal(
                    authorizer, AclOperation.DESCRIBE_CONFIGS, rtype, rname, header.api_key
                )
            )
            if refusal is not None:
                error, message = refusal, authz.MESSAGES[refusal]
            elif rtype == RESOURCE_TOPIC:
                error, message, entries = self._describe_topic(rname, synonyms, documentation)
            elif rtype == RESOURCE_BROKER:
                error, message, entries = self._describe_broker(rname, synonyms, documentation)
            else:
                error = ErrorCode.INVALID_REQUEST
                message = f"resource type {rtype} is not supported"
            if keys is not None:
                wanted = set(keys)
                entries = [e for e in entries if e["name"] in wanted]
            results.append(
                {
                    "error_code": error,
                    "error_message": message,
                    "resource_type": rtype,
                    "resource_name": rname,
                    "configs": entries,
                }
            )
        return self.helper.respond(header, {"results": results})

    @staticmethod
    def _entry(
        name: str,
        value: str | None,
        chain: Sequence[Synonym],
        *,
        kind: ConfigType | None,
        sensitive: bool,
        read_only: bool,
        doc: str | None,
        synonyms: bool,
    ) -> dict[str, Any]:
        source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
        return {
            "name": name,
            "value": None if sensitive else value,
            "read_only": read_only,
            "is_default": source is ConfigSource.DEFAULT_CONFIG,
            "config_source": int(source),
            "is_sensitive": sensitive,
            "synonyms": _synonyms(chain) if synonyms else [],
            "config_type": int(kind if kind is not None else ConfigType.UNKNOWN),
            "documentation": doc,
        }

    def _describe_topic(
        self, name: str, synonyms: bool, documentation: bool
    ) -> tuple[ErrorCode, str | None, list[dict[str, Any]]]:
        info = self.backend.topics.get(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist", []
        return ErrorCode.NONE, None, self.topic_entries(info.configs, synonyms, documentation)

    def topic_entries(
        self, overrides: Mapping[str, object], synonyms: bool = False, documentation: bool = False
    ) -> list[dict[str, Any]]:
        """Rule 3 for a topic with ``overrides``: every topic key, also as CreateTopics v5+
        answers them (Kafka's ``createTopicConfigEntry``)."""
        entries = []
        for key, value in sorted(effective_topic_config(self.helper.config, overrides).items()):
            doc = topic_doc(key)
            override = overrides.get(key)
            chain = self.dynamic.topic_entry_synonyms(
                key, None if override is None else config_to_string(override)
            )
            entries.append(
                self._entry(
                    key,
                    config_to_string(value),
                    chain,
                    kind=None if doc is None else doc.type,
                    sensitive=doc is not None and doc.sensitive,
                    read_only=False,
                    doc=doc.documentation if doc is not None and documentation else None,
                    synonyms=synonyms,
                )
            )
        return entries

    def _describe_broker(
        self, name: str, synonyms: bool, documentation: bool
    ) -> tuple[ErrorCode, str | None, list[dict[str, Any]]]:
        entity, (error, message) = broker_entity(name, self.helper.broker_id)
        if entity is None:
            return error, message, []
        per_broker = entity != DEFAULT_ENTITY
        dynamic = self.dynamic
        names = dynamic.broker_names() if per_broker else sorted(dynamic.dynamic_default)
        entries = []
        for key in names:
            doc = broker_doc(key)
            chain = dynamic.broker_entry_synonyms(key, per_broker=per_broker)
            value = dynamic.broker_value(key) if per_broker else dynamic.dynamic_default[key]
            entries.append(
                self._entry(
                    key,
                    value,
                    chain,
                    kind=None if doc is None else doc.type,
                    sensitive=doc is None or doc.sensitive,
                    read_only=doc is None or not doc.dynamic,
                    doc=doc.documentation if doc is not None and documentation else None,
                    synonyms=synonyms,
                )
            )
        return ErrorCode.NONE, None, entries

    # --- AlterConfigs (33) / IncrementalAlterConfigs (44) -----------------------------------

    def _alter_refusal(self, header: RequestHeader, resource: Any) -> Outcome | None:
        """Rule 1: ALTER_CONFIGS on the topic, or on the cluster for a broker; refused
        without a message (Kafka's configsAuthorizationApiError)."""
        if self.helper.authorizer is None:
            return None
        refusal = authz.config_resource_refusal(
            self.helper.authorizer,
            AclOperation.ALTER_CONFIGS,
            int(resource.resource_type),
            str(resource.resource_name),
            header.api_key,
        )
        return None if refusal is None else (refusal, None)

    def handle_alter_configs(self, header: RequestHeader, body: Any) -> Any:
        def plan(resource: Any) -> tuple[Outcome, Callable[[Mapping[str, str]], Any]]:
            configs = [(str(c.name), c.value) for c in resource.configs]
            problem = request_problem(
                [n for n, _ in configs], [(n, v is not None) for n, v in configs]
            )

            def replace_all(_current: Mapping[str, str]) -> tuple[dict[str, str] | None, Outcome]:
                # Kafka's legacy semantics: the request is the entity's whole override set.
                return {n: str(v) for n, v in configs}, (ErrorCode.NONE, None)

            return problem, replace_all

        return self._alter(header, body, plan)

    def handle_incremental_alter_configs(self, header: RequestHeader, body: Any) -> Any:
        def plan(resource: Any) -> tuple[Outcome, Callable[[Mapping[str, str]], Any]]:
            ops: list[Operation] = [
                (str(c.name), int(c.config_operation), c.value) for c in resource.configs
            ]
            problem = request_problem(
                [n for n, _, _ in ops], [(n, op == OP_DELETE or v is not None) for n, op, v in ops]
            )
            topic = int(resource.resource_type) == RESOURCE_TOPIC
            info = self.backend.topics.get(str(resource.resource_name)) if topic else None

            def base_value(key: str) -> str | None:
                if info is not None:
                    value = self.helper.topic_config(info).get(key)
                    return None if value is None else config_to_string(value)
                return None if topic else self.dynamic.broker_value(key)

            def change(current: Mapping[str, str]) -> tuple[dict[str, str] | None, Outcome]:
                return apply_operations(
                    current, ops, _topic_type if topic else _broker_type, base_value
                )

            return problem, change

        return self._alter(header, body, plan)

    def _alter(
        self,
        header: RequestHeader,
        body: Any,
        plan: Callable[[Any], tuple[Outcome, Callable[[Mapping[str, str]], Any]]],
    ) -> Any:
        validate_only = bool(body.validate_only)

        async def run() -> Any:
            responses = []
            for resource in body.resources:
                rtype = int(resource.resource_type)
                rname = str(resource.resource_name)
                outcome = self._alter_refusal(header, resource)
                if outcome is None:
                    problem, change = plan(resource)
                    if problem[0] != ErrorCode.NONE:
                        outcome = problem
                    elif rtype == RESOURCE_TOPIC:
                        outcome = await self._alter_topic(rname, change, validate_only)
                    elif rtype == RESOURCE_BROKER:
                        outcome = await self._alter_broker(rname, change, validate_only)
                    else:
                        outcome = (
                            ErrorCode.INVALID_REQUEST,
                            f"resource type {rtype} is not supported",
                        )
                responses.append(
                    {
                        "error_code": outcome[0],
                        "error_message": outcome[1],
                        "resource_type": rtype,
                        "resource_name": rname,
                    }
                )
            return self.helper.respond(header, {"responses": responses})

        return asyncio.ensure_future(run())

    async def _alter_topic(
        self,
        name: str,
        change: Callable[[Mapping[str, str]], tuple[dict[str, str] | None, Outcome]],
        validate_only: bool,
    ) -> Outcome:
        info: TopicInfo | None = self.backend.topics.get(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
        current = {k: config_to_string(v) for k, v in info.configs.items()}
        new, outcome = change(current)
        if new is None:
            return outcome
        parsed, problem = validate_topic_configs(dict(new))
        if problem:
            return ErrorCode.INVALID_CONFIG, problem
        verdict = self.helper.policies.check_alter(AlterConfigRequest("TOPIC", name, dict(new)))
        if verdict[0] != ErrorCode.NONE:
            return verdict
        if validate_only:
            return ErrorCode.NONE, None
        overrides = {k: v for k, v in parsed.items() if v is not None and k in TOPIC_KEYS}
        try:
            await self.backend.set_topic_configs(name, overrides)
        except ZkError as exc:
            log.warning("writing the config of topic %s failed: %s", name, exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR, "ZooKeeper is not reachable"
        updated = self.backend.topics.get(name)
        if updated is None:  # deleted while the write was on its way
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
        self.replica_manager.update_topic_config(name, self.helper.topic_config(updated))
        log.info("topic %s config overrides now %s", name, overrides)
        # Read-your-writes: answered once the other live brokers describe the new overrides
        # too (``tidelog.server.cluster.propagation``; Kafka answers without waiting).
        await self.backend.wait_for_topic_configs(name, overrides)
        return ErrorCode.NONE, None

    async def _alter_broker(
        self,
        name: str,
        change: Callable[[Mapping[str, str]], tuple[dict[str, str] | None, Outcome]],
        validate_only: bool,
    ) -> Outcome:
        entity, outcome = broker_entity(name, self.helper.broker_id)
        if entity is None:
            return outcome

        #: The entity's dynamic config as last accepted (the one written, when written).
        accepted: list[dict[str, str]] = []

        def checked(current: dict[str, str]) -> tuple[dict[str, str] | None, Outcome]:
            new, outcome = change(current)
            if new is None:
                return None, outcome
            outcome = check_alteration(name, new)
            if outcome[0] == ErrorCode.NONE:
                outcome = self.helper.policies.check_alter(
                    AlterConfigRequest("BROKER", name, dict(new))
                )
            if outcome[0] != ErrorCode.NONE:
                return None, outcome
            accepted[:] = [dict(new)]
            return new, outcome

        store = self.store
        if store is None:
            new, outcome = checked({})
            if new is None or validate_only:
                return outcome
            return ErrorCode.INVALID_REQUEST, (
                "Dynamic broker configs live in ZooKeeper and this broker runs without "
                "zookeeper.connect: set the key in server.properties"
            )
        try:
            outcome = await store.alter(entity, checked, write=not validate_only)
        except ZkError as exc:
            log.warning("altering the dynamic config of broker entity %s failed: %s", entity, exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR, "ZooKeeper is not reachable"
        if outcome[0] != ErrorCode.NONE or validate_only or not accepted:
            return outcome
        log.info("dynamic config of broker entity %s altered", entity)
        # Read-your-writes: answered once this broker's watch applied it and, for the
        # default, the other live brokers describe it (``tidelog.server.cluster.propagation``
        # rule 4; Kafka answers once ZooKeeper has it).
        (written,) = accepted
        if entity == DEFAULT_ENTITY:
            await self.backend.wait_for_broker_configs(
                lambda: self.dynamic.dynamic_default == written, written
            )
        else:
            await self.backend.wait_for_broker_configs(
                lambda: self.dynamic.dynamic_broker == written, None
            )
        return outcome

    # --- ListConfigResources (74) -----------------------------------------------------------

    def handle_list_config_resources(self, header: RequestHeader, body: Any) -> Any:
        """KIP-1142: the resources DescribeConfigs can describe. v0 (KIP-714's
        ListClientMetricsResources) lists client-metrics subscriptions only: none here.
        v1 with no types lists every type; a type Kafka does not know is UNSUPPORTED_VERSION.
        Topics: every topic; brokers: every live broker; broker loggers, client metrics and
        group configs tidelog has none of."""
        authorizer = self.helper.authorizer
        if authorizer is not None and not authz.cluster_allowed(
            authorizer, AclOperation.DESCRIBE_CONFIGS, header.api_key
        ):
            return self.helper.respond(
                header,
                {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "config_resources": []},
            )
        if header.api_version == 0:
            types: tuple[int, ...] = (RESOURCE_CLIENT_METRICS,)
        else:
            types = tuple(int(t) for t in body.resource_types) or ALL_RESOURCE_TYPES
        if any(t not in ALL_RESOURCE_TYPES for t in types):
            return self.helper.respond(
                header, {"error_code": ErrorCode.UNSUPPORTED_VERSION, "config_resources": []}
            )
        resources: list[dict[str, Any]] = []
        if RESOURCE_TOPIC in types:
            resources += [
                {"resource_name": name, "resource_type": RESOURCE_TOPIC}
                for name in sorted(self.backend.topics)
            ]
        if RESOURCE_BROKER in types:
            resources += [
                {"resource_name": str(b), "resource_type": RESOURCE_BROKER}
                for b in self.backend.live_broker_ids()
            ]
        return self.helper.respond(
            header, {"error_code": ErrorCode.NONE, "config_resources": resources}
        )


__all__ = [
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "ConfigApis",
    "apply_operations",
    "broker_entity",
    "request_problem",
]
