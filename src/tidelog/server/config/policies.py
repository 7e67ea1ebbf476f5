"""Topic creation and config alteration policies (Kafka's KIP-108 and KIP-133), in Python.

Kafka lets an operator plug a Java class into ``create.topic.policy.class.name``
(``CreateTopicPolicy``) and ``alter.config.policy.class.name`` (``AlterConfigPolicy``); a
request the policy refuses is answered POLICY_VIOLATION (44) with the policy's message.
tidelog takes the same two keys, naming a Python class as ``package.module.ClassName``
(or ``package.module:ClassName``). The class is instantiated without arguments; if it has a
``configure(configs)`` method it is called once with the broker's configuration as strings
(Kafka's ``Configurable``). Its ``validate(request)`` raises ``PolicyViolationError`` (any
exception whose class is named ``PolicyViolationException`` is taken too) to refuse.

What the policies are given (Kafka's ``RequestMetadata``):

- ``CreateTopicRequest``: the topic, the partition count and replication factor asked (both
  None when explicit replica assignments were given, and then ``replica_assignments``
  maps partition -> brokers), and the configs given in the request.
- ``AlterConfigRequest``: the resource (``"TOPIC"`` or ``"BROKER"`` and its name; ``""``
  for the cluster-wide broker default) and the resource's whole set of overrides as it
  would be after the change (for IncrementalAlterConfigs too, as Kafka's ZooKeeper mode
  passes them).

A policy is asked after the request is otherwise valid and before anything is written, also
for ``validate_only`` requests (Kafka's order). A policy that fails with any other exception
is a bug in it: the request is answered POLICY_VIOLATION naming the exception, and the
broker logs the traceback; the broker keeps serving.

Example (``server.properties``: ``create.topic.policy.class.name=tidelog.server.policies.
MinReplicationFactorPolicy`` with ``tidelog.policy.min.replication.factor=2``):
``MinReplicationFactorPolicy`` is shipped as a ready-to-use policy and as a model.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.errors import ConfigError, ErrorCode

log = logging.getLogger(__name__)

CREATE_TOPIC_POLICY_KEY = "create.topic.policy.class.name"
ALTER_CONFIG_POLICY_KEY = "alter.config.policy.class.name"


class PolicyViolationError(Exception):
    """Raised by a policy to refuse a request; its message goes to the client."""


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    topic: str
    num_partitions: int | None
    replication_factor: int | None
    replica_assignments: Mapping[int, tuple[int, ...]] | None
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class AlterConfigRequest:
    resource_type: str
    resource_name: str
    configs: Mapping[str, str]


class _Policy(Protocol):
    def validate(self, request: Any) -> None: ...


class PolicyLoadError(ConfigError):
    """The class named by a policy key cannot be loaded (the broker refuses to start)."""


def load_policy(key: str, class_name: str, configs: Mapping[str, str]) -> _Policy | None:
    """Import and instantiate ``class_name`` (None when empty); ``PolicyLoadError`` names
    ``key`` when it cannot be loaded or has no ``validate``."""
    name = class_name.strip()
    if not name:
        return None
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, attr)
        policy = cls()
    except Exception as exc:
        raise PolicyLoadError(key, f"cannot load {name!r}: {exc}") from exc
    if not callable(getattr(policy, "validate", None)):
        raise PolicyLoadError(key, f"{name!r} has no validate(request) method")
    configure = getattr(policy, "configure", None)
    if callable(configure):
        configure(dict(configs))
    return policy  # type: ignore[no-any-return]


def _ask(policy: _Policy | None, request: object) -> tuple[ErrorCode, str | None]:
    if policy is None:
        return ErrorCode.NONE, None
    try:
        policy.validate(request)
    except PolicyViolationError as exc:
        return ErrorCode.POLICY_VIOLATION, str(exc)
    except Exception as exc:
        if type(exc).__name__ == "PolicyViolationException":
            return ErrorCode.POLICY_VIOLATION, str(exc)
        log.exception("policy %s failed on %s", type(policy).__name__, request)
        return ErrorCode.POLICY_VIOLATION, f"The policy failed: {type(exc).__name__}: {exc}"
    return ErrorCode.NONE, None


class Policies:
    """The broker's two policies (either may be absent)."""

    def __init__(self, create_topic: _Policy | None, alter_config: _Policy | None) -> None:
        self.create_topic = create_topic
        self.alter_config = alter_config

    @classmethod
    def from_config(cls, values: Mapping[str, object]) -> Policies:
        """From a broker's config values; ``PolicyLoadError`` names the key at fault."""
        configs = {k: str(v) for k, v in values.items()}
        return cls(
            load_policy(CREATE_TOPIC_POLICY_KEY, configs.get(CREATE_TOPIC_POLICY_KEY, ""), configs),
            load_policy(ALTER_CONFIG_POLICY_KEY, configs.get(ALTER_CONFIG_POLICY_KEY, ""), configs),
        )

    def check_create(self, request: CreateTopicRequest) -> tuple[ErrorCode, str | None]:
        return _ask(self.create_topic, request)

    def check_alter(self, request: AlterConfigRequest) -> tuple[ErrorCode, str | None]:
        return _ask(self.alter_config, request)


class MinReplicationFactorPolicy:
    """A ``CreateTopicPolicy``: refuse topics with fewer replicas than
    ``tidelog.policy.min.replication.factor`` (default 2), counting explicit assignments."""

    def __init__(self) -> None:
        self.minimum = 2

    def configure(self, configs: Mapping[str, str]) -> None:
        self.minimum = int(configs.get("tidelog.policy.min.replication.factor", "2"))

    def validate(self, request: CreateTopicRequest) -> None:
        if request.replica_assignments is not None:
            sizes = {len(rs) for rs in request.replica_assignments.values()}
            rf = min(sizes) if sizes else 0
        else:
            rf = request.replication_factor or 0
        if rf < self.minimum:
            raise PolicyViolationError(
                f"Topic {request.topic} has replication factor {rf}; the minimum is {self.minimum}."
            )


def create_topic_request(
    topic: Any, num_partitions: int, replication_factor: int
) -> CreateTopicRequest:
    """What a CreateTopics entry asks, as Kafka's ``RequestMetadata`` gives it: the count and
    factor (after -1 became the broker's default), or None for both with explicit
    assignments; the configs the request gave (null values dropped)."""
    assignments = getattr(topic, "assignments", None)
    if assignments:
        return CreateTopicRequest(
            topic=str(topic.name),
            num_partitions=None,
            replication_factor=None,
            replica_assignments={
                int(a.partition_index): tuple(int(b) for b in a.broker_ids) for a in assignments
            },
            configs={c.name: c.value for c in topic.configs if c.value is not None},
        )
    return CreateTopicRequest(
        topic=str(topic.name),
        num_partitions=num_partitions,
        replication_factor=replication_factor,
        replica_assignments=None,
        configs={c.name: c.value for c in topic.configs if c.value is not None},
    )
