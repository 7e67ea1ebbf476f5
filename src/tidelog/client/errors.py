"""Exceptions of the client.

::

    TidelogError
     └── ClientError                  root of the client's exceptions
          ├── ClientConnectionError   cannot connect, or the connection broke (pending
          │                           requests fail with it)
          ├── ClientTimeoutError      no response within the request timeout
          ├── NoCompatibleVersionError the broker advertises no version the helper speaks
          ├── AuthenticationFailedError TLS or SASL refused us (wrong password, unknown
          │                           user, untrusted certificate): not retriable
          └── BrokerError             the broker answered with an error code (``.code``)
"""

from __future__ import annotations

from tidelog.errors import ErrorCode, TidelogError


class ClientError(TidelogError):
    """Root of the client's exceptions."""


class ClientConnectionError(ClientError):
    """Connecting failed or the connection was lost."""


class ClientTimeoutError(ClientError):
    """A request got no response in time."""


class NoCompatibleVersionError(ClientError):
    """The broker does not advertise a version of an API that this client speaks."""


class AuthenticationFailedError(ClientError):
    """The broker refused our credentials (SASL_AUTHENTICATION_FAILED, or a TLS handshake
    failure); retrying with the same credentials cannot help."""


class BrokerError(ClientError):
    """A top-level error code from the broker (per-partition codes are returned as values)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name} ({int(code)}){': ' + message if message else ''}")
        self.code = code
