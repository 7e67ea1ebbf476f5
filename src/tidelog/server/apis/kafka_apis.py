"""One broker's request handlers (Kafka's ``KafkaApis``), alone or in a ZooKeeper cluster.

The handlers are written once, in handler groups of one job each, and ask the metadata
backend (``tidelog.server.metadata.backend``) where a lone broker and a cluster broker
differ, as Kafka keeps one ``KafkaApis`` over ZooKeeper and KRaft with a metadata-support
object. Each group receives the request helper (``tidelog.server.apis.helper``) and the two
or three collaborators it uses:

- ``ApiVersionsApi``: ApiVersions (18);
- ``TopicApis``: Metadata (3), CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
  DescribeCluster (60);
- ``DataApis``: Produce (0), Fetch (1), ListOffsets (2), DeleteRecords (21),
  OffsetForLeaderEpoch (23);
- ``ProducerIdApis``: InitProducerId (22) for idempotent producers;
- ``ConfigApis``: DescribeConfigs, (Incremental)AlterConfigs, ListConfigResources and the
  dynamic broker config;
- ``DescribeTopicPartitionsApi``: DescribeTopicPartitions (75).

Responses are described once as plain dicts with the union of every version's fields and
narrowed to the negotiated version by ``tidelog.protocol.messages.build``. Errors follow
Kafka: per-partition / per-topic / per-resource error codes, never an exception for a
peer's mistake. With an ACL authorizer each handler makes the checks of Kafka's KafkaApis
(``tidelog.server.auth.authz``); without one nothing is checked.

The coordinators (``tidelog.server.coordinators``) are handler groups of their own over the
backend, the replica manager and the helper's answers (wired in ``tidelog.server.broker``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidelog.protocol.apis import ApiKey
from tidelog.server.apis.api_versions import ApiVersionsApi
from tidelog.server.apis.config_apis import ConfigApis
from tidelog.server.apis.data_apis import DataApis
from tidelog.server.apis.eager import eager
from tidelog.server.apis.handler_table import Handler, HandlerGroup, merge_handlers
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.apis.producer_id_apis import ProducerIdApis
from tidelog.server.apis.topic_apis import TopicApis
from tidelog.server.apis.topic_partitions import DescribeTopicPartitionsApi
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.metadata.local import MetadataStore, TopicInfo
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.replica.manager import ReplicaManager

if TYPE_CHECKING:
    from tidelog.server.auth.authorizer import AclAuthorizer


class KafkaApis:
    """The handler groups of one broker over one metadata backend."""

    def __init__(
        self,
        config: BrokerConfig,
        backend: MetadataBackend,
        replica_manager: ReplicaManager,
        supported_versions: Mapping[ApiKey, tuple[int, int]],
    ) -> None:
        self.config = config
        self.helper = RequestHelper(config)
        self.backend = backend
        #: The topic image (``topics``, ``by_id``).
        self.metadata = backend
        self.replica_manager = replica_manager
        helper = self.helper
        self.config_apis = ConfigApis(helper, backend, replica_manager)
        #: Idempotent producers' InitProducerId; the transaction coordinator answers the
        #: API and hands it the requests without a transactional id.
        self.producer_ids = ProducerIdApis(helper, backend)
        self.data = DataApis(helper, backend, replica_manager)
        #: The groups answering the APIs of every broker, alone or in a cluster.
        self.groups: tuple[HandlerGroup, ...] = (
            ApiVersionsApi(supported_versions, backend.finalized_features),
            TopicApis(helper, backend, self.config_apis.topic_entries),
            self.data,
            self.config_apis,
            DescribeTopicPartitionsApi(helper, backend),
        )
        #: These groups' handlers with InitProducerId (the broker's table: ``broker.py``).
        self.handlers: dict[int, Handler] = merge_handlers([*self.groups, self.producer_ids])

    @classmethod
    def alone(
        cls,
        config: BrokerConfig,
        store: MetadataStore,
        replica_manager: ReplicaManager,
        supported_versions: Mapping[ApiKey, tuple[int, int]],
    ) -> KafkaApis:
        """The handlers of a broker that is its own controller, over ``store``."""
        backend = LocalBackend(config, store, replica_manager)
        return cls(config, backend, replica_manager, supported_versions)

    @property
    def authorizer(self) -> AclAuthorizer | None:
        return self.helper.authorizer

    @authorizer.setter
    def authorizer(self, authorizer: AclAuthorizer | None) -> None:
        self.helper.authorizer = authorizer

    @property
    def bound_ports(self) -> Mapping[str, int]:
        return self.helper.bound_ports

    @bound_ports.setter
    def bound_ports(self, ports: Mapping[str, int]) -> None:
        self.helper.bound_ports = ports

    response_class = staticmethod(RequestHelper.response_class)

    def topic_config(self, info: TopicInfo) -> dict[str, object]:
        return self.helper.topic_config(info)

    def create_topic(
        self, name: str, num_partitions: int, overrides: Mapping[str, object]
    ) -> TopicInfo:
        """Create a topic at once, replication factor 1 (a lone broker's internal topics).
        A backend that must wait for the controller cannot: RuntimeError."""
        created = eager(
            self.backend.create_topic(
                name,
                num_partitions=num_partitions,
                replication_factor=1,
                raw_configs={},
                overrides=overrides,
                assignment=None,
                validate_only=False,
            )
        )
        if isinstance(created, asyncio.Future):
            created.cancel()
            raise RuntimeError(f"topic {name} cannot be created at once by this backend")
        return self.backend.topics[name]


__all__ = ["KafkaApis"]
