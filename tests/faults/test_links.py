"""Issue 7, partitions between brokers: the brokers cut from each other (one broker vs the
rest, both ways) and one link cut one way (a follower cannot reach its leader), while
ZooKeeper and the clients still reach everyone, so the controller sees every broker alive.
A follower that cannot fetch must leave the ISR, and acks=all with min.insync.replicas=2
must lose nothing acknowledged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tidelog.testing.faults.run import RunConfig, run

pytestmark = pytest.mark.integration


def test_broker_partitions_shrink_the_isr_and_lose_nothing_acknowledged(tmp_path: Path) -> None:
    began = time.monotonic()
    result = run(
        RunConfig(
            faults=2,
            seed=11,
            kinds=("partition_brokers", "partition_asymmetric"),
            cover_all_first=True,
            directory=tmp_path,
            gap_s=(0.1, 0.2),
            session_ms=4000,
            lag_ms=1000,
        ),
        log=print,
    )
    print(result.findings.summary(), f"wall {time.monotonic() - began:.1f}s")
    by_kind = {r.kind: r for r in result.faults}
    assert sorted(by_kind) == ["partition_asymmetric", "partition_brokers"]
    assert all(r.healthy for r in result.faults), [r.detail for r in result.faults]

    # The cuts did cut replication: just before each heal, a follower had left an ISR.
    split = by_kind["partition_brokers"]
    assert split.isr_before_heal, split.detail
    assert any(len(isr) < 3 for isr in split.isr_before_heal.values()), split.detail
    one_way = by_kind["partition_asymmetric"]
    follower = one_way.target
    assert follower is not None
    assert any(follower not in isr for isr in one_way.isr_before_heal.values()), one_way.detail

    # acks=all, min.insync.replicas=2: nothing acknowledged is lost, and the checker saw
    # enough traffic for that to mean something.
    assert result.findings.acknowledged > 300
    assert result.findings.failures == {}, result.findings.summary()
    assert result.findings.lost_count == 0
