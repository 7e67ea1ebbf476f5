"""The sink's record batches with ``kafka.compression.type``: the records section
compressed (``tidelog.storage.compression``, the framings Kafka's clients write and read)
and the codec in attributes bits 0-2, as the Kafka producer writes them."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.protocol.batch_builder import (
    TRANSACTIONAL_ATTRIBUTE,
    RecordFields,
    encode_records,
    frame_batch,
)
from tidelog.protocol.records import Compression
from tidelog.storage.compression import CompressionLevels, compress


def frame_sink_section(
    section: bytes,
    count: int,
    timestamp_ms: int,
    codec: Compression,
    levels: CompressionLevels,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One batch of ``count`` records whose uncompressed records section is ``section`` (as
    ``encode_records`` writes it), all stamped ``timestamp_ms``, the section compressed with
    ``codec`` (``Compression.NONE``: as it is)."""
    if codec != Compression.NONE:
        section = compress(codec, section, levels)
    return frame_batch(
        section,
        count=count,
        base_timestamp_ms=timestamp_ms,
        max_timestamp_ms=timestamp_ms,
        attributes=int(codec) | (TRANSACTIONAL_ATTRIBUTE if transactional else 0),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


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
    """One batch of ``records`` (at least one): ``frame_sink_section`` of their section."""
    return frame_sink_section(
        encode_records(records),
        len(records),
        timestamp_ms,
        codec,
        levels,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
    )
