"""KIP-951 leader discovery: a Produce (v10+) or Fetch (v16+) partition answered
NOT_LEADER_OR_FOLLOWER (Fetch: also FENCED_LEADER_EPOCH) carries ``CurrentLeader`` (the
leader's id and epoch as this broker knows them) and the response's ``NodeEndpoints`` the
address of each leader named, on the listener the request came in on, so the client can go
straight to the new leader instead of refreshing its metadata first (Kafka's
``KafkaApis.getCurrentLeader``). A leader that is not alive, or has no endpoint on that
listener, is named without an endpoint; an unknown partition gets ``(-1, -1)`` (Kafka's
default: no hint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.responses import NodeEndpoint
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.fetch_session import SessionPartition
from tidelog.server.replica.reads import FetchResult, ProduceResult

Hints = dict[TopicPartition, tuple[int, int]]

#: The first versions whose responses carry the hints.
PRODUCE_HINT_VERSION: Final = 10
FETCH_HINT_VERSION: Final = 16
#: The errors that carry a hint (Kafka's handleProduceRequest / handleFetchRequest).
PRODUCE_HINT_ERRORS: Final = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER)})
FETCH_HINT_ERRORS: Final = frozenset(
    {int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)}
)


def leader_hints(
    backend: MetadataBackend, tps: Iterable[TopicPartition], own_address: tuple[str, int]
) -> tuple[dict[TopicPartition, tuple[int, int]], list[NodeEndpoint]]:
    """Each of ``tps``' ``(leader id, leader epoch)``, and the endpoints of those leaders
    (one each, by node id)."""
    hints: dict[TopicPartition, tuple[int, int]] = {}
    endpoints: dict[int, NodeEndpoint] = {}
    for tp in tps:
        leader, epoch, endpoint = backend.current_leader(tp, own_address)
        hints[tp] = (leader, epoch)
        if endpoint is not None:
            endpoints[endpoint.node_id] = endpoint
    return hints, [endpoints[k] for k in sorted(endpoints)]


def produce_hints(
    backend: MetadataBackend,
    own_address: Callable[[], tuple[str, int]],
    version: int,
    final: Mapping[TopicPartition, ProduceResult],
) -> tuple[Hints, list[NodeEndpoint]]:
    """The hints of a Produce answer's partitions refused NOT_LEADER_OR_FOLLOWER."""
    if version < PRODUCE_HINT_VERSION:
        return {}, []
    missed = [tp for tp, r in final.items() if int(r.error) in PRODUCE_HINT_ERRORS]
    if not missed:
        return {}, []
    return leader_hints(backend, missed, own_address())


def fetch_hints(
    backend: MetadataBackend,
    own_address: Callable[[], tuple[str, int]],
    version: int,
    *,
    partitions: Sequence[SessionPartition],
    chosen: Iterable[int],
    read: Mapping[int, FetchResult],
) -> tuple[dict[int, tuple[int, int]], list[NodeEndpoint]]:
    """The hints of a Fetch answer's partitions (``chosen`` indexes into ``partitions``)
    whose read failed with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH, by index."""
    if version < FETCH_HINT_VERSION:
        return {}, []
    missed: dict[TopicPartition, int] = {}
    for i in chosen:
        result = read.get(i)
        tp = partitions[i].tp
        if result is not None and tp is not None and int(result.error) in FETCH_HINT_ERRORS:
            missed[tp] = i
    if not missed:
        return {}, []
    hints, endpoints = leader_hints(backend, missed, own_address())
    return {missed[tp]: hint for tp, hint in hints.items()}, endpoints


__all__ = ["fetch_hints", "leader_hints", "produce_hints"]
