"""The example pipeline (examples/orders_pipeline.py) end to end on a real broker."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess
from tests.spark.conftest import unique

# ~1.5 min on two busy cores (a stateful stream, two sinks): run with `-m slow`.
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "orders_pipeline.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("orders_pipeline", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["orders_pipeline"] = module
    spec.loader.exec_module(module)
    return module


def test_orders_pipeline_matches_direct_computation(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    pipeline = load_example()
    report = pipeline.run_pipeline(
        spark,
        broker.bootstrap,
        orders_topic=unique("orders"),
        revenue_topic=unique("revenue"),
        work_dir=tmp_path,
        orders=1500,
        minutes=4,
        partitions=2,
        timeout_s=240,
    )
    assert report["mismatches"] == []
    assert report["orders_generated"] == 1500
    # Event times span 4 minutes (+ jitter back into the minute before): 4-5 windows
    # per category, all of them emitted once the heartbeat moved the watermark.
    assert report["windows_expected"] >= 4 * 6
    assert report["windows_parquet"] == report["windows_expected"]
    assert report["topic_matches"]
    assert report["ok"]
