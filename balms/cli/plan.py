"""`balms plan --profile NAME [--json] [--gpus A6000:16] [--servers MODEL=N,...]`: calls, tokens, GPU hours and
Claude cost of a profile before any model call (balms.experiments.plan)."""

from __future__ import annotations

import json
import re
import sys
import time

from balms.experiments.config import ConfigError, load, parse_cli_overrides
from balms.experiments.plan import (
    allocate,
    build_plan,
    format_markdown,
    format_plan,
    parse_gpus,
    phase_work,
    price_split,
    servers_by_model,
)
from balms.models.standin import BEHAVIOURS, TYPICAL


def _parse_throughput(items: list[str]) -> dict:
    """`CLASS=prefill:decode`, e.g. `70b=1500:200`."""
    out = {}
    for it in items or []:
        m = re.fullmatch(r"(\w+)=(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)", it.strip())
        if not m:
            raise SystemExit(f"--throughput expects CLASS=prefill:decode (e.g. 70b=1500:200), got {it!r}")
        out[m.group(1).lower()] = {"prefill": float(m.group(2)), "decode": float(m.group(3))}
    return out


def _cmd(args) -> int:
    try:
        cfg = load(args.profile, **parse_cli_overrides(args.set))
        gpu = parse_gpus(args.gpus) if args.gpus else None
    except (ConfigError, ValueError) as exc:
        print(f"balms plan: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def progress(i, n, cell):
        if args.progress:
            print(f"  planning cell {i + 1}/{n} ({cell.notebook} {cell.dataset} {cell.system} {cell.model})",
                  file=sys.stderr, flush=True)

    plan = build_plan(cfg, per_cell=args.per_cell, behaviour=BEHAVIOURS[args.behaviour],
                      throughput=_parse_throughput(args.throughput), progress=progress)
    d = plan.to_dict()
    try:
        work = phase_work(d, slots=cfg.server_slots)
        if gpu:
            d["allocation"] = allocate(work, *gpu)
        if args.servers:
            d["schedule"] = price_split(work, servers_by_model(args.servers.split(",")))
    except ValueError as exc:
        print(f"balms plan: {exc}", file=sys.stderr)
        return 2
    d["planning_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(d, indent=2))
    elif args.markdown:
        print(format_markdown(d, cfg.judge_model))
    else:
        print(format_plan(d))
        print(f"(planned in {d['planning_s']} s, no model called)")
    return 0


def register(sub) -> None:
    """`balms plan --profile NAME [--json] [--gpus A6000:16] [--servers MODEL=N,...]`."""
    p = sub.add_parser("plan", help="calls, tokens, GPU hours and Claude cost of a profile, and how to split GPUs "
                       "between its models, before any model call")
    p.add_argument("--profile", default="demo")
    p.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the per-backbone table as Markdown (the runbook's)")
    p.add_argument("--per-cell", type=int, default=2, help="samples of each cell run against the stand-in, then "
                   "scaled (every sample of a cell that has no more)")
    p.add_argument("--behaviour", choices=sorted(BEHAVIOURS), default=TYPICAL.name,
                   help="how the stand-in answers (balms.models.standin); 'upper' runs every ReAct loop to its cap")
    p.add_argument("--throughput", action="append", default=[],
                   help="CLASS=prefill:decode tokens/s of one server (classes: 7b, 14b, 70b, small)")
    p.add_argument("--progress", action="store_true", help="print planning progress to stderr")
    p.add_argument("--gpus", default="", help="TYPE:COUNT (e.g. A6000:16): the servers per model that finish each "
                   "phase soonest on them, the wall time, GPU hours, and what one more GPU would save")
    p.add_argument("--servers", default="", help="comma-separated MODEL=N or server URLs: the wall time on them")
    p.set_defaults(func=_cmd)
