"""The request header every Kafka request starts with (header v1/v2), as a value.

Its own module so that the exceptions (``tidelog.protocol.errors``) can carry one without
importing the codec that raises them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.protocol.apis import ApiKey


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Request header v1/v2 (the tagged fields of v2 carry nothing we use)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None

    @property
    def api_name(self) -> str:
        """``ApiKey`` name when known, else the number (for logs)."""
        try:
            return ApiKey(self.api_key).name
        except ValueError:
            return str(self.api_key)
