"""Exceptions of the protocol layer: every way a peer's bytes can be wrong.

Bad input from the network is the peer's fault, never a crash (STYLE.md): the codec turns
each failure into one of these, and the server maps them onto an action::

    TidelogError
     └── ProtocolError                 root of this package's exceptions
          ├── FrameTooLargeError       size prefix negative or above socket.request.max.bytes:
          │                            close the connection (the stream cannot be resynced)
          ├── InvalidRequestError      header or body cannot be decoded, unknown API key:
          │    │                       close the connection (Kafka does the same)
          │    └── UnknownApiKeyError
          ├── UnsupportedVersionError  API known, version not advertised: for ApiVersions
          │                            answer v0 with UNSUPPORTED_VERSION and our ranges
          │                            (``encode_api_versions_fallback``), else close
          └── InvalidResponseError     client side: a response cannot be decoded

``InvalidRequestError`` and ``UnsupportedVersionError`` carry the ``RequestHeader`` when it
could be read (``None`` otherwise), so the server can log the API and correlation id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from tidelog.protocol.header import RequestHeader


class ProtocolError(TidelogError):
    """Root of the protocol layer's exceptions."""


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix is negative or larger than the configured maximum."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        if size < 0:
            message = f"frame size {size} is negative"
        else:
            message = f"frame size {size} exceeds socket.request.max.bytes={max_frame_bytes}"
        super().__init__(message)
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class InvalidRequestError(ProtocolError):
    """A request frame cannot be decoded; the connection should be closed."""

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


class UnknownApiKeyError(InvalidRequestError):
    """The request's API key is not one this broker knows."""


class UnsupportedVersionError(ProtocolError):
    """The API is known but the requested version is not advertised."""

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message)
        self.header = header


class InvalidResponseError(ProtocolError):
    """A response frame cannot be decoded (client side)."""
