"""A blocking wrapper: the async ``Client`` on a private event loop in a daemon thread.

For callers without an event loop (CLI commands, Spark executors, tests). Every method
blocks until the coroutine finishes on the client's loop; it may be called from any
thread, but not from the client's own loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tidelog.client.client import (
    Client,
    ClusterMetadata,
    CoordinatorResult,
    EpochEndOffset,
    FetchRequestPartition,
    FetchResult,
    ListOffsetsResult,
    NewTopic,
    ProduceResult,
    ProducerIdResult,
    TopicError,
    TransactionDescription,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

T = TypeVar("T")


class BlockingClient:
    """``Client`` with blocking methods. Use as a context manager or call ``close``."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tidelog-client", daemon=True
        )
        self._thread.start()
        self._client = Client(bootstrap_servers, **kwargs)

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def client(self) -> Client:
        """The underlying async client (use only on its loop, e.g. via ``run``)."""
        return self._client

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for its result."""
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("BlockingClient is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self.run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def send(self, body: Any, *, node_id: int | None = None, timeout_s: float | None = None) -> Any:
        return self.run(self._client.send(body, node_id=node_id, timeout_s=timeout_s))

    def api_versions(self, node_id: int | None = None) -> dict[int, tuple[int, int]]:
        return self.run(self._client.api_versions(node_id))

    def metadata(self, topics: Iterable[str] | None = None, **kwargs: Any) -> ClusterMetadata:
        return self.run(self._client.metadata(topics, **kwargs))

    def produce(self, tp: TopicPartition, records: bytes, **kwargs: Any) -> ProduceResult | None:
        return self.run(self._client.produce(tp, records, **kwargs))

    def fetch(
        self, partitions: Mapping[TopicPartition, FetchRequestPartition], **kwargs: Any
    ) -> dict[TopicPartition, FetchResult]:
        return self.run(self._client.fetch(partitions, **kwargs))

    def list_offsets(
        self, partitions: Mapping[TopicPartition, int], **kwargs: Any
    ) -> dict[TopicPartition, ListOffsetsResult]:
        return self.run(self._client.list_offsets(partitions, **kwargs))

    def create_topics(self, topics: Sequence[NewTopic], **kwargs: Any) -> dict[str, TopicError]:
        return self.run(self._client.create_topics(topics, **kwargs))

    def delete_topics(self, names: Sequence[str], **kwargs: Any) -> dict[str, TopicError]:
        return self.run(self._client.delete_topics(names, **kwargs))

    def offset_for_leader_epoch(
        self, partitions: Mapping[TopicPartition, tuple[int, int]], **kwargs: Any
    ) -> dict[TopicPartition, EpochEndOffset]:
        return self.run(self._client.offset_for_leader_epoch(partitions, **kwargs))

    def find_coordinator(self, key: str, **kwargs: Any) -> CoordinatorResult:
        return self.run(self._client.find_coordinator(key, **kwargs))

    def init_producer_id(self, transactional_id: str | None, **kwargs: Any) -> ProducerIdResult:
        return self.run(self._client.init_producer_id(transactional_id, **kwargs))

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        **kwargs: Any,
    ) -> dict[TopicPartition, ErrorCode]:
        return self.run(
            self._client.add_partitions_to_txn(
                transactional_id, producer_id, producer_epoch, partitions, **kwargs
            )
        )

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, **kwargs: Any
    ) -> ErrorCode:
        return self.run(
            self._client.end_txn(transactional_id, producer_id, producer_epoch, **kwargs)
        )

    def describe_transactions(
        self, transactional_ids: Sequence[str], **kwargs: Any
    ) -> list[TransactionDescription]:
        return self.run(self._client.describe_transactions(transactional_ids, **kwargs))
