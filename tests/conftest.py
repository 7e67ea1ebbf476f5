"""Settings for every test.

Hypothesis runs without its per-example deadline: `make test` runs the unit tests beside
the ones that start brokers, ZooKeeper and Spark on the same two cores
(scripts/run_tests.sh), so how long an example takes says nothing about the code (tests
stay independent of speed).
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("tidelog", deadline=None)
settings.load_profile("tidelog")
