"""codec: request/response headers, ApiVersions fallback, typed failures (byte-exact)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v4.request import MetadataRequestTopic as MetadataRequestTopicV4
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey, narrow_versions
from tidelog.protocol.codec import (
    RequestHeader,
    api_versions_response,
    decode_request,
    decode_response,
    encode_api_versions_fallback,
    encode_request,
    encode_response,
)
from tidelog.protocol.errors import (
    InvalidRequestError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from tidelog.protocol.framing import FrameDecoder


def _unframe(data: bytes) -> bytes:
    (payload,) = FrameDecoder().feed(data)
    return payload


# --- byte-exact headers -------------------------------------------------------------------

# ApiVersions v0 uses request header v1: no tagged fields after client_id.
API_VERSIONS_V0 = (
    b"\x00\x00\x00\x0c"  # size
    b"\x00\x12\x00\x00"  # api key 18, version 0
    b"\x00\x00\x00\x2a"  # correlation id 42
    b"\x00\x02ab"  # client_id "ab"
)
# ApiVersions v3 uses request header v2: client_id stays a legacy string, then tags.
API_VERSIONS_V3 = (
    b"\x00\x00\x00\x15"
    b"\x00\x12\x00\x03"
    b"\x00\x00\x00\x2a"
    b"\xff\xff"  # null client_id
    b"\x00"  # header tagged fields
    b"\x04rdk\x052.16"  # compact strings
    b"\x00"  # body tagged fields
)


@pytest.mark.parametrize(
    ("header", "body", "wire"),
    [
        (RequestHeader(18, 0, 42, "ab"), ApiVersionsRequestV0(), API_VERSIONS_V0),
        (
            RequestHeader(18, 3, 42, None),
            ApiVersionsRequestV3(client_software_name="rdk", client_software_version="2.16"),
            API_VERSIONS_V3,
        ),
    ],
)
def test_request_wire_format(header: RequestHeader, body: object, wire: bytes) -> None:
    assert encode_request(header, body) == wire
    assert decode_request(_unframe(wire)) == (header, body)


def test_unknown_header_tags_are_skipped() -> None:
    payload = _unframe(API_VERSIONS_V3)
    # Replace the empty header tag section (after the null client_id) with one unknown tag.
    tagged = payload[:10] + b"\x01\x07\x02zz" + payload[11:]
    header, body = decode_request(tagged)
    assert header == RequestHeader(18, 3, 42, None)
    assert body.client_software_name == "rdk"


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    header = RequestHeader(18, 3, 7, "c")
    wire = encode_response(header, api_versions_response(3, {ApiKey.PRODUCE: (3, 9)}))
    assert wire == (
        b"\x00\x00\x00\x13"
        b"\x00\x00\x00\x07"  # correlation id, no header tagged fields
        b"\x00\x00"  # error code
        b"\x02"  # compact array of 1
        b"\x00\x00\x00\x03\x00\x09\x00"  # produce 3..9, entry tags
        b"\x00\x00\x00\x00"  # throttle time
        b"\x00"  # body tags
    )
    correlation_id, body = decode_response(18, 3, _unframe(wire))
    assert correlation_id == 7
    assert isinstance(body, ApiVersionsResponseV3)
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(0, 3, 9)]


def test_flexible_response_has_header_v1() -> None:
    # Metadata v12 response: correlation id then an empty tag section.
    from kio.schema.metadata.v12.response import MetadataResponse

    body = MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=(),
    )
    wire = encode_response(RequestHeader(3, 12, 9, None), body)
    assert wire[4:9] == b"\x00\x00\x00\x09\x00"
    assert decode_response(3, 12, _unframe(wire)) == (9, body)


def test_api_versions_fallback_is_v0_with_unsupported_version_and_our_ranges() -> None:
    table = narrow_versions(only={ApiKey.API_VERSIONS, ApiKey.FETCH})
    wire = encode_api_versions_fallback(RequestHeader(18, 5, 3, "x"), table)
    assert wire == (
        b"\x00\x00\x00\x16"
        b"\x00\x00\x00\x03"
        b"\x00\x23"  # UNSUPPORTED_VERSION
        b"\x00\x00\x00\x02"
        b"\x00\x01\x00\x04\x00\x12"  # fetch 4..18
        b"\x00\x12\x00\x00\x00\x04"  # api versions 0..4
    )


# --- failures the server maps onto actions --------------------------------------------------


def test_api_versions_newer_than_known_is_unsupported_with_its_header() -> None:
    # A v5 request with an unknown body layout: only the header is read.
    payload = b"\x00\x12\x00\x05\x00\x00\x00\x2a\x00\x01c\x00\xde\xad"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(payload)
    assert info.value.header == RequestHeader(18, 5, 42, "c")
    assert "API_VERSIONS v5 is not supported (supported: v0-v4)" in str(info.value)


def test_version_below_the_advertised_range_is_unsupported() -> None:
    body = MetadataRequestV4(topics=(), allow_auto_topic_creation=True)
    wire = encode_request(RequestHeader(3, 4, 1, None), body)
    narrow = narrow_versions(overrides={ApiKey.METADATA: (5, 13)})
    with pytest.raises(UnsupportedVersionError, match=r"METADATA v4 is not supported"):
        decode_request(_unframe(wire), narrow)
    assert decode_request(_unframe(wire))[1] == body


def test_api_not_in_the_table_is_unsupported() -> None:
    payload = b"\x00\x29\x00\x00\x00\x00\x00\x01\xff\xff\x00\x01g"  # DescribeDelegationToken
    with pytest.raises(UnsupportedVersionError, match="DESCRIBE_DELEGATION_TOKEN is not supported"):
        decode_request(payload)


def test_unknown_api_key_is_invalid() -> None:
    payload = b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff"
    with pytest.raises(UnknownApiKeyError, match="unknown API key 999") as info:
        decode_request(payload)
    assert info.value.header == RequestHeader(999, 0, 1, None)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "shorter than a request header"),
        (b"\x00\x12\x00\x00\x00\x00\x00", "shorter than a request header"),
        (b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05ab", "client_id length 5 is invalid"),
        (b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xfe", "client_id length -2 is invalid"),
        (b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x01\xff", "client_id is not UTF-8"),
    ],
)
def test_bad_header_is_invalid_without_a_header(payload: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message) as info:
        decode_request(payload)
    assert info.value.header is None


def test_truncated_body_is_invalid_and_names_the_api() -> None:
    body = MetadataRequestV12(
        topics=(MetadataRequestTopicV12(topic_id=uuid.UUID(int=12345), name="t"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    payload = _unframe(encode_request(RequestHeader(3, 12, 5, "c"), body))
    assert decode_request(payload)[1] == body
    for cut in range(11, len(payload)):
        with pytest.raises(InvalidRequestError, match="cannot decode METADATA v12") as info:
            decode_request(payload[:cut])
        assert info.value.header == RequestHeader(3, 12, 5, "c")


def test_encode_response_refuses_the_wrong_body_type() -> None:
    with pytest.raises(ValueError, match="is not the response to METADATA v4"):
        encode_response(RequestHeader(3, 4, 1, None), api_versions_response(0))


def test_supported_versions_advertise_metadata_from_v4() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.METADATA][0] == 4
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE][0] == 3
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][0] == 4
    assert SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == (0, 4)


def test_narrow_versions_rejects_an_inverted_range() -> None:
    with pytest.raises(ValueError, match="bad version range"):
        narrow_versions(overrides={ApiKey.FETCH: (9, 4)})
    narrowed = narrow_versions(overrides={ApiKey.FETCH: None, ApiKey.FIND_COORDINATOR: (0, 3)})
    assert ApiKey.FETCH not in narrowed
    assert narrowed[ApiKey.FIND_COORDINATOR] == (0, 3)


def test_error_code_of_the_fallback_is_kafkas() -> None:
    wire = encode_api_versions_fallback(RequestHeader(18, 7, 1, None))
    _cid, body = decode_response(18, 0, _unframe(wire))
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_metadata_v4_roundtrip() -> None:
    body = MetadataRequestV4(
        topics=(MetadataRequestTopicV4(name="a"),), allow_auto_topic_creation=False
    )
    header = RequestHeader(3, 4, 2**31 - 1, "")
    assert decode_request(_unframe(encode_request(header, body))) == (header, body)


# --- lengths kio would trust, and unknown tagged fields --------------------------------------

# CreateTopics v5 whose `assignments` compact array claims 5,608,709,957 items: kio would
# try to allocate 44 GB for it and abort the process (an input of the decode fuzz).
HUGE_ARRAY_CREATE_TOPICS = bytes.fromhex(
    "0013000500000007000462757a7a00"  # header v2: CreateTopics v5, client "buzz", no tags
    "02026e000000030012c6beb8f21474656e74696f6e2e6d73023100000000ea600000"
)


@pytest.mark.parametrize(
    ("count_varint", "message"),
    [
        ("c6beb8f214", "varint 5608709958 does not fit 32 bits"),
        ("ffffffff0f", r"array of 4294967294 items but only 20 bytes remain"),
        ("8080808001", r"array of 268435455 items but only 20 bytes remain"),
    ],
)
def test_a_length_beyond_the_frame_is_invalid_not_an_allocation(
    count_varint: str, message: str
) -> None:
    payload = HUGE_ARRAY_CREATE_TOPICS.replace(
        bytes.fromhex("c6beb8f214"), bytes.fromhex(count_varint)
    )
    with pytest.raises(InvalidRequestError, match=message) as info:
        decode_request(payload)
    assert info.value.header == RequestHeader(19, 5, 7, "buzz")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x05abcd\x06", "length 5 exceeds the 0 bytes that remain"),  # 2nd string cut
        (b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x1f", "does not fit 32 bits"),
        (b"\x02a\x02b\x05\x00", "5 tagged fields but only 1 bytes remain"),
    ],
)
def test_bad_lengths_in_a_flexible_body(body: bytes, message: str) -> None:
    payload = b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x00" + body
    with pytest.raises(InvalidRequestError, match=message):
        decode_request(payload)


def test_unknown_tagged_fields_in_a_body_are_skipped() -> None:
    # ApiVersions v3 body with two unknown tags (9 and 30) after the two compact strings.
    payload = b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x00" + b"\x02a\x02b\x02\x09\x01z\x1e\x00"
    header, body = decode_request(payload)
    assert header == RequestHeader(18, 3, 1, None)
    assert body == ApiVersionsRequestV3(client_software_name="a", client_software_version="b")


def test_unknown_tags_are_dropped_and_known_ones_kept() -> None:
    # Fetch v12 with `cluster_id` (tag 0, known) and tag 7 (unknown) at the top level.
    from kio.schema.fetch.v12.request import FetchRequest

    body = FetchRequest(
        cluster_id="c1",
        max_wait=datetime.timedelta(milliseconds=5),
        min_bytes=1,
        topics=(),
        forgotten_topics_data=(),
    )
    payload = _unframe(encode_request(RequestHeader(1, 12, 3, None), body))
    # The body ends with its tagged section: count 1, tag 0, size 3, compact "c1".
    assert payload.endswith(b"\x01\x00\x03\x03c1")
    with_unknown = payload[: -len(b"\x01\x00\x03\x03c1")] + b"\x02\x00\x03\x03c1\x07\x02hi"
    assert decode_request(with_unknown) == (RequestHeader(1, 12, 3, None), body)


def test_api_versions_features_from_v3() -> None:
    supported = {"a": (0, 0), "b": (1, 2)}
    v4 = api_versions_response(4, {}, supported_features=supported, finalized_features={"b": 2},
                               finalized_features_epoch=5)  # fmt: skip
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("a", 0, 0),
        ("b", 1, 2),
    ]
    assert [(f.name, f.max_version_level) for f in v4.finalized_features] == [("b", 2)]
    assert v4.finalized_features_epoch == 5
    # v0-v3 leave out features whose minimum is 0 (the schema's rule).
    v3 = api_versions_response(3, {}, supported_features=supported, finalized_features_epoch=5)
    assert [f.name for f in v3.supported_features] == ["b"]
    assert api_versions_response(2, {}, supported_features=supported).api_keys == ()
