"""The cleaner's offset map (``tidelog.storage.cleaner`` rule 3, Kafka's ``SkimpyOffsetMap``)
and the record walk it is filled by: key -> offset of the key's latest record, bounded in
entries; keys of 16 bytes or more are kept as their MD5."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from tidelog.protocol.varint import read_varint


def record_keys(body: bytes, count: int) -> Iterator[tuple[int, int, int, int, bytes | None, bool]]:
    """``(start, end, offset delta, timestamp delta, key, value is null)`` of each record.

    Only what the cleaner decides by is decoded; a kept record is copied as its bytes.
    A record that runs past the batch raises ValueError (``VarintError`` is one)."""
    pos = 0
    limit = len(body)
    for _ in range(count):
        size, fields = read_varint(body, pos, limit)
        end = fields + size
        timestamp_delta, p = read_varint(body, fields + 1, limit)  # after the attributes
        offset_delta, p = read_varint(body, p, limit)
        key_size, p = read_varint(body, p, limit)
        key = None if key_size < 0 else body[p : p + key_size]
        p += max(key_size, 0)
        value_size, p = read_varint(body, p, limit)
        if end > len(body) or p > end:
            raise ValueError("a record runs past the batch")
        yield pos, end, offset_delta, timestamp_delta, key, value_size < 0
        pos = end


def _map_key(key: bytes) -> bytes:
    """Rule 3: short keys as they are, longer ones as their MD5 (never the same length)."""
    return key if len(key) < 16 else hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Rule 3's key -> latest offset map, bounded in entries."""

    __slots__ = ("_map", "latest_offset", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._map: dict[bytes, int] = {}
        #: One past the last offset offered to the map (-1: none).
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` for ``key``; False (nothing done) when a new key does not fit."""
        k = _map_key(key)
        m = self._map
        if k not in m and len(m) >= self.max_entries:
            return False
        m[k] = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 if it is not in the map."""
        return self._map.get(_map_key(key), -1)


__all__ = ["OffsetMap", "record_keys"]
