"""Request/response codec: Kafka headers by hand, bodies by kio (or our control schemas).

Theory of operation:

1. A request frame (size prefix already removed by ``FrameDecoder``) starts with request
   header v1: ``api_key int16, api_version int16, correlation_id int32, client_id
   nullable int16-string``. Flexible APIs use header v2 = v1 + tagged fields; which one is
   taken from the body schema (kio's ``__header_schema__``). Unknown header tags are skipped.
2. The header is decoded before the body so that every failure can name the API and the
   correlation id. ApiVersions newer than kio knows is *not* an invalid request: KIP-511 says
   to answer ApiVersions v0 with UNSUPPORTED_VERSION and our ranges, which is what
   ``encode_api_versions_fallback`` writes; the client then retries with a version we know.
3. Every failure to decode a peer's bytes becomes a ``ProtocolError`` subclass
   (``tidelog.protocol.errors``), never another exception: kio's decoder is native and
   raises assorted types (``BufferUnderflow``, ``KeyError`` for unknown tagged fields,
   ``UnicodeDecodeError``...), so ``decode_request`` wraps *any* exception from it. Unknown
   tagged fields in a body are legal (the spec says skip them), and kio trusts length
   fields (a huge array length makes it abort the process): so every kio body is first
   walked by ``tidelog.protocol.schema_walk``, which checks each length against the bytes
   that remain and strips unknown tagged fields.
4. Responses: ApiVersions always uses response header v0 (so a client that sent a version we
   do not know can still read it); others follow their schema: v0 = correlation id, v1 = v0
   + empty tagged fields. Every encoder returns the whole frame, size prefix included.
5. kio refuses writable buffers: frames are ``bytes`` (``FrameDecoder`` returns bytes).

Schemas take seconds of CPU to build for a whole version table (about 25 ms per API version);
``warm_up_steps`` builds them one at a time so a server can do it in the background after it
starts listening. A codec not yet built is built on first use and cached.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer

from tidelog.errors import ErrorCode
from tidelog.protocol import control, schema_walk
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.errors import (
    InvalidRequestError,
    InvalidResponseError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from tidelog.protocol.framing import SIZE_PREFIX_BYTES
from tidelog.protocol.header import RequestHeader
from tidelog.protocol.varint import read_uvarint

_HEADER_FIXED = struct.Struct(">hhih")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")

#: The ApiVersions version every client can read (KIP-511 fallback).
API_VERSIONS_FALLBACK_VERSION: Final = 0

__all__ = [
    "API_VERSIONS_FALLBACK_VERSION",
    "EncodedRequest",
    "RequestHeader",
    "api_versions_response",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_api_versions_fallback",
    "encode_request",
    "encode_response",
    "response_correlation_id",
    "skip_tagged_fields",
    "warm_up",
    "warm_up_steps",
]


Reader = Callable[[bytes, int], tuple[Any, int]]


@dataclass(frozen=True, slots=True)
class _BodyCodec:
    """How to read/write one (api key, version) body, with its header flexibility."""

    schema: type[Any]
    read: Reader
    write: Callable[[io.BytesIO, Any], None]
    flexible_header: bool
    #: kio bodies are walked before kio reads them (``schema_walk``); ours check themselves.
    walk: bool = True


_request_codecs: dict[tuple[int, int], _BodyCodec | None] = {}
_response_codecs: dict[tuple[int, int], _BodyCodec | None] = {}


def _write_control(buf: io.BytesIO, body: Any) -> None:
    buf.write(body.encode())


def _build_codec(api_key: int, api_version: int, *, request: bool) -> _BodyCodec | None:
    own = (control.REQUEST_TYPES if request else control.RESPONSE_TYPES).get((api_key, api_version))
    if own is not None:
        return _BodyCodec(
            schema=own,
            read=own.read,
            write=_write_control,
            flexible_header=False,
            walk=False,
        )
    if api_key in control.CONTROL_API_KEYS:
        return None
    try:
        schema: type[Any] = (load_request_schema if request else load_response_schema)(
            api_key, api_version
        )
    except Exception:  # kio's UnknownAPIKey / UnknownEntity: not a version kio has
        return None
    header_version = schema.__header_schema__.__version__
    return _BodyCodec(
        schema=schema,
        read=entity_reader(schema),
        write=entity_writer(schema),
        flexible_header=header_version == (2 if request else 1),
    )


def _request_codec(api_key: int, api_version: int) -> _BodyCodec | None:
    key = (api_key, api_version)
    try:
        return _request_codecs[key]
    except KeyError:
        codec = _request_codecs[key] = _build_codec(api_key, api_version, request=True)
        return codec


def _response_codec(api_key: int, api_version: int) -> _BodyCodec | None:
    key = (api_key, api_version)
    try:
        return _response_codecs[key]
    except KeyError:
        codec = _response_codecs[key] = _build_codec(api_key, api_version, request=False)
        return codec


def warm_up(table: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS) -> int:
    """Build request and response codecs for every version in ``table``; returns how many.

    Takes several seconds of CPU for the whole table (kio builds its schema dataclasses on
    import); a server should use ``warm_up_steps`` in the background instead.
    """
    return sum(warm_up_steps(table))


def warm_up_steps(table: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS) -> Iterator[int]:
    """Build the codecs of ``table`` one (api, version) at a time, newest versions first
    (the ones current clients send), yielding 1 for each request codec built, so a caller
    can interleave the work with serving. Codecs not yet built are built on first use."""
    for version_rank in range(max((high - low for low, high in table.values()), default=-1) + 1):
        for api_key, (low, high) in table.items():
            version = high - version_rank
            if version < low:
                continue
            built = _request_codec(api_key, version) is not None
            _response_codec(api_key, version)
            yield int(built)


# --- requests (server side) ------------------------------------------------------------


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """Skip a tagged-fields section (count, then tag/size/data each); returns the new pos."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ValueError("tagged field runs past the end of the buffer")
    return pos


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """The v1 part of the header -> (header, position after client_id).

    Raises ``InvalidRequestError`` (without a header) when it is truncated or malformed.
    """
    if len(frame) < _HEADER_FIXED.size:
        raise InvalidRequestError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_length = _HEADER_FIXED.unpack_from(frame)
    pos = _HEADER_FIXED.size
    client_id: str | None
    if client_id_length == -1:
        client_id = None
    elif client_id_length < -1 or pos + client_id_length > len(frame):
        raise InvalidRequestError(
            f"request header's client_id length {client_id_length} is invalid "
            f"(api key {api_key}, correlation id {correlation_id})"
        )
    else:
        try:
            client_id = frame[pos : pos + client_id_length].decode()
        except UnicodeDecodeError:
            raise InvalidRequestError(
                f"request header's client_id is not UTF-8 "
                f"(api key {api_key}, correlation id {correlation_id})"
            ) from None
        pos += client_id_length
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request(
    frame: bytes | bytearray | memoryview,
    supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
) -> tuple[RequestHeader, Any]:
    """Decode one request frame -> (header, body: a kio entity or a control message).

    Raises ``UnknownApiKeyError`` / ``InvalidRequestError`` (close the connection) or
    ``UnsupportedVersionError`` (answer ApiVersions with the fallback, else close); nothing
    else escapes for any input. ``frame`` should be ``bytes``: anything else is copied once,
    since kio refuses writable buffers.
    """
    data = frame if type(frame) is bytes else bytes(frame)
    header, pos = decode_request_header(data)
    api_key = header.api_key
    try:
        known = ApiKey(api_key)
    except ValueError:
        raise UnknownApiKeyError(f"unknown API key {api_key}", header) from None
    versions = supported.get(known)
    if versions is None:
        raise UnsupportedVersionError(f"API {known.name} is not supported", header)
    if not versions[0] <= header.api_version <= versions[1]:
        raise UnsupportedVersionError(
            f"{known.name} v{header.api_version} is not supported "
            f"(supported: v{versions[0]}-v{versions[1]})",
            header,
        )
    codec = _request_codec(api_key, header.api_version)
    if codec is None:
        # The table advertises a version no schema exists for: our configuration bug,
        # but the client sees it as unsupported rather than a crash.
        raise UnsupportedVersionError(f"{known.name} v{header.api_version} has no schema", header)
    try:
        if codec.flexible_header:
            pos = skip_tagged_fields(data, pos)
        if codec.walk:
            # kio trusts length fields (a huge one aborts the process) and raises on unknown
            # tagged fields: walk the body first, and drop unknown tags (rule 3).
            cleaned = schema_walk.check_body(codec.schema, data, pos)
            if cleaned is not None:
                data, pos = cleaned, 0
        body, _size = codec.read(data, pos)
    except Exception as exc:
        raise InvalidRequestError(
            f"cannot decode {known.name} v{header.api_version} request: "
            f"{type(exc).__name__}: {exc}",
            header,
        ) from exc
    return header, body


