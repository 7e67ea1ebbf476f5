"""Control-plane messages kio lacks (filled in below)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

CONTROL_API_KEYS: Final = frozenset({4, 5, 6, 7})
REQUEST_TYPES: Final[Mapping[tuple[int, int], Any]] = {}
RESPONSE_TYPES: Final[Mapping[tuple[int, int], Any]] = {}
