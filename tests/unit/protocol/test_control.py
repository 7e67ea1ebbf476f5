"""Control-plane messages (our own schemas): byte-exact layout, round trips, bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tidelog.protocol.control import (
    ControlDecodeError,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionError,
    RemainingPartition,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicIdEntry,
    UpdateMetadataBroker,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from tidelog.protocol.errors import InvalidRequestError
from tidelog.protocol.framing import FrameDecoder

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAME = st.text(max_size=10)
IDS = st.lists(I32, max_size=4).map(tuple)


def test_controlled_shutdown_wire_format() -> None:
    request = ControlledShutdownRequest(broker_id=2, broker_epoch=77)
    wire = encode_request(RequestHeader(7, 0, 5, "controller"), request)
    assert wire == (
        b"\x00\x00\x00\x20"
        b"\x00\x07\x00\x00\x00\x00\x00\x05\x00\x0acontroller"  # header v1, no tags
        b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x00\x00\x00\x00\x4d"
    )
    (payload,) = FrameDecoder().feed(wire)
    assert decode_request(payload) == (RequestHeader(7, 0, 5, "controller"), request)
    response = ControlledShutdownResponse(
        remaining_partitions=(RemainingPartition(topic_name="t", partition_index=1),)
    )
    out = encode_response(RequestHeader(7, 0, 5, None), response)
    assert out == (
        b"\x00\x00\x00\x11"
        b"\x00\x00\x00\x05"  # response header v0
        b"\x00\x00"
        b"\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
    )
    assert decode_response(7, 0, out[4:]) == (5, response)


partition_states = st.builds(
    LeaderAndIsrPartitionState,
    topic_name=NAME,
    partition_index=I32,
    controller_epoch=I32,
    leader=I32,
    leader_epoch=I32,
    isr=IDS,
    partition_epoch=I32,
    replicas=IDS,
    is_new=st.booleans(),
)
leader_and_isr = st.builds(
    LeaderAndIsrRequest,
    controller_id=I32,
    controller_epoch=I32,
    broker_epoch=I64,
    partition_states=st.lists(partition_states, max_size=3).map(tuple),
    topic_ids=st.lists(
        st.builds(TopicIdEntry, topic_name=NAME, topic_id=st.uuids()), max_size=2
    ).map(tuple),
    live_leaders=st.lists(
        st.builds(LeaderAndIsrLiveLeader, broker_id=I32, host_name=NAME, port=I32), max_size=2
    ).map(tuple),
)
update_metadata = st.builds(
    UpdateMetadataRequest,
    controller_id=I32,
    controller_epoch=I32,
    broker_epoch=I64,
    partition_states=st.lists(
        st.builds(
            UpdateMetadataPartitionState,
            topic_name=NAME,
            partition_index=I32,
            controller_epoch=I32,
            leader=I32,
            leader_epoch=I32,
            isr=IDS,
            partition_epoch=I32,
            replicas=IDS,
            offline_replicas=IDS,
        ),
        max_size=3,
    ).map(tuple),
    live_brokers=st.lists(
        st.builds(
            UpdateMetadataBroker, id=I32, host=NAME, port=I32, rack=st.one_of(st.none(), NAME)
        ),
        max_size=3,
    ).map(tuple),
)
stop_replica = st.builds(
    StopReplicaRequest,
    controller_id=I32,
    controller_epoch=I32,
    broker_epoch=I64,
    partitions=st.lists(
        st.builds(
            StopReplicaPartition,
            topic_name=NAME,
            partition_index=I32,
            leader_epoch=I32,
            delete_partition=st.booleans(),
        ),
        max_size=3,
    ).map(tuple),
)
partition_errors = st.lists(
    st.builds(
        PartitionError, topic_name=NAME, partition_index=I32, error_code=st.integers(-1, 110)
    ),
    max_size=3,
).map(tuple)
responses = st.one_of(
    st.builds(
        LeaderAndIsrResponse, error_code=st.integers(-1, 110), partition_errors=partition_errors
    ),
    st.builds(
        StopReplicaResponse, error_code=st.integers(-1, 110), partition_errors=partition_errors
    ),
    st.builds(UpdateMetadataResponse, error_code=st.integers(-1, 110)),
    st.builds(
        ControlledShutdownResponse,
        error_code=st.integers(-1, 110),
        remaining_partitions=st.lists(
            st.builds(RemainingPartition, topic_name=NAME, partition_index=I32), max_size=3
        ).map(tuple),
    ),
)


@given(request=st.one_of(leader_and_isr, update_metadata, stop_replica), correlation_id=I32)
def test_requests_round_trip_through_the_codec(request: object, correlation_id: int) -> None:
    header = RequestHeader(request.__api_key__, 0, correlation_id, "c")  # type: ignore[attr-defined]
    (payload,) = FrameDecoder().feed(encode_request(header, request))
    assert decode_request(payload) == (header, request)


@given(response=responses, correlation_id=I32)
def test_responses_round_trip_through_the_codec(response: object, correlation_id: int) -> None:
    api_key = response.__api_key__  # type: ignore[attr-defined]
    wire = encode_response(RequestHeader(api_key, 0, correlation_id), response)
    assert decode_response(api_key, 0, wire[4:]) == (correlation_id, response)


@given(request=leader_and_isr, cut=st.integers(0, 10_000))
def test_truncated_control_requests_are_invalid(request: LeaderAndIsrRequest, cut: int) -> None:
    (payload,) = FrameDecoder().feed(encode_request(RequestHeader(4, 0, 1, None), request))
    body_start = 10
    cut = body_start + cut % (len(payload) - body_start)
    with pytest.raises(InvalidRequestError, match="cannot decode LEADER_AND_ISR v0"):
        decode_request(payload[:cut])


def test_huge_array_count_is_refused_without_allocating() -> None:
    body = b"\x00\x00\x00\x01\x00\x00\x00\x02" + b"\x00" * 8 + b"\x7f\xff\xff\xff"
    with pytest.raises(ControlDecodeError, match="array of 2147483647 items, 0 bytes remain"):
        LeaderAndIsrRequest.read(body, 0)


def test_decode_refuses_trailing_bytes() -> None:
    data = UpdateMetadataResponse(error_code=0).encode() + b"x"
    with pytest.raises(ControlDecodeError, match="1 bytes left after UpdateMetadataResponse"):
        UpdateMetadataResponse.decode(data)


def test_topic_ids_travel_with_leader_and_isr() -> None:
    topic_id = uuid.uuid4()
    request = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=3,
        partition_states=(),
        topic_ids=(TopicIdEntry(topic_name="t", topic_id=topic_id),),
        live_leaders=(),
    )
    assert LeaderAndIsrRequest.decode(request.encode()).topic_ids[0].topic_id == topic_id
