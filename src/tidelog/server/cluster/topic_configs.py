"""Topic config overrides in a cluster: read from ZooKeeper's ``/config/topics/<topic>`` when
a topic is first hosted or described, read again after a change notification under
``/config/changes`` (Kafka's config change notifications: a change made through any broker
reaches every broker), and written there when AlterConfigs changes them through this one
(the controller reads ``unclean.leader.election.enable`` there at election time)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.config.broker_config import (
    BrokerConfig,
    config_to_string,
    validate_topic_configs,
)
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import TopicInfo
from tidelog.zk import Watch, ZkClient, ZkError
from tidelog.zk.znodes import CONFIG_CHANGES_PATH

log = logging.getLogger(__name__)


class TopicConfigs:
    """The overrides of the topics in the metadata cache, kept as ZooKeeper has them; a
    changed topic's effective config goes to ``apply`` (the replica manager's
    ``update_topic_config``: log settings, ``min.insync.replicas``)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        metadata: ClusterMetadataCache,
        zookeeper: Callable[[], ZkClient | None],
        apply: Callable[[str, Mapping[str, object]], None],
        background: set[asyncio.Task[Any]],
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.zookeeper = zookeeper
        self.apply = apply
        self.background = background
        #: Topics whose config overrides were read from ZooKeeper.
        self._loaded: set[str] = set()
        self._changed = asyncio.Event()
        self._watch: Watch | None = None

    async def watch(self, zk: ZkClient) -> None:
        """Watch ``/config/changes`` for the notifications ``changes_loop`` acts on."""
        self._watch = await zk.watch_children(
            CONFIG_CHANGES_PATH, lambda _children: self._changed.set()
        )

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def changes_loop(self) -> None:
        """Re-read the overrides of every known topic after a change notification and apply
        the ones that differ (log settings, ``min.insync.replicas``)."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            zk = self.zookeeper()
            if zk is None:
                continue
            for topic in sorted(self.metadata.topics):
                try:
                    raw = await zk.get_topic_config(topic)
                except ZkError:
                    log.exception("reading the config of topic %s failed", topic)
                    continue
                parsed, problem = validate_topic_configs(dict(raw))
                if problem:
                    log.warning("topic %s has a bad config in ZooKeeper: %s", topic, problem)
                    continue
                overrides = {k: v for k, v in parsed.items() if v is not None}
                info = self.metadata.topics.get(topic)
                if info is None or dict(info.configs) == overrides:
                    continue
                self.metadata.topics[topic] = TopicInfo(
                    info.name, info.topic_id, info.num_partitions, overrides
                )
                self._loaded.add(topic)
                self.apply(topic, effective_topic_config(self.config, overrides))
                log.info("topic %s config overrides now %s", topic, overrides)

    async def effective(self, topic: str) -> dict[str, object]:
        """``topic``'s effective config: the broker's defaults overlaid with its overrides,
        read from ZooKeeper the first time (kept in the metadata cache after)."""
        info = self.metadata.topics.get(topic)
        if info is None or topic not in self._loaded:
            raw: dict[str, str] = {}
            zk = self.zookeeper()
            if zk is not None:
                with contextlib.suppress(ZkError):
                    raw = await zk.get_topic_config(topic)
            parsed, problem = validate_topic_configs(dict(raw))
            if problem:
                log.warning("topic %s has a bad config in ZooKeeper: %s", topic, problem)
            overrides = {k: v for k, v in parsed.items() if v is not None}
            info = self.metadata.topics.get(topic)
            if info is not None:
                self.metadata.topics[topic] = TopicInfo(
                    info.name, info.topic_id, info.num_partitions, overrides
                )
                self._loaded.add(topic)
            return effective_topic_config(self.config, overrides)
        return effective_topic_config(self.config, info.configs)

    def forget(self, topic: str) -> None:
        """``topic`` was deleted: a topic of that name created later is read again."""
        self._loaded.discard(topic)

    async def write(self, topic: str, overrides: Mapping[str, object]) -> None:
        """AlterConfigs in a cluster: the overrides go to ``/config/topics/<topic>`` with a
        change notification (the controller reads ``unclean.leader.election.enable`` there
        at election time; the other brokers re-read it). Raises ZkError."""
        zk = self.zookeeper()
        if zk is None:
            raise ZkError("no ZooKeeper session")
        raw = {k: config_to_string(v) for k, v in overrides.items()}
        await zk.set_topic_config(topic, raw)


__all__ = ["TopicConfigs"]
