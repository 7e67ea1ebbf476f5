"""Encode/decode micro-benchmark: kio versus the hand-written Produce/Fetch encoders.

Run: ``.venv/bin/python benchmarks/bench_protocol.py`` (prints µs per operation, best of 5).
"""

from __future__ import annotations

import datetime
import timeit
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.fetch.v16 import response as fetch16
from kio.schema.produce.v10 import response as produce10

from tidelog.protocol.codec import RequestHeader, decode_request, encode_response, warm_up
from tidelog.protocol.responses import (
    FetchPartitionResponse,
    FetchTopicResponse,
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_fetch_response,
    encode_produce_response,
)


def bench(name: str, fn: Callable[[], object], number: int = 20000) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    print(f"{name:<55} {best:8.2f} µs")
    return best


def main() -> None:
    import time

    started = time.perf_counter()
    count = warm_up()
    print(
        f"warm_up: {count} request schemas (+ responses) in {time.perf_counter() - started:.2f} s"
    )
    records = b"\x00" * 1024
    topic_id = uuid.uuid4()

    kio_produce = produce10.ProduceResponse(
        responses=(
            produce10.TopicProduceResponse(
                name="events",
                partition_responses=(
                    produce10.PartitionProduceResponse(
                        index=0,
                        error_code=KioErrorCode.none,
                        base_offset=12345,
                        log_append_time=None,
                        record_errors=(),
                        log_start_offset=0,
                    ),
                ),
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )
    fast_produce = [
        ProduceTopicResponse(
            name="events",
            partitions=[ProducePartitionResponse(index=0, base_offset=12345, log_start_offset=0)],
        )
    ]
    h_produce = RequestHeader(0, 10, 1, None)
    assert encode_response(h_produce, kio_produce) == encode_produce_response(1, 10, fast_produce)
    kio_p = bench(
        "Produce v10 response, 1 partition: kio", lambda: encode_response(h_produce, kio_produce)
    )
    fast_p = bench(
        "Produce v10 response, 1 partition: hand-written",
        lambda: encode_produce_response(1, 10, fast_produce),
    )

    kio_fetch = fetch16.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=KioErrorCode.none,
        session_id=0,
        responses=(
            fetch16.FetchableTopicResponse(
                topic_id=topic_id,
                partitions=(
                    fetch16.PartitionData(
                        partition_index=0,
                        error_code=KioErrorCode.none,
                        high_watermark=100,
                        last_stable_offset=100,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=records,
                    ),
                ),
            ),
        ),
    )
    fast_fetch = [
        FetchTopicResponse(
            topic_id=topic_id,
            partitions=[
                FetchPartitionResponse(
                    partition_index=0,
                    high_watermark=100,
                    last_stable_offset=100,
                    log_start_offset=0,
                    records=records,
                )
            ],
        )
    ]
    h_fetch = RequestHeader(1, 16, 1, None)
    assert [encode_response(h_fetch, kio_fetch)] == encode_fetch_response(1, 16, fast_fetch)
    kio_f = bench(
        "Fetch v16 response, 1 partition, 1 KiB: kio", lambda: encode_response(h_fetch, kio_fetch)
    )
    fast_f = bench(
        "Fetch v16 response, 1 partition, 1 KiB: hand-written",
        lambda: encode_fetch_response(1, 16, fast_fetch),
    )
    print(f"speed-up: Produce x{kio_p / fast_p:.1f}, Fetch x{kio_f / fast_f:.1f}")

    # Decoding requests (kio's native reader + our header parsing).
    from kio.schema.produce.v10 import request as produce10_req

    from tidelog.protocol.codec import encode_request

    produce_req = produce10_req.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce10_req.TopicProduceData(
                name="events",
                partition_data=(produce10_req.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )
    frame = encode_request(RequestHeader(0, 10, 1, "bench"), produce_req)[4:]
    bench("decode_request Produce v10, 1 KiB", lambda: decode_request(frame))
    big = encode_request(
        RequestHeader(0, 10, 1, "bench"),
        produce10_req.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                produce10_req.TopicProduceData(
                    name="events",
                    partition_data=(
                        produce10_req.PartitionProduceData(index=0, records=b"\x00" * (1 << 20)),
                    ),
                ),
            ),
        ),
    )[4:]
    bench("decode_request Produce v10, 1 MiB", lambda: decode_request(big), number=500)

    from tidelog.protocol.codec import decode_response

    (fetch_wire,) = encode_fetch_response(1, 16, fast_fetch)
    assert isinstance(fetch_wire, bytes)
    payload = fetch_wire[4:]
    bench("decode_response Fetch v16, 1 KiB (client side)", lambda: decode_response(1, 16, payload))


if __name__ == "__main__":
    main()
