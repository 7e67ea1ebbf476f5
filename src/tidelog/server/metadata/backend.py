"""What differs between a lone broker and a broker in a ZooKeeper cluster, behind one
interface the request handlers ask (Kafka's ``MetadataSupport`` beside one ``KafkaApis``).

Two implementations: ``tidelog.server.metadata.local_backend`` (the broker is its own
controller, over ``MetadataStore``) and ``tidelog.server.cluster.backend`` (over ``ClusterNode``
and its ``ClusterMetadataCache``). Reads are plain methods; what a cluster broker has to ask
the controller or ZooKeeper for is a coroutine, which the single broker's finishes without
waiting (the handlers run them with ``tidelog.server.apis.eager``, so its answers stay
immediate).

The topic image both keep maps names to ``TopicInfo``. A topic with ``num_partitions == 0``
is one a cluster broker knows from LeaderAndIsr before UpdateMetadata described it (see
``ClusterMetadataCache``); a lone broker never has one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.responses import NodeEndpoint
from tidelog.security.client_config import ClientSecurity
from tidelog.server.metadata.features import FinalizedFeatures
from tidelog.server.metadata.local import TopicInfo

if TYPE_CHECKING:
    from tidelog.controller.controller import Controller
    from tidelog.zk import ZkClient

#: An error code and Kafka's message for it (None: no message).
Outcome = tuple[ErrorCode, str | None]


class ProducerIdUnavailableError(Exception):
    """No producer id can be handed out now (ZooKeeper unreachable, blocks exhausted):
    retriable, InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS (Kafka 3.x)."""


class RequestGate(Protocol):
    """What the dispatcher asks of a broker's readiness gate (a cluster broker's is
    ``tidelog.server.cluster.readiness.ReadinessGate``): whether a request waits, and to hold
    one until it may run."""

    def must_hold(self, conn: object, api_key: int, body: Any) -> bool:
        """Whether the request must wait (the broker lacks what it needs, or an earlier
        request of ``conn`` is held)."""
        ...

    def hold(
        self,
        conn: object,
        api_key: int,
        body: Any,
        *,
        run: Callable[[], None],
        fail: Callable[[BaseException], None],
        done: Callable[[], bool],
    ) -> None:
        """Run ``run`` once the request may run, or ``fail`` when it waited too long;
        ``done`` says it no longer needs either (its connection closed)."""
        ...


class FetchedPartition(Protocol):
    """One partition a follower fetches: the leader's HW its last fetch answer carried."""

    @property
    def leader_high_watermark(self) -> int: ...


class FollowerFetcher(Protocol):
    """The partitions this broker follows from one leader (a cluster broker's
    ``tidelog.server.cluster.fetcher.LeaderFetcher``)."""

    @property
    def leader_id(self) -> int: ...

    @property
    def partitions(self) -> Mapping[TopicPartition, FetchedPartition]: ...


