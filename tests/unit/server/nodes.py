"""A cluster broker's node without ZooKeeper or a network, for unit tests of its handlers."""

from __future__ import annotations

from pathlib import Path

from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager


def cluster_node(tmp_path: Path, **settings: str) -> ClusterNode:
    """Broker 1 with its log dir in ``tmp_path``; ``settings`` are more broker config keys
    (dots written as underscores). ``zookeeper.connect`` names a port nobody serves."""
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "broker.id": "1",
            "zookeeper.connect": "127.0.0.1:1",
            **{key.replace("_", "."): value for key, value in settings.items()},
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    return ClusterNode(config, ReplicaManager(config, logs), ClusterMetadataCache(1), {})
