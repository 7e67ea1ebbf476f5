"""``python -m tidelog``: the ``tidelog`` command."""

import sys

from tidelog.cli.main import console

sys.exit(console())
