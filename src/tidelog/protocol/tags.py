"""Stripping unknown tagged fields (placeholder)."""

from __future__ import annotations

from typing import Any


def strip_unknown_tags(schema: type[Any], buf: bytes, pos: int) -> bytes:
    raise ValueError("unknown tagged field")