# --- responses (server side) -----------------------------------------------------------


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """The whole response frame for ``body``, answering the request ``header``.

    ``body`` must be the response schema of the request's API and version (a mismatch is a
    bug: ``ValueError``).
    """
    codec = _response_codec(header.api_key, header.api_version)
    if codec is None or type(body) is not codec.schema:
        raise ValueError(
            f"{type(body).__name__} is not the response to {header.api_name} v{header.api_version}"
        )
    buf = io.BytesIO()
    buf.write(_SIZE_AND_CORRELATION.pack(0, header.correlation_id))
    if codec.flexible_header:
        buf.write(b"\x00")
    codec.write(buf, body)
    out = buf.getbuffer()
    _INT32.pack_into(out, 0, len(out) - SIZE_PREFIX_BYTES)
    del out
    return buf.getvalue()


def api_versions_response(
    version: int,
    table: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
    *,
    error_code: ErrorCode = ErrorCode.NONE,
    throttle_time_ms: int = 0,
    supported_features: Mapping[str, tuple[int, int]] | None = None,
    finalized_features: Mapping[str, int] | None = None,
    finalized_features_epoch: int = -1,
) -> Any:
    """An ApiVersions response body (kio entity) of ``version`` advertising ``table`` and,
    from v3 (KIP-584), the features: ``supported_features`` (name -> min, max level; below
    v4 those with minimum 0 are left out, the schema's rule) and the finalized ones (name ->
    level) with their epoch."""
    schema = load_response_schema(ApiKey.API_VERSIONS, version)
    module = __import__(schema.__module__, fromlist=["ApiVersion"])
    api_keys = tuple(
        module.ApiVersion(api_key=int(key), min_version=low, max_version=high)
        for key, (low, high) in sorted(table.items())
    )
    kwargs: dict[str, Any] = {"error_code": KioErrorCode(int(error_code)), "api_keys": api_keys}
    if version >= 1:
        kwargs["throttle_time"] = datetime.timedelta(milliseconds=throttle_time_ms)
    if version >= 3:
        kwargs["supported_features"] = tuple(
            module.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high) in sorted((supported_features or {}).items())
            if version >= 4 or low >= 1
        )
        kwargs["finalized_features"] = tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted((finalized_features or {}).items())
        )
        kwargs["finalized_features_epoch"] = finalized_features_epoch
    return schema(**kwargs)


