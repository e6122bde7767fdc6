"""`balms` console command (`python -m balms.cli` alike): one module of this package per command.

    balms data summary --dataset pmdata --json
    balms sandbox selftest --json
    balms judge ground --case FILE --json
    balms run ...
    balms prompt --dataset pmdata --user p01 --target 2019-11-15 --style paper
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# one module per command, each exposing `register(subparsers)` (as inspect_ai's `_cli/`); the library modules hold
# no command-line code (tests/test_architecture.py checks it)
COMMANDS = ("data", "models", "run", "config", "plan", "runs", "bundle", "cache", "deploy", "sandbox", "judge",
            "prompt", "report", "docs")


# what `balms` alone prints: the first commands to try, in the order a newcomer needs them
FIRST_STEPS = """balms: the benchmark's command line. Try first:
  balms data summary --dataset pmdata     what the data is (real where found, else a synthetic cohort)
  balms prompt --dataset pmdata --user p01 --target 2019-11-15 --style paper
                                          one real prompt an agent reads
  balms plan --profile demo               calls, tokens and hours of a profile before any model call
  make notebook NB=01_prediction          re-run one notebook (committed responses first: no model call)
  make help                               every target and profile
Every command: balms --help; one command: balms COMMAND --help"""

# commands that load data or price a profile: they say first which datasets run on synthetic cohorts
DATA_COMMANDS = {"plan", "run"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="balms", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        importlib.import_module(f"balms.cli.{command}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from balms.data.schema import DataError
    from balms.stores import DamagedStoreError

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(FIRST_STEPS)
        return 0
    args = build_parser().parse_args(argv)
    if args.command in DATA_COMMANDS:
        from balms import paths
        from balms.data.registry import dataset_names

        paths.announce_data(dataset_names())
    try:
        return int(args.func(args) or 0)
    except (DataError, DamagedStoreError) as exc:  # damaged input or store: the message names it, no traceback
        print(f"balms {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: records are on disk (fsynced) and manifests written; skip the slow
        # teardown of a big heap (over a second), so the shell gets its prompt back at once (issue 36)
        print("balms: interrupted; every finished record is kept, the same command resumes", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)

