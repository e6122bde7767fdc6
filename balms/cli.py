"""`balms` console command. Each area registers its own subcommand group, so this file stays small.

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

# (command, module exposing `register(subparsers)`)
COMMAND_MODULES = [
    ("data", "balms.data.cli"),
    ("models", "balms.models.cli"),
    ("run", "balms.run_cli"),
    ("config", "balms.experiments.config"),
    ("plan", "balms.experiments.plan"),
    ("runs", "balms.experiments.runfiles"),
    ("bundle", "balms.bundle"),
    ("deploy", "balms.deploy_cli"),
    ("sandbox", "balms.sandbox.cli"),
    ("judge", "balms.judges.cli"),
    ("prompt", "balms.agents.prompt_cli"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="balms", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for _, module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:  # area not built yet
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C: records are on disk (fsynced) and manifests written; skip the slow
        # teardown of a big heap (over a second), so the shell gets its prompt back at once (issue 36)
        print("balms: interrupted; every finished record is kept, the same command resumes", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
