"""Producer id blocks: allocation, persistence across restarts, Kafka's znode JSON."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tidelog.storage.errors import CorruptCheckpointError
from tidelog.storage.producer_id import (
    PRODUCER_ID_BLOCK_FILE,
    LocalProducerIdBlockStore,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    decode_block,
    encode_block,
    next_block,
)

INT64_MAX = 2**63 - 1


def test_ids_come_in_blocks_and_survive_restarts(tmp_path: Path) -> None:
    manager = ProducerIdManager.for_log_dir(3, tmp_path, block_size=5)
    assert [manager.generate_producer_id() for _ in range(7)] == [0, 1, 2, 3, 4, 5, 6]
    assert manager.current_block == ProducerIdBlock(3, 5, 9)
    on_disk = json.loads((tmp_path / PRODUCER_ID_BLOCK_FILE).read_text())
    assert on_disk == {"version": 1, "broker": 3, "block_start": "5", "block_end": "9"}
    # A restart never reuses an id: the rest of the claimed block is skipped, as in Kafka.
    restarted = ProducerIdManager.for_log_dir(3, tmp_path, block_size=5)
    assert [restarted.generate_producer_id() for _ in range(2)] == [10, 11]


def test_default_block_is_kafkas_1000(tmp_path: Path) -> None:
    manager = ProducerIdManager.for_log_dir(0, tmp_path)
    assert manager.generate_producer_id() == 0
    assert manager.current_block == ProducerIdBlock(0, 0, 999)
    assert ProducerIdManager.for_log_dir(0, tmp_path).generate_producer_id() == 1000


def test_concurrent_callers_get_distinct_ids(tmp_path: Path) -> None:
    manager = ProducerIdManager.for_log_dir(1, tmp_path, block_size=7)
    got: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        ids = [manager.generate_producer_id() for _ in range(50)]
        with lock:
            got.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(200))


def test_znode_json_round_trip_matches_kafka() -> None:
    block = ProducerIdBlock(2, 1000, 1999)
    data = encode_block(block)
    assert data == b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    assert decode_block(data) == block
    # Kafka writes the ends as strings; numbers are accepted too.
    assert decode_block(b'{"version":1,"broker":2,"block_start":0,"block_end":9}').size == 10


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b"[1]", "version 1"),
        (b'{"version":2,"broker":0,"block_start":"0","block_end":"9"}', "version 1"),
        (b'{"version":1,"broker":0,"block_start":"x","block_end":"9"}', "malformed"),
        (b'{"version":1,"broker":0,"block_end":"9"}', "malformed"),
        (b'{"version":1,"broker":0,"block_start":"9","block_end":"0"}', "invalid block"),
    ],
)
def test_bad_block_json_says_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_block(data)


def test_corrupt_local_file_is_refused_not_restarted_at_zero(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("garbage")
    manager = ProducerIdManager.for_log_dir(0, tmp_path)
    with pytest.raises(CorruptCheckpointError, match="producer-id-block"):
        manager.generate_producer_id()


def test_next_block_and_exhaustion() -> None:
    assert next_block(None, 4, 10) == ProducerIdBlock(4, 0, 9)
    assert next_block(ProducerIdBlock(1, 0, 9), 4, 10) == ProducerIdBlock(4, 10, 19)
    last = next_block(ProducerIdBlock(1, 0, INT64_MAX - 10), 4, 10)
    assert last == ProducerIdBlock(4, INT64_MAX - 9, INT64_MAX)
    with pytest.raises(ProducerIdsExhaustedError, match="Int64 max"):
        next_block(last, 4, 10)
    with pytest.raises(ValueError, match="positive"):
        next_block(None, 4, 0)


def test_store_allocates_after_what_another_broker_claimed(tmp_path: Path) -> None:
    store = LocalProducerIdBlockStore(tmp_path / "block")
    assert store.read() is None
    assert store.allocate(1, 100) == ProducerIdBlock(1, 0, 99)
    assert store.allocate(2, 100) == ProducerIdBlock(2, 100, 199)
    assert store.read() == ProducerIdBlock(2, 100, 199)
