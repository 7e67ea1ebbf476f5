"""ApiVersions (18): the versions this broker serves of each API (KIP-35, KIP-511) and,
from v3, the features it supports and the cluster's finalized ones (KIP-584,
``tidelog.server.metadata.features``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tidelog.protocol.apis import ApiKey, advertised_versions
from tidelog.protocol.codec import RequestHeader, api_versions_response
from tidelog.server.metadata.features import SUPPORTED_FEATURES, FinalizedFeatures


class ApiVersionsApi:
    """ApiVersions over the broker's table of served versions (all but
    ``protocol.apis.UNADVERTISED``) and the finalized features ``features`` gives."""

    def __init__(
        self,
        supported_versions: Mapping[ApiKey, tuple[int, int]],
        features: Callable[[], FinalizedFeatures],
    ) -> None:
        self.supported_versions = supported_versions
        self.features = features

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.API_VERSIONS: self.handle_api_versions}

    def handle_api_versions(self, header: RequestHeader, body: Any) -> Any:
        table = advertised_versions(self.supported_versions)
        if ApiKey.PRODUCE in table:
            # Kafka 4's answer to KAFKA-18659: Produce is advertised from v0 although v0-v2
            # are refused, because librdkafka before 2.8 sends gzip, snappy and lz4 batches
            # uncompressed ("Broker does not support compression type") to a broker whose
            # Produce range does not include v0 (kcat 1.7 bundles librdkafka 2.0).
            table[ApiKey.PRODUCE] = (0, table[ApiKey.PRODUCE][1])
        finalized = self.features()
        return api_versions_response(
            header.api_version,
            table,
            supported_features=SUPPORTED_FEATURES,
            finalized_features=finalized.levels,
            finalized_features_epoch=finalized.epoch,
        )


__all__ = ["ApiVersionsApi"]
