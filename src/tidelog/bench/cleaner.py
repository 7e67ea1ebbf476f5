"""``--only cleaner``: the log cleaner (``tidelog.storage.cleaner``) on a keyed workload
written straight through the storage API (no broker, no network): how fast it cleans and
how much it leaves.

Workload: ``records`` records over ``keys`` keys (each key updated records/keys times, in
round-robin order), ``value_bytes`` values, batches of 100 records, 1 MiB segments, written
uncompressed and, in a second row, lz4-compressed (the cleaner decompresses and recompresses
with the batch's own codec). The log is rolled and flushed so everything is cleanable, then
one clean (``clean_log``) runs, timed. ``mb_per_s``: bytes of the cleaned section read per
second of the clean (Kafka's "cleaned" rate in its log-cleaner stats)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tidelog.bench.common import Row, remove_data, settle
from tidelog.client.records import Record, build_batch
from tidelog.protocol.records import Compression
from tidelog.storage.cleaner import CleanerConfig, clean_log
from tidelog.storage.log import Log, LogConfig

RECORDS = 200_000
KEYS = 1000
VALUE_BYTES = 100
BATCH = 100
_TS = 1_700_000_000_000


def _write(log: Log, records: int, keys: int, value_bytes: int, codec: Compression) -> int:
    value = b"v" * value_bytes
    for start in range(0, records, BATCH):
        batch = [
            Record(key=b"key-%06d" % (i % keys), value=value)
            for i in range(start, min(start + BATCH, records))
        ]
        raw = build_batch(batch, base_timestamp_ms=_TS, compression=codec)
        info = log.append_as_leader(raw, leader_epoch=0, now_ms=_TS)
        assert not info.error, info
    log.roll(_TS)
    log.flush()
    return log.size_bytes


def cleaner_rows(
    work: Path,
    say: Callable[[str], None],
    *,
    records: int = RECORDS,
    keys: int = KEYS,
    value_bytes: int = VALUE_BYTES,
) -> list[Row]:
    rows: list[Row] = []
    for codec in (Compression.NONE, Compression.LZ4):
        directory = work / f"cleaner-{codec.name.lower()}" / "bench-0"
        config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20)
        log = Log.open(directory, config, now_ms=_TS)
        try:
            write_start = time.monotonic()
            before = _write(log, records, keys, value_bytes, codec)
            write_s = time.monotonic() - write_start
            segments_before = len(log.segment_base_offsets)
            settled = settle()
            start = time.monotonic()
            cpu = time.process_time()
            stats = clean_log(
                log, None, CleanerConfig(), now_ms=_TS, high_watermark=log.log_end_offset
            )
            elapsed = time.monotonic() - start
            cpu = time.process_time() - cpu
            after = log.size_bytes
            values = {
                "records": records,
                "keys": keys,
                "value_bytes": value_bytes,
                "codec": codec.name.lower(),
                "bytes_before": before,
                "bytes_after": after,
                "segments_before": segments_before,
                "segments_after": len(log.segment_base_offsets),
                "records_kept": stats.records_kept,
                "clean_s": round(elapsed, 3),
                "cpu_s": round(cpu, 3),
                "mb_per_s": round(stats.bytes_read / 1e6 / elapsed, 2) if elapsed else None,
                "records_per_s": round(stats.records_read / elapsed) if elapsed else None,
                "write_s": round(write_s, 2),
                "settled": settled,
            }
            label = f"clean {records // 1000}k records over {keys} keys, {codec.name.lower()}"
            rows.append(Row("cleaner", "tidelog", label, values, note="storage API, no broker"))
            say(
                f"{label}: {values['mb_per_s']} MB/s, {before / 1e6:.1f} MB -> "
                f"{after / 1e6:.3f} MB in {elapsed:.2f} s"
            )
        finally:
            log.close()
            remove_data(directory.parent)
    return rows
