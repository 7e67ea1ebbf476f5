"""Placeholder main job: replaced by the Spark pipeline (issue 6) as the layers land."""

from __future__ import annotations

import sys


def main() -> int:
    print("tidelog demo: nothing to run yet; see README 'What works today'.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
