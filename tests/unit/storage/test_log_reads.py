"""The reads of a log's segments (``tidelog.storage.log_reads``) that need no segments."""

from __future__ import annotations

import pytest

from tidelog.model import TopicPartition
from tidelog.storage.errors import OffsetOutOfRangeError
from tidelog.storage.log_reads import check_fetch_offset

TP = TopicPartition("t", 0)


@pytest.mark.parametrize("offset", [10, 15, 20])
def test_a_fetch_may_start_from_the_log_start_to_the_log_end(offset: int) -> None:
    check_fetch_offset(TP, offset, 10, 20)


@pytest.mark.parametrize("offset", [9, 21])
def test_a_fetch_outside_the_log_is_out_of_range(offset: int) -> None:
    with pytest.raises(OffsetOutOfRangeError, match=rf"t-0: offset {offset} is outside \[10, 20\]"):
        check_fetch_offset(TP, offset, 10, 20)
