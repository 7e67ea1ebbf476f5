"""ApiVersions (18): the versions this broker serves of each API (KIP-35, KIP-511)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, api_versions_response


class ApiVersionsApi:
    """ApiVersions over the broker's table of served versions."""

    def __init__(self, supported_versions: Mapping[ApiKey, tuple[int, int]]) -> None:
        self.supported_versions = supported_versions

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.API_VERSIONS: self.handle_api_versions}

    def handle_api_versions(self, header: RequestHeader, body: Any) -> Any:
        table = self.supported_versions
        if ApiKey.PRODUCE in table:
            # Kafka 4's answer to KAFKA-18659: Produce is advertised from v0 although v0-v2
            # are refused, because librdkafka before 2.8 sends gzip, snappy and lz4 batches
            # uncompressed ("Broker does not support compression type") to a broker whose
            # Produce range does not include v0 (kcat 1.7 bundles librdkafka 2.0).
            table = {**table, ApiKey.PRODUCE: (0, table[ApiKey.PRODUCE][1])}
        return api_versions_response(header.api_version, table)


__all__ = ["ApiVersionsApi"]
