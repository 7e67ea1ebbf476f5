"""The single-broker metadata image: topics, their ids, partition counts and config overrides.

Without ZooKeeper (``zookeeper.connect`` empty) the broker is its own controller and keeps
this image in ``<first log dir>/tidelog-metadata.json`` (Kafka keeps the same facts in
ZooKeeper's ``/brokers/topics`` and ``/config/topics``). Every change is written to a temp
file, fsynced and renamed before the request that made it is answered, so a restart - clean
or after SIGKILL - sees every topic a client was told exists.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

FILE_NAME = "tidelog-metadata.json"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    #: Topic-level overrides only (Kafka's ``/config/topics/<topic>``), parsed values.
    configs: Mapping[str, object] = field(default_factory=dict)


class MetadataStore:
    """Topics of this broker, persisted on every change."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / FILE_NAME
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self.next_producer_id = 1000
        self._load()

    def _load(self) -> None:
        if not self._path.exists():
            # Kafka's cluster ids are 22-character base64 UUIDs; any unique string works.
            self.cluster_id = uuid.uuid4().hex[:22]
            self._save()
            return
        data: dict[str, Any] = json.loads(self._path.read_text(encoding="utf-8"))
        self.cluster_id = str(data["cluster_id"])
        self.next_producer_id = int(data.get("next_producer_id", 1000))
        for item in data["topics"]:
            info = TopicInfo(
                name=item["name"],
                topic_id=uuid.UUID(item["topic_id"]),
                num_partitions=int(item["num_partitions"]),
                configs=dict(item.get("configs", {})),
            )
            self.topics[info.name] = info

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self.next_producer_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "num_partitions": t.num_partitions,
                    "configs": dict(t.configs),
                }
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
        }
        tmp = self._path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for info in self.topics.values():
            if info.topic_id == topic_id:
                return info
        return None

    def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, object], topic_id: uuid.UUID
    ) -> TopicInfo:
        info = TopicInfo(name, topic_id, num_partitions, dict(configs))
        self.topics[name] = info
        self._save()
        return info

    def delete_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self._save()

    def set_partitions(self, name: str, num_partitions: int) -> None:
        self.topics[name] = replace(self.topics[name], num_partitions=num_partitions)
        self._save()

    def set_configs(self, name: str, configs: Mapping[str, object]) -> None:
        self.topics[name] = replace(self.topics[name], configs=dict(configs))
        self._save()

    def allocate_producer_id(self) -> int:
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        self._save()
        return producer_id
