"""The ``tidelog`` command line. Each subcommand lives in its own module and is registered
in ``tidelog.cli.main.COMMANDS``; this is the top layer of docs/design.md "Layers"."""
