"""Client quota managers: the rate sensors and the throttle times (KIP-13, KIP-124, KIP-219).

Theory of operation (Kafka's ``ClientQuotaManager`` and ``ClientRequestQuotaManager``):

1. One manager per quota key: produce (``producer_byte_rate``: bytes of Produce requests),
   fetch (``consumer_byte_rate``: bytes of consumers' Fetch answers) and request
   (``request_percentage``: request handler time, recorded as percent-seconds so that its
   rate is a percentage of one handler). A manager with no entity setting its key is
   disabled and records nothing (Kafka's ``quotasEnabled``).
2. A request's bound and sensor come from ``entity.find_quota`` (precedence, rule 3 there).
   Each sensor is a ``WindowedRate`` over ``quota.window.num`` samples of
   ``quota.window.size.seconds`` (Kafka's ``Rate`` over a ``SampledStat``).
3. ``record`` adds the value first, then measures (Kafka's ``Sensor.record`` with
   ``checkQuotas``): while the rate is above the bound the throttle time is
   ``(rate - bound) / bound * span`` ms, ``span`` being the window the rate was measured
   over (``QuotaUtils.throttleTime``). Byte quotas are not capped; the request quota's
   throttle is capped at one window (``ClientRequestQuotaManager.maxThrottleTimeMs``).
   ``throttle_ms`` measures without recording.
4. The caller answers at once with the throttle time and mutes the connection for it
   (KIP-219); the client holds back too. Nothing here does IO: time comes from ``clock``
   (milliseconds).
5. Each sensor also keeps Kafka's ``throttle-time`` average (of the throttle times it
   answered, zeros included) for the metrics (``sensors``). A sensor not recorded into for
   an hour is dropped (Kafka's inactive sensor expiry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.server.quotas.entity import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    Tags,
    find_quota,
)
from tidelog.server.replica.quota import WindowedRate, monotonic_ms
from tidelog.zk.users import sanitize

#: Rule 5: sensors idle this long are dropped.
INACTIVE_SENSOR_EXPIRY_MS = 3_600_000


@dataclass(slots=True)
class QuotaSensor:
    """One entity's rate (rule 2) and its throttle-time average (rule 5)."""

    bound: float
    rate: WindowedRate
    throttle_sum: WindowedRate
    throttle_count: WindowedRate
    last_record_ms: int


@dataclass(frozen=True, slots=True)
class SensorView:
    """What the metrics show of one sensor."""

    tags: Tags
    bound: float
    rate: float
    throttle_time_ms: float


class ClientQuotaManager:
    """One quota key's sensors (rules 1-3, 5)."""

    def __init__(
        self,
        key: str,
        *,
        window_num: int,
        window_size_s: int,
        max_throttle_ms: int | None = None,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.key = key
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._quotas: Mapping[QuotaEntity, Mapping[str, float]] = {}
        self.enabled = False
        self._sensors: dict[Tags, QuotaSensor] = {}
        #: (sanitized user, raw client-id) -> find_quota's answer, until the quotas change.
        self._resolved: dict[tuple[str, str], tuple[float, Tags] | None] = {}
        self._last_expiry_ms = 0

    def update(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """The whole quota table changed (a config change): re-resolve from now on."""
        self._quotas = quotas
        self.enabled = any(self.key in values for values in quotas.values())
        self._resolved.clear()
        if not self.enabled:
            self._sensors.clear()

    def _resolve(self, user: str, raw_client_id: str) -> tuple[float, Tags] | None:
        cache_key = (user, raw_client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        found = find_quota(self._quotas, self.key, user, sanitize(raw_client_id), raw_client_id)
        if len(self._resolved) > 10_000:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def _sensor(self, bound: float, tags: Tags, now_ms: int) -> QuotaSensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = QuotaSensor(
                bound,
                WindowedRate(self.window_num, self.window_ms),
                WindowedRate(self.window_num, self.window_ms),
                WindowedRate(self.window_num, self.window_ms),
                now_ms,
            )
        sensor.bound = bound
        return sensor

    def record(self, user: str, client_id: str, value: float) -> int:
        """Rule 3: count ``value`` for (sanitized ``user``, raw ``client_id``); the
        throttle time in ms (0: within the quota, or no quota)."""
        if not self.enabled:
            return 0
        found = self._resolve(user, client_id)
        if found is None:
            return 0
        now_ms = self._clock()
        sensor = self._sensor(found[0], found[1], now_ms)
        sensor.rate.record(value, now_ms)
        sensor.last_record_ms = now_ms
        throttle = self._throttle(sensor, now_ms)
        sensor.throttle_sum.record(throttle, now_ms)
        sensor.throttle_count.record(1, now_ms)
        self._maybe_expire(now_ms)
        return throttle

    def throttle_ms(self, user: str, client_id: str) -> int:
        """The throttle time the sensor asks for now, without recording anything."""
        if not self.enabled:
            return 0
        found = self._resolve(user, client_id)
        if found is None:
            return 0
        sensor = self._sensors.get(found[1])
        if sensor is None:
            return 0
        sensor.bound = found[0]
        return self._throttle(sensor, self._clock())

    def _throttle(self, sensor: QuotaSensor, now_ms: int) -> int:
        rate = sensor.rate.measure(now_ms)
        bound = sensor.bound
        if rate <= bound:
            return 0
        span_ms = sensor.rate.span_ms(now_ms)
        throttle = span_ms if bound <= 0 else round((rate - bound) / bound * span_ms)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return int(throttle)

    def _maybe_expire(self, now_ms: int) -> None:
        if now_ms - self._last_expiry_ms < 60_000:
            return
        self._last_expiry_ms = now_ms
        for tags, sensor in list(self._sensors.items()):
            if now_ms - sensor.last_record_ms >= INACTIVE_SENSOR_EXPIRY_MS:
                del self._sensors[tags]

    def sensors(self) -> list[SensorView]:
        """Rule 5: every live sensor's rate and average throttle time, by tags."""
        now_ms = self._clock()
        out = []
        for tags, sensor in sorted(self._sensors.items()):
            count = sensor.throttle_count.total(now_ms)
            average = sensor.throttle_sum.total(now_ms) / count if count else 0.0
            out.append(SensorView(tags, sensor.bound, sensor.rate.measure(now_ms), average))
        return out


class ClientQuotas:
    """A broker's three client quota managers (Kafka's ``QuotaManagers``) over one table of
    entity quotas."""

    def __init__(
        self,
        *,
        window_num: int = 11,
        window_size_s: int = 1,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        def manager(key: str, cap: int | None = None) -> ClientQuotaManager:
            return ClientQuotaManager(
                key,
                window_num=window_num,
                window_size_s=window_size_s,
                max_throttle_ms=cap,
                clock=clock,
            )

        self.produce = manager(PRODUCER_BYTE_RATE)
        self.fetch = manager(CONSUMER_BYTE_RATE)
        self.request = manager(REQUEST_PERCENTAGE, window_size_s * 1000)
        #: The entities' quotas as last loaded (``update``).
        self.entities: dict[QuotaEntity, dict[str, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.produce.enabled or self.fetch.enabled or self.request.enabled

    def update(self, entities: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        table = {entity: dict(values) for entity, values in entities.items() if values}
        self.entities = table
        for manager in (self.produce, self.fetch, self.request):
            manager.update(table)


__all__ = [
    "INACTIVE_SENSOR_EXPIRY_MS",
    "ClientQuotaManager",
    "ClientQuotas",
    "QuotaSensor",
    "SensorView",
]
