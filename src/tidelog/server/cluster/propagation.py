"""Read-your-writes for admin writes in a cluster (issue 30): CreateTopics, CreatePartitions,
DeleteTopics, topic config changes and dynamic broker config changes answer once the change
is in what the brokers serve.

Rules:

1. This broker (Kafka's DelayedCreatePartitions / DelayedDeleteTopics, which check the
   answering broker's MetadataCache; its CreateTopics waits the same way): a created or
   grown topic is propagated once this broker's cache describes its first ``count``
   partitions, each led by a live broker; a deleted topic once the cache no longer has it
   (or has it under another topic id: created again since). Checked every ``POLL_S`` until
   the request's timeout; a topic not propagated by then is the caller's to answer
   (CreatePartitions, DeleteTopics: REQUEST_TIMED_OUT).
2. The other live brokers (beyond Kafka, whose clients may read the old metadata from
   another broker for a moment): once rule 1 holds, every other broker in this broker's
   cache is asked Metadata for those topics on the inter-broker listener, again after
   ``POLL_S`` doubling up to ``PEER_POLL_MAX_S``, until its answer shows the same (a grown
   topic: error NONE and its first ``count`` partitions with a leader; a deleted one:
   absent, UNKNOWN_TOPIC_OR_PARTITION, or another topic id), for at most ``PEER_WAIT_S``
   and never beyond the request's timeout. A broker that cannot be reached, does not answer
   in time or refuses DESCRIBE (TOPIC_AUTHORIZATION_FAILED) is given up on, logged: rule 2
   never changes an answer, it only delays it. The controller sends UpdateMetadata to
   every broker at once, so this usually costs one Metadata round trip per broker.
3. A topic's config overrides (AlterConfigs, IncrementalAlterConfigs), written to ZooKeeper
   before this broker's cache: every other live broker is asked DescribeConfigs for the
   topic as in rule 2 (at most ``PEER_WAIT_S``; AlterConfigs has no timeout_ms) until the
   entries whose source is DYNAMIC_TOPIC_CONFIG are exactly the new overrides. Kafka
   answers once ZooKeeper has them and the other brokers follow its change notification;
   here they follow the same notification, and the answer waits for it.
4. A dynamic broker config (AlterConfigs, IncrementalAlterConfigs on a broker resource,
   KIP-226), written to ``/config/brokers/<entity>`` before any broker's watch applies it:
   the answer waits until this broker's live config shows the new entries (checked every
   ``POLL_S``; a per-broker resource names the answering broker, as Kafka's clients send it
   there) and, for the cluster-wide default (resource ""), until every other live broker
   describes "" with exactly the new entries as DYNAMIC_DEFAULT_BROKER_CONFIG, asked as in
   rule 2. At most ``PEER_WAIT_S`` in all; as rules 2 and 3, it never changes the answer.
   Kafka answers once ZooKeeper has the change.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from tidelog.aio import wait_for
from tidelog.client.client import Client
from tidelog.client.config_admin import (
    BROKER,
    TOPIC,
    ResourceConfigs,
    describe_configs_request,
    read_describe_configs,
)
from tidelog.client.errors import ClientError
from tidelog.client.metadata import TopicMetadata, metadata_request, read_metadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.security.client_config import ClientSecurity
from tidelog.server.cluster.metadata_cache import CachedBroker, ClusterMetadataCache
from tidelog.server.config.broker_config import config_to_string

log = logging.getLogger(__name__)

#: How often the metadata is checked again while a change is not propagated.
POLL_S: Final = 0.05
#: How long rule 2 waits at most for the other live brokers.
PEER_WAIT_S: Final = 5.0
#: Rule 2 asks a peer again after ``POLL_S``, doubling up to this (a topic of thousands of
#: partitions makes each Metadata answer large).
PEER_POLL_MAX_S: Final = 0.4
#: The Metadata versions asked of a peer (v10+ carry topic ids, rule 1's re-creation check).
_METADATA_VERSIONS: Final = (12, 11, 10, 9, 8, 7, 6, 5, 4)

#: DescribeConfigs versions asked of a peer (v1+ carry each entry's source).
_DESCRIBE_CONFIGS_VERSIONS: Final = (4, 3, 2, 1)
#: The source of a topic's own override in DescribeConfigs.
TOPIC_SOURCE: Final = "DYNAMIC_TOPIC_CONFIG"
#: The source of a cluster-wide default broker config in DescribeConfigs.
DEFAULT_BROKER_SOURCE: Final = "DYNAMIC_DEFAULT_BROKER_CONFIG"
#: How rule 4 names the default broker config in its log lines.
_DEFAULT_LABEL: Final = "the default broker config"

#: Asks one peer (within the seconds given) which of the topics its answer does not show
#: the change of yet; raises ClientError, or _RefusedError when refused DESCRIBE.
Probe = Callable[[CachedBroker, list[str], float], Awaitable[list[str]]]
#: Whether this broker's cache shows a topic's change.
HereCheck = Callable[[str], bool]
#: Whether a peer's Metadata answer shows a topic's change (None: the answer omits it).
ThereCheck = Callable[[str, TopicMetadata | None], bool]


class MetadataPropagation:
    """Waits for a topic admin change to reach this broker's metadata and the other live
    brokers'; see the module docstring."""

    def __init__(
        self,
        broker_id: int,
        metadata: ClusterMetadataCache,
        bootstrap: str,
        security: ClientSecurity,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        #: Connections of its own to the peers: a Metadata request never queues behind a
        #: replica fetch on the node's client.
        self.client = Client(
            bootstrap, client_id=f"broker-{broker_id}-metadata-propagation", security=security
        )

    async def close(self) -> None:
        await self.client.close()

    # --- what "propagated" means ----------------------------------------------------------

    def led_here(self, topic: str, count: int) -> bool:
        """Rule 1 for a created or grown topic."""
        info = self.metadata.described(topic)
        if info is None or info.num_partitions < count:
            return False
        for p in range(count):
            state = self.metadata.partitions.get(TopicPartition(topic, p))
            if state is None or state.leader not in self.metadata.brokers:
                return False
        return True

    @staticmethod
    def led_there(count: int, seen: TopicMetadata | None) -> bool:
        """Rule 2 for a created or grown topic."""
        if seen is None or seen.error_code != ErrorCode.NONE:
            return False
        return all(
            (p := seen.partitions.get(i)) is not None and p.leader_id >= 0 for i in range(count)
        )

    def gone_here(self, topic: str, topic_id: uuid.UUID) -> bool:
        """Rule 1 for a deleted topic."""
        info = self.metadata.topics.get(topic)
        return info is None or info.topic_id != topic_id

    @staticmethod
    def gone_there(topic_id: uuid.UUID, seen: TopicMetadata | None) -> bool:
        """Rule 2 for a deleted topic."""
        if seen is None or seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return True
        other = seen.topic_id
        # Another id only counts when both are known (the nil id: not known).
        return other is not None and other.int != 0 and topic_id.int != 0 and other != topic_id

    # --- the waits ----------------------------------------------------------------------------

    async def partitions_led(self, counts: Mapping[str, int], timeout_s: float) -> set[str]:
        """Until every topic of ``counts`` has its first ``count`` partitions led here and on
        the other live brokers; the topics that were not led here in time."""
        return await self._until_propagated(
            list(counts),
            lambda t: self.led_here(t, counts[t]),
            lambda t, seen: self.led_there(counts[t], seen),
            timeout_s,
        )

    async def topics_gone(self, topic_ids: Mapping[str, uuid.UUID], timeout_s: float) -> set[str]:
        """Until the deleted topics (by name, with the id they had) are gone here and from
        the other live brokers; the topics still here when the time was up."""
        return await self._until_propagated(
            list(topic_ids),
            lambda t: self.gone_here(t, topic_ids[t]),
            lambda t, seen: self.gone_there(topic_ids[t], seen),
            timeout_s,
        )

    async def configs_seen(self, topic: str, overrides: Mapping[str, object]) -> None:
        """Rule 3: until the other live brokers describe ``topic`` with ``overrides``."""
        expected = {k: config_to_string(v) for k, v in overrides.items()}

        async def probe(broker: CachedBroker, pending: list[str], timeout_s: float) -> list[str]:
            (seen,) = await self._describe(broker, (TOPIC, topic), timeout_s)
            if seen.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                raise _RefusedError(seen.error_code.name)
            if seen.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return []  # deleted meanwhile: nothing left to show
            dynamic = {e.name: e.value for e in seen.entries if e.source == TOPIC_SOURCE}
            return [] if dynamic == expected else pending

        loop = asyncio.get_running_loop()
        await self._confirm_peers([topic], probe, loop.time() + PEER_WAIT_S)

    async def broker_configs_seen(
        self, here: Callable[[], bool], default: Mapping[str, str] | None
    ) -> None:
        """Rule 4: until ``here()`` (this broker's live dynamic config shows the change) and,
        for the cluster-wide default (``default``: its new entries), until the other live
        brokers describe them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PEER_WAIT_S
        waits = [self._until_here(here, deadline)]
        if default is not None:
            expected = dict(default)

            async def probe(
                broker: CachedBroker, pending: list[str], timeout_s: float
            ) -> list[str]:
                (seen,) = await self._describe(broker, (BROKER, ""), timeout_s)
                if seen.error_code != ErrorCode.NONE:
                    raise _RefusedError(seen.error_code.name)
                entries = seen.entries
                dynamic = {e.name: e.value for e in entries if e.source == DEFAULT_BROKER_SOURCE}
                return [] if dynamic == expected else pending

            waits.append(self._confirm_peers([_DEFAULT_LABEL], probe, deadline))
        await asyncio.gather(*waits)

    async def _until_here(self, here: Callable[[], bool], deadline: float) -> None:
        """Rule 4 on this broker."""
        loop = asyncio.get_running_loop()
        while not here():
            if loop.time() >= deadline:
                log.warning("the dynamic broker config change is not applied here in time")
                return
            await asyncio.sleep(POLL_S)

    async def _until_propagated(
        self, topics: list[str], here: HereCheck, there: ThereCheck, timeout_s: float
    ) -> set[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = set(topics)
        while True:
            pending = {t for t in pending if not here(t)}
            if not pending or loop.time() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        done = [t for t in topics if t not in pending]

        async def probe(broker: CachedBroker, asked: list[str], timeout_s: float) -> list[str]:
            seen = await self._metadata(broker, asked, timeout_s)
            refused = [t for t in asked if (m := seen.get(t)) is not None and _refused(m)]
            if refused:
                raise _RefusedError(f"TOPIC_AUTHORIZATION_FAILED for {', '.join(refused)}")
            return [t for t in asked if not there(t, seen.get(t))]

        if done:
            await self._confirm_peers(done, probe, min(deadline, loop.time() + PEER_WAIT_S))
        return pending

    async def _confirm_peers(self, topics: list[str], probe: Probe, deadline: float) -> None:
        """Rule 2 for every other live broker at once."""
        peers = [b for i, b in sorted(self.metadata.brokers.items()) if i != self.broker_id]
        await asyncio.gather(*(self._confirm(b, topics, probe, deadline) for b in peers))

    async def _confirm(
        self, broker: CachedBroker, topics: list[str], probe: Probe, deadline: float
    ) -> None:
        """Rule 2 for one peer: ask until its answer shows every topic's change (or give up)."""
        loop = asyncio.get_running_loop()
        pending = sorted(topics)
        pause = POLL_S
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning(
                    "broker %d did not show the change of %s in time; answering without it",
                    broker.broker_id,
                    ", ".join(pending),
                )
                return
            try:
                # Connecting too: a paused broker accepts the connection, then never answers.
                pending = await wait_for(probe(broker, pending, remaining), remaining)
            except (ClientError, TimeoutError, _RefusedError) as exc:
                log.info(
                    "not waiting for broker %d to show the change of %s: %s",
                    broker.broker_id,
                    ", ".join(pending),
                    str(exc) or "no answer in time",
                )
                return
            if not pending:
                return
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(2 * pause, PEER_POLL_MAX_S)

    async def _metadata(
        self, broker: CachedBroker, topics: list[str], timeout_s: float
    ) -> Mapping[str, TopicMetadata]:
        """``topics`` as ``broker`` serves them (its Metadata answer, no auto-creation)."""
        conn = await self.client.connection_to(broker.host, broker.port)
        version = conn.pick_version(ApiKey.METADATA, _METADATA_VERSIONS)
        if version is None:
            raise ClientError(f"broker {broker.broker_id} speaks no Metadata version we do")
        request = metadata_request(version, topics, allow_auto_topic_creation=False)
        response = await conn.send(request, timeout_s=timeout_s)
        return read_metadata(response).topics

    async def _describe(
        self, broker: CachedBroker, resource: tuple[int, str], timeout_s: float
    ) -> list[ResourceConfigs]:
        """A resource's configs as ``broker`` describes them (DescribeConfigs, no synonyms)."""
        conn = await self.client.connection_to(broker.host, broker.port)
        version = conn.pick_version(ApiKey.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSIONS)
        if version is None:
            raise ClientError(f"broker {broker.broker_id} speaks no DescribeConfigs we do")
        request = describe_configs_request([resource], synonyms=False, version=version)
        return read_describe_configs(await conn.send(request, timeout_s=timeout_s))


class _RefusedError(Exception):
    """A peer refuses this broker DESCRIBE: rule 2 gives it up."""


def _refused(seen: TopicMetadata) -> bool:
    return seen.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


__all__ = ["DEFAULT_BROKER_SOURCE", "PEER_WAIT_S", "POLL_S", "MetadataPropagation"]
