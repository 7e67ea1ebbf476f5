"""The ``tidelog`` command line: each subcommand in its own module, registered in
``tidelog.cli.main.COMMANDS`` (the top layer of docs/design.md "Layers")."""
