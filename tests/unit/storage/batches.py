"""Real v2 batches built by kafka-python's independent codec, for the storage tests."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from tidelog.protocol.records import iter_batches
from tidelog.storage.log import Log

BASE_TS = 1_700_000_000_000


def build_batch(
    n: int,
    *,
    compression: int = 0,
    base_ts: int = BASE_TS,
    value_size: int = 100,
    ts_step: int = 1,
    seed: int = 0,
) -> bytes:
    """A batch of ``n`` records (offsets 0..n-1, timestamps base_ts + i * ts_step)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i in range(n):
        value = bytes((seed + i + j) % 251 for j in range(value_size))
        builder.append(
            i, timestamp=base_ts + i * ts_step, key=f"k{seed}-{i}".encode(), value=value, headers=[]
        )
    return bytes(builder.build())


def read_all(log: Log, start: int | None = None) -> bytes:
    """Every batch from ``start`` (default: log start) to the log end, slice by slice."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 30)
        assert fetched is not None
        chunk = fetched.read_bytes()
        out += chunk
        offset = [h for _, h in iter_batches(chunk)][-1].next_offset
    return bytes(out)