class MetadataBackend(Protocol):
    """The metadata image and the topic admin of one broker; see the module docstring."""

    # --- reads ------------------------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        """Every known topic by name."""
        ...

    @property
    def cluster_id(self) -> str: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def controller_id(self) -> int:
        """The active controller's broker id as this broker knows it (-1: none known)."""
        ...

    def live_broker_ids(self) -> list[int]:
        """The brokers of the cluster, sorted."""
        ...

    def finalized_features(self) -> FinalizedFeatures:
        """The cluster's finalized features and their epoch (KIP-584; ``features``)."""
        ...

    async def write_finalized_features(self, levels: Mapping[str, int], epoch: int) -> None:
        """Finalize ``levels`` (the whole set) if the epoch is still ``epoch``; raises
        ``KafkaError(FEATURE_UPDATE_FAILED)`` when it cannot."""
        ...

    def brokers(self, own_address: tuple[str, int]) -> list[dict[str, Any]]:
        """Metadata's ``brokers`` (node_id, host, port, rack) on the request's listener;
        ``own_address`` is this broker's on it (a lone broker's only entry)."""
        ...

    def partition_metadata(self, info: TopicInfo) -> list[dict[str, Any]]:
        """Metadata's partitions of ``info`` (leader, epoch, replicas, ISR, offline)."""
        ...

    def partition_leader(
        self, tp: TopicPartition, own_address: tuple[str, int] | None = None
    ) -> tuple[int, str, int] | None:
        """``(broker id, host, port)`` of ``tp``'s leader as this broker knows it (None: no
        live leader known). Without ``own_address`` the address is on the inter-broker
        listener (this broker's own connections); with it, on the listener the current
        request came in on, where ``own_address`` is this broker's (FindCoordinator: a client
        on the SASL_SSL port must be sent to the coordinator's SASL_SSL port). A lone broker
        answers as a one-broker cluster: the leader of every partition it hosts."""
        ...

    def current_leader(
        self, tp: TopicPartition, own_address: tuple[str, int]
    ) -> tuple[int, int, NodeEndpoint | None]:
        """KIP-951's leader hint for ``tp``: the leader's id and epoch as this broker knows
        them (``(-1, -1)``: partition unknown here) and the leader's endpoint on the current
        request's listener, where ``own_address`` is this broker's (None: the leader is not
        alive or has no such listener). Kafka's ``KafkaApis.getCurrentLeader``."""
        ...

    @property
    def peer_security(self) -> ClientSecurity:
        """How this broker connects to its peers (the inter-broker listener's protocol and
        login; a lone broker has no peers: PLAINTEXT)."""
        ...

    def controller(self) -> Controller | None:
        """This broker's controller candidate, with its decision history (None alone: the
        broker is its own controller, with no candidate and no history)."""
        ...

    def is_active_controller(self) -> bool:
        """Whether this broker is the cluster's active controller (alone: always)."""
        ...

    def fetchers(self) -> Iterable[FollowerFetcher]:
        """The fetchers of the partitions this broker follows (alone: none)."""
        ...

    # --- topic admin --------------------------------------------------------------------------

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[Sequence[int]] | None,
    ) -> Outcome:
        """CreateTopics checks made before the topic configs are parsed; what the
        controller checks (the ZooKeeper backend) answers NONE here."""
        ...

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int,
        replication_factor: int,
        raw_configs: Mapping[str, str],
        overrides: Mapping[str, object],
        assignment: Mapping[int, Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None, uuid.UUID | None]:
        """Create (or with ``validate_only`` only check) a topic whose request passed every
        check of the handler: its error, message and the new topic's id (None when no
        topic was created)."""
        ...

    async def wait_for_leaders(self, topics: Sequence[str], timeout_s: float) -> None:
        """Until the created ``topics`` have leaders known here (or the time is up)."""
        ...

    async def auto_create_topics(self, names: Sequence[str]) -> None:
        """Metadata's auto-creation (``auto.create.topics.enable``) of missing topics with
        the broker's default partitions and replication factor; failures are logged."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def wait_for_deletions(
        self, topic_ids: Mapping[str, uuid.UUID], timeout_s: float
    ) -> set[str]:
        """Until the deleted topics (by name, with the id they had) are gone from the
        metadata served here (a cluster broker: and by the other live brokers, as far as
        ``tidelog.server.cluster.propagation`` rule 2 goes), or the time is up: the topics
        still here then."""
        ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignment: Sequence[Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> Outcome: ...

    async def wait_for_partitions(self, counts: Mapping[str, int], timeout_s: float) -> set[str]:
        """Until the grown topics (name -> partition count) have a leader for every
        partition in the metadata served here (a cluster broker: and by the other live
        brokers, as far as ``tidelog.server.cluster.propagation`` rule 2 goes), or the time
        is up: the topics not led here then."""
        ...

    async def set_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        """A topic's config overrides after AlterConfigs (persisted, or written where the
        cluster keeps them before this broker's cache has them: raises ZkError when
        ZooKeeper cannot be reached, nothing changed)."""
        ...

    async def wait_for_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        """Until the other live brokers describe ``name`` with ``overrides`` (a cluster
        broker, as far as ``tidelog.server.cluster.propagation`` rule 2 goes; alone: no
        wait)."""
        ...

    async def wait_for_broker_configs(
        self, here: Callable[[], bool], default: Mapping[str, str] | None
    ) -> None:
        """Until this broker's live dynamic config shows an alteration (``here()``) and, for
        the cluster-wide default (``default``: its new entries), the other live brokers
        describe it (``tidelog.server.cluster.propagation`` rule 4; alone: no wait, a lone
        broker has no dynamic broker configs)."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before; raises ProducerIdUnavailableError."""
        ...

    def broker_config_changed(self) -> None:
        """A dynamic broker config changed (KIP-226): what the backend itself reads."""
        ...

    # --- lifecycle: the broker's membership in its cluster ------------------------------------

    @property
    def zk(self) -> ZkClient | None:
        """The ZooKeeper session, where dynamic configs, ACLs and SCRAM credentials live
        (None alone: they live in memory)."""
        ...

    @property
    def readiness(self) -> RequestGate | None:
        """Holds client requests until the broker has the cluster's metadata (None: a lone
        broker is ready once it listens)."""
        ...

    def is_ready(self) -> bool:
        """Whether client requests are served (a cluster broker: once it has the metadata)."""
        ...

    async def connect(self) -> None:
        """Before anything is served: join the cluster's coordination service."""
        ...

    async def start(self, bound_ports: Mapping[str, int]) -> None:
        """Once listening: register, take part (controller election, replication)."""
        ...

    async def withdraw_candidacy(self) -> None:
        """At shutdown's start: stand down as controller (candidate)."""
        ...

    def wants_controlled_shutdown(self) -> bool:
        """Whether shutdown first moves leadership away (``controlled.shutdown.enable``)."""
        ...

    async def controlled_shutdown(self) -> None: ...

    async def stop(self) -> None:
        """Leave the cluster: fetchers, controller, session."""
        ...

    def close_readiness(self) -> None:
        """After the connections closed: requests still held are failed."""
        ...


__all__ = [
    "FetchedPartition",
    "FollowerFetcher",
    "MetadataBackend",
    "Outcome",
    "ProducerIdUnavailableError",
    "RequestGate",
]
