"""The sink's record batches with ``kafka.compression.type``: the records section
compressed (``tidelog.storage.compression``, the framings Kafka's clients write and read)
and the codec in attributes bits 0-2, as the Kafka producer writes them."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.protocol.batch_builder import (
    TRANSACTIONAL_ATTRIBUTE,
    RecordFields,
    encode_batch,
    encode_records,
    frame_batch,
)
from tidelog.protocol.records import Compression
from tidelog.storage.compression import CompressionLevels, compress


def encode_sink_batch(
    records: Sequence[RecordFields],
    timestamp_ms: int,
    codec: Compression,
    levels: CompressionLevels,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One batch of ``records`` (at least one), all stamped ``timestamp_ms``, compressed
    with ``codec`` (``Compression.NONE``: ``encode_batch``'s bytes)."""
    if codec == Compression.NONE:
        return encode_batch(
            records,
            timestamp_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
        )
    return frame_batch(
        compress(codec, encode_records(records), levels),
        count=len(records),
        base_timestamp_ms=timestamp_ms,
        max_timestamp_ms=timestamp_ms,
        attributes=int(codec) | (TRANSACTIONAL_ATTRIBUTE if transactional else 0),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
