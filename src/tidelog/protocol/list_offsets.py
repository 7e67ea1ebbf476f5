"""ListOffsets' timestamps with a special meaning (Kafka's ``ListOffsetsRequest``): the
offset of the next record, of the first record, and of the record with the largest
timestamp (KIP-734)."""

from __future__ import annotations

from typing import Final

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
