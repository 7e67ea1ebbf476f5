"""The bench's confluent-kafka clients with a cluster's client settings (TLS, SASL) on top
of the settings each row describes, in the worker processes that make them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

#: The clients the workers make (``from confluent_kafka import Producer`` in the worker).
_CLIENTS: Final = ("Producer", "Consumer")


@contextlib.contextmanager
def client_settings(settings: Mapping[str, str]) -> Iterator[None]:
    """Within the block, every confluent-kafka Producer and Consumer made through ``from
    confluent_kafka import ...`` gets ``settings`` on top of its own configuration
    (nothing changes when ``settings`` is empty). Meant for a worker process: the names
    are swapped in the ``confluent_kafka`` module for the block's duration."""
    if not settings:
        yield
        return
    import confluent_kafka  # noqa: PLC0415 - in the worker process, from the bench extra

    extra = dict(settings)
    saved: list[tuple[str, Any]] = []

    def merged(cls: Any) -> Callable[..., Any]:
        def make(conf: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
            return cls({**conf, **extra}, *args, **kwargs)

        return make

    try:
        for name in _CLIENTS:
            original = getattr(confluent_kafka, name)
            saved.append((name, original))
            setattr(confluent_kafka, name, merged(original))
        yield
    finally:
        for name, original in reversed(saved):
            setattr(confluent_kafka, name, original)


def run_with_settings(
    settings: Mapping[str, str], fn: Callable[..., dict[str, Any]], *args: Any
) -> dict[str, Any]:
    """``fn(*args)`` with :func:`client_settings`; a top-level function, so a spawned
    pool runs it (``fn`` must be top-level too)."""
    start = time.process_time()  # every thread of this process: librdkafka's too
    with client_settings(settings):
        result = fn(*args)
    result["client_cpu_s"] = time.process_time() - start
    return result
