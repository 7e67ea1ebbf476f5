"""The connector's exceptions (no Spark here, so plain tests catch them too)::

TidelogError
└── ConnectorError    a non-retriable error, or retries ran past their deadline
    └── DataLossError planned offsets are gone (and ``failOnDataLoss`` is true)
SparkOptionError      an option is unknown, invalid or contradicts another (also a
                      ``ValueError``; ``tidelog.spark.options`` re-exports it)
"""

from __future__ import annotations

from tidelog.errors import TidelogError


class ConnectorError(TidelogError):
    """The connector gave up: a non-retriable error, or retries ran past their deadline."""


class DataLossError(ConnectorError):
    """Offsets the query planned to read are gone (and ``failOnDataLoss`` is true)."""


class SparkOptionError(TidelogError, ValueError):
    """An option of the ``tidelog`` format is unknown, invalid or contradicts another."""
