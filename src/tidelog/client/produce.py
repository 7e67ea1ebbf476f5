"""Produce to one partition: the request for a version and the partition's answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


def produce_request(
    version: int,
    tp: TopicPartition,
    records: bytes,
    *,
    acks: int,
    timeout_ms: int,
    transactional_id: str | None,
) -> Any:
    """Produce request ``version`` carrying ``records`` (whole v2 batches) for ``tp``."""
    m = schema_module(ApiKey.PRODUCE, version)
    return make(
        m.ProduceRequest,
        transactional_id=transactional_id,
        acks=acks,
        timeout=ms(timeout_ms),
        topic_data=(
            m.TopicProduceData(
                name=tp.topic,
                partition_data=(m.PartitionProduceData(index=tp.partition, records=records),),
            ),
        ),
    )


def read_produce(response: Any, tp: TopicPartition) -> ProduceResult | None:
    """``tp``'s answer in a Produce response (None when the response lacks it)."""
    for topic in response.responses:
        for p in topic.partition_responses:
            if topic.name == tp.topic and p.index == tp.partition:
                append_time = p.log_append_time
                return ProduceResult(
                    error_code=error_code(p.error_code),
                    base_offset=int(p.base_offset),
                    log_append_time_ms=-1
                    if append_time is None
                    else round(append_time.timestamp() * 1000),
                    log_start_offset=int(getattr(p, "log_start_offset", -1)),
                    error_message=getattr(p, "error_message", None),
                )
    return None