def encode_api_versions_fallback(
    header: RequestHeader, table: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS
) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION (35) and our ranges (KIP-511), framed.

    The answer to an ApiVersions request whose version we do not support; librdkafka then
    retries with v0, kafka-python with v2 (PROTOCOL_NOTES.md).
    """
    body = api_versions_response(
        API_VERSIONS_FALLBACK_VERSION, table, error_code=ErrorCode.UNSUPPORTED_VERSION
    )
    fallback_header = RequestHeader(
        ApiKey.API_VERSIONS, API_VERSIONS_FALLBACK_VERSION, header.correlation_id
    )
    return encode_response(fallback_header, body)


# --- client side -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A request body already encoded, by a hand-written encoder for a hot request (a
    follower's Fetch, ``tidelog.client.fetch``): ``encode_request`` frames it with its header
    as it does a kio entity."""

    api_key: int
    api_version: int
    body: bytes


def encode_request(header: RequestHeader, body: Any) -> bytes:
    """The whole request frame (size prefix, header v1/v2 per the schema, body)."""
    codec = _request_codec(header.api_key, header.api_version)
    encoded = isinstance(body, EncodedRequest)
    if encoded:
        fits = (body.api_key, body.api_version) == (header.api_key, header.api_version)
    else:
        fits = codec is not None and type(body) is codec.schema
    if codec is None or not fits:
        raise ValueError(
            f"{type(body).__name__} is not a {header.api_name} v{header.api_version} request"
        )
    buf = io.BytesIO()
    buf.write(_INT32.pack(0))
    buf.write(_HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id, -1)[:8])
    if header.client_id is None:
        buf.write(_INT16.pack(-1))
    else:
        client_id = header.client_id.encode()
        buf.write(_INT16.pack(len(client_id)))
        buf.write(client_id)
    if codec.flexible_header:
        buf.write(b"\x00")
    if encoded:
        buf.write(body.body)
    else:
        codec.write(buf, body)
    out = buf.getbuffer()
    _INT32.pack_into(out, 0, len(out) - SIZE_PREFIX_BYTES)
    del out
    return buf.getvalue()


def response_correlation_id(frame: bytes) -> int:
    """The correlation id of a response frame (the first 4 bytes of every header)."""
    if len(frame) < 4:
        raise InvalidResponseError(f"response of {len(frame)} bytes has no correlation id")
    return int(_INT32.unpack_from(frame)[0])


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Any]:
    """Decode a response frame (size prefix removed) -> (correlation id, body).

    Raises ``InvalidResponseError`` for anything that cannot be decoded.
    """
    data = frame if type(frame) is bytes else bytes(frame)
    correlation_id = response_correlation_id(data)
    codec = _response_codec(api_key, api_version)
    if codec is None:
        raise InvalidResponseError(f"no response schema for API {api_key} v{api_version}")
    try:
        pos = skip_tagged_fields(data, 4) if codec.flexible_header else 4
        if codec.walk:  # a broken broker must not be able to abort the client either
            cleaned = schema_walk.check_body(codec.schema, data, pos)
            if cleaned is not None:
                data, pos = cleaned, 0
        body, _size = codec.read(data, pos)
    except Exception as exc:
        raise InvalidResponseError(
            f"cannot decode API {api_key} v{api_version} response: {type(exc).__name__}: {exc}"
        ) from exc
    return correlation_id, body
