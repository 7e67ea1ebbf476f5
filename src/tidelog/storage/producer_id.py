"""Producer id allocation for InitProducerId (Kafka's ZK-era ProducerIdManager, KIP-98).

Theory of operation
-------------------
Producer ids are handed out from blocks of ``block_size`` (Kafka's PidBlockSize = 1000)
consecutive ids. A broker claims a whole block from a ``ProducerIdBlockStore``, then serves
ids from memory until the block is used up, and claims the next one.

Rules:
  1. An id is never handed out twice, across restarts and (for the cluster store) across
     brokers: a block is persisted as claimed BEFORE any of its ids is returned, and the next
     claim starts after the last persisted block. Ids left in a block at a restart are lost,
     as in Kafka.
  2. The persisted value is Kafka's ``/latest_producer_id_block`` JSON, byte-compatible::

         {"version":1,"broker":<id>,"block_start":"<first id>","block_end":"<last id>"}

     (block_start/block_end are decimal strings; both ends inclusive).
  3. Ids stop at Int64 max: a claim beyond it raises ``ProducerIdsExhaustedError``.

Stores:
  * ``LocalProducerIdBlockStore``: single broker; the JSON in ``<log.dir>/producer-id-block``,
    replaced atomically (tmp + fsync + rename + directory fsync). A file that does not parse
    raises ``CorruptCheckpointError`` rather than restarting at 0 (that would reuse ids).
  * The cluster store belongs to ``tidelog.zk`` (only it may import kazoo): read
    ``/latest_producer_id_block`` with its znode version, compute ``next_block`` from it,
    write it back with that version as a compare-and-set (create the znode if absent), and
    retry on BadVersion — Kafka's ZkProducerIdManager.getNewProducerIdBlock. It implements
    the same ``ProducerIdBlockStore`` protocol and reuses ``encode_block`` / ``decode_block``.

``ProducerIdManager.generate_producer_id`` is blocking (a claim fsyncs or talks to ZooKeeper
once per block) and thread-safe; the server calls it via ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from tidelog.storage.checkpoints import write_atomically
from tidelog.storage.errors import CorruptCheckpointError, StorageError

#: Kafka's ProducerIdManager.PidBlockSize.
DEFAULT_BLOCK_SIZE: Final = 1000
BLOCK_VERSION: Final = 1
PRODUCER_ID_BLOCK_FILE: Final = "producer-id-block"
#: The ZooKeeper path the cluster store uses (Kafka's ProducerIdBlockZNode).
ZK_PRODUCER_ID_BLOCK_PATH: Final = "/latest_producer_id_block"
_INT64_MAX: Final = 2**63 - 1


class ProducerIdsExhaustedError(StorageError):
    """Every producer id up to Int64 max has been claimed (rule 3)."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids ``block_start .. block_end`` (inclusive), claimed by ``broker_id``."""

    broker_id: int
    block_start: int
    block_end: int

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1


def encode_block(block: ProducerIdBlock) -> bytes:
    """Rule 2's JSON (compact, key order as Kafka writes it)."""
    return json.dumps(
        {
            "version": BLOCK_VERSION,
            "broker": block.broker_id,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        },
        separators=(",", ":"),
    ).encode()


def decode_block(data: bytes) -> ProducerIdBlock:
    """Parse rule 2's JSON; ValueError (saying what is wrong) on anything else."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(obj, dict) or obj.get("version") != BLOCK_VERSION:
        raise ValueError(f"expected an object with version {BLOCK_VERSION}, got {obj!r}")
    try:
        broker = obj["broker"]
        start = int(obj["block_start"])
        end = int(obj["block_end"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"missing or malformed field: {exc}") from exc
    if not isinstance(broker, int) or not 0 <= start <= end <= _INT64_MAX:
        raise ValueError(f"invalid block {obj!r}")
    return ProducerIdBlock(broker, start, end)


def next_block(
    previous: ProducerIdBlock | None, broker_id: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> ProducerIdBlock:
    """The block claimed after ``previous`` (None: the first block, starting at 0)."""
    if block_size < 1:
        raise ValueError(f"block size {block_size} must be positive")
    start = 0 if previous is None else previous.block_end + 1
    if start > _INT64_MAX - block_size + 1:
        raise ProducerIdsExhaustedError(
            f"cannot claim {block_size} producer ids after {start - 1}: Int64 max reached"
        )
    return ProducerIdBlock(broker_id, start, start + block_size - 1)


class ProducerIdBlockStore(Protocol):
    """Where claimed blocks are persisted (rule 1)."""

    def allocate(self, broker_id: int, block_size: int) -> ProducerIdBlock:
        """Claim and durably record the next block; returns it."""
        ...


class LocalProducerIdBlockStore:
    """Single-broker store: the latest block's JSON in one file (normally in a log dir)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ProducerIdBlock | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return decode_block(data)
        except ValueError as exc:
            raise CorruptCheckpointError(self.path, str(exc)) from exc

    def allocate(self, broker_id: int, block_size: int) -> ProducerIdBlock:
        block = next_block(self.read(), broker_id, block_size)
        write_atomically(self.path, encode_block(block).decode())
        return block


class ProducerIdManager:
    """Hands out producer ids from blocks claimed from ``store`` (rules 1-3)."""

    def __init__(
        self, broker_id: int, store: ProducerIdBlockStore, *, block_size: int = DEFAULT_BLOCK_SIZE
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block size {block_size} must be positive")
        self.broker_id = broker_id
        self.block_size = block_size
        self._store = store
        self._lock = threading.Lock()
        self._block: ProducerIdBlock | None = None
        self._next_id = 0

    @classmethod
    def for_log_dir(
        cls, broker_id: int, log_dir: Path, *, block_size: int = DEFAULT_BLOCK_SIZE
    ) -> ProducerIdManager:
        """The single-broker manager persisting to ``<log_dir>/producer-id-block``."""
        return cls(
            broker_id,
            LocalProducerIdBlockStore(log_dir / PRODUCER_ID_BLOCK_FILE),
            block_size=block_size,
        )

    @property
    def current_block(self) -> ProducerIdBlock | None:
        return self._block

    def generate_producer_id(self) -> int:
        """The next unused producer id; claims a new block first when needed (blocking)."""
        with self._lock:
            if self._block is None or self._next_id > self._block.block_end:
                self._block = self._store.allocate(self.broker_id, self.block_size)
                self._next_id = self._block.block_start
            producer_id = self._next_id
            self._next_id += 1
            return producer_id


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "PRODUCER_ID_BLOCK_FILE",
    "ZK_PRODUCER_ID_BLOCK_PATH",
    "LocalProducerIdBlockStore",
    "ProducerIdBlock",
    "ProducerIdBlockStore",
    "ProducerIdManager",
    "ProducerIdsExhaustedError",
    "decode_block",
    "encode_block",
    "next_block",
]
