"""``tidelog dump-log FILE...``: what segment files hold, like Kafka's ``kafka-dump-log.sh``.

Reads ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` files without a broker (they
may belong to a running one: nothing is written). The lines are Kafka's
(``tidelog.storage.segment_dump``); problems (a torn tail, a bad CRC, records that do not
decode, index entries that do not match the log, a failed sanity check) go to stderr with
the byte position, and make the command exit 1 after every file was dumped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidelog.cli.main import COMMANDS
from tidelog.storage.segment_dump import DEFAULT_MAX_BYTES, DumpOptions, dump_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="segment files")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and payload (implies --deep-iteration)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print every record, not only batches"
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only check that .index/.timeindex files load (as a broker does at start-up)",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="read at most the first N bytes of each .log file",
    )


def run(args: argparse.Namespace) -> int:
    options = DumpOptions(
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        index_sanity_check=args.index_sanity_check,
        max_bytes=args.max_bytes,
    )
    failed = False
    try:
        for path in args.files:
            for line in dump_file(path, options):
                if line.problem or line.warning:
                    sys.stdout.flush()
                    print(line.text, file=sys.stderr)
                    failed = failed or line.problem
                else:
                    print(line.text)
    except BrokenPipeError:  # `tidelog dump-log ... | head`
        sys.stderr.close()
        return 1
    return 1 if failed else 0


COMMANDS["dump-log"] = (
    "print what segment files hold, and what is wrong with them (like kafka-dump-log.sh)",
    add_arguments,
    run,
)
