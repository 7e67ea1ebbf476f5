"""Client quota sensors as gauges (KIP-13, KIP-124): Kafka's ``kafka.server:type=Produce``,
``type=Fetch`` and ``type=Request`` sensors, one series per quota entity, read at scrape
time from the quota managers (``tidelog.server.quotas.manager``).

Kafka's MBeans ``kafka.server:type=Produce,user=U,client-id=C`` with the attributes
``byte-rate`` and ``throttle-time`` become ``kafka_server_produce_byte_rate{user,client_id}``
and ``kafka_server_produce_throttle_time{...}`` (the package's rule 1); Request has
``request-time`` (percent of one handler) instead of ``byte-rate``. A label is "" where
the entity has no such component (a user-level quota: ``client_id=""``). Only entities
with a quota and traffic since it was set have series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidelog.server.quotas.manager import ClientQuotaManager, ClientQuotas


class QuotaCollector(Collector):
    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    def collect(self) -> Iterator[Metric]:
        q = self.quotas
        yield from _families("Produce", "byte-rate", "bytes a second produced", q.produce)
        yield from _families("Fetch", "byte-rate", "bytes a second fetched", q.fetch)
        yield from _families(
            "Request", "request-time", "percent of one request handler used", q.request
        )


def _families(
    kind: str, rate_name: str, meaning: str, manager: ClientQuotaManager
) -> Iterator[Metric]:
    prefix = f"kafka_server_{kind.lower()}_"
    mbean = f"kafka.server:type={kind},user=...,client-id=..."
    rate = GaugeMetricFamily(
        prefix + rate_name.replace("-", "_"),
        f"Client quota sensor: {meaning} ({mbean} {rate_name})",
        labels=["user", "client_id"],
    )
    throttle = GaugeMetricFamily(
        prefix + "throttle_time",
        f"Client quota sensor: average throttle time in ms ({mbean} throttle-time)",
        labels=["user", "client_id"],
    )
    for view in manager.sensors():
        labels = list(view.tags)
        rate.add_metric(labels, view.rate)
        throttle.add_metric(labels, view.throttle_time_ms)
    yield rate
    yield throttle


__all__ = ["QuotaCollector"]
