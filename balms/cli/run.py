"""`balms run`: one cell of the benchmark from the shell, the same code path the notebooks use.

    balms run --dataset pmdata --system healthllm --model qwen2.5-coder-1.5b --n 10 --cot
    balms run --dataset globem --system phia --model Qwen2.5-14B-Instruct --option executor=improved --n 0
    balms run --spec runs/demo/pmdata/<run>.manifest.json     # re-run any cell from its manifest (or spec JSON)
    balms run --notebooks 01_prediction,02_cot --config paper   # several notebooks' cells in one scheduler
"""

from __future__ import annotations

import json


def _parse_option(text: str):
    if "=" not in text:
        raise SystemExit(f"--option expects key=value, got {text!r}")
    k, v = text.split("=", 1)
    try:
        return k, json.loads(v)
    except json.JSONDecodeError:
        return k, v


def _at_least(low: int):
    """An argparse type: an integer >= `low`, refused before anything runs."""
    import argparse

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v
    return parse


def _spec_of(path: str):
    """A CellSpec from a run manifest (its `cell`) or a spec's own JSON."""
    from pathlib import Path

    from balms.cellspec import CellSpec

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"balms run --spec {path}: cannot read JSON ({exc})") from None
    data = data.get("cell", data) if isinstance(data, dict) else data
    if not isinstance(data, dict):
        raise SystemExit(f"balms run --spec {path}: expected a run manifest with a 'cell' or a cell spec")
    data = {k: v for k, v in data.items() if k != "key"}
    try:
        return CellSpec.model_validate(data)
    except ValueError as exc:
        raise SystemExit(f"balms run --spec {path}: not a cell spec: {exc}") from None


def _notebooks(args) -> int:
    """Every cell of the named notebooks in one scheduler, into the profile's own runs (where they read them)."""
    from balms.experiments.config import ConfigError, load, parse_cli_overrides
    from balms.experiments.grid import run

    try:
        given = {"cache_mode": args.cache_mode, "concurrency": args.concurrency, "raw_root": args.raw}
        cfg = load(args.config, **({k: v for k, v in given.items() if v is not None} | parse_cli_overrides(args.set)))
    except ConfigError as exc:
        raise SystemExit(f"balms run: {exc}") from None
    if args.profile:
        cfg = cfg.replace(profile=args.profile)
    try:
        df = run(cfg, [nb.strip() for nb in args.notebooks.split(",") if nb.strip()],
                 models=[m.strip() for m in args.model.split(",") if m.strip()] if args.model else None)
    except ValueError as exc:
        raise SystemExit(f"balms run --notebooks: {exc}") from None
    counts = df.groupby("status").size().to_dict() if len(df) else {}
    print(json.dumps({"profile": cfg.profile, "records": len(df), "by_status": counts}) if args.json else
          f"{len(df)} records in runs/{cfg.profile}/: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 0


def _run(args) -> int:
    from balms import experiments as ex

    if args.notebooks:
        return _notebooks(args)
    args.profile = args.profile or "cli"
    try:  # -p overrides (a spending cap, a call deadline...) hold here too; an unknown name is refused
        from balms.experiments.config import parse_cli_overrides

        given = parse_cli_overrides(args.set)
        if args.spec:
            cfg = ex.load(args.config, **({"cache_mode": args.cache_mode, "concurrency": args.concurrency,
                                           "raw_root": args.raw} | given))
    except ex.ConfigError as exc:
        raise SystemExit(f"balms run: {exc}") from None
    if args.spec:
        cell = ex.Cell.from_spec(_spec_of(args.spec), cfg.replace(profile=args.profile))
        recs = ex.records_of(cfg.replace(profile=args.profile), [cell])[0]
        return _print(recs, args)
    missing = [f"--{k}" for k in ("dataset", "system", "model") if getattr(args, k) is None]
    if missing:
        raise SystemExit(f"balms run: {', '.join(missing)} required (or --spec MANIFEST)")
    try:
        cfg = ex.load(args.config, **({"n_samples": args.n, "seed": args.seed, "cache_mode": args.cache_mode,
                                       "concurrency": args.concurrency, "raw_root": args.raw,
                                       "phia_max_iters": args.max_iters} | given))
    except ex.ConfigError as exc:
        raise SystemExit(f"balms run: {exc}") from None
    cfg = cfg.replace(profile=args.profile)
    from balms.models.registry import UnknownModelError
    from balms.models.routing import RoutingError, check_models

    try:  # before any call: an unknown name or a model without a server is one message, not a traceback
        check_models([args.model], cfg.servers, cache_mode=cfg.cache_mode)
    except (UnknownModelError, RoutingError) as exc:
        raise SystemExit(f"balms run: {exc}") from None
    cell = ex.make_cell(cfg, args.dataset, args.system, args.model, cot=args.cot, lookback=args.lookback,
                        options=dict(_parse_option(o) for o in args.option))
    recs = ex.records_of(cfg, [cell])[0]
    return _print(recs, args)


def _print(recs, args) -> int:
    import pandas as pd

    from balms import experiments as ex

    df = pd.DataFrame([r.model_dump(exclude={"transcript"}) for r in recs])
    row = ex.summarize(df).iloc[0].to_dict() if len(df) else {"n": 0}
    print(json.dumps(row, default=str) if args.json else pd.Series(row).to_string())
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="run one (dataset, system, model) cell with the cache and resumable records")
    from balms.agents.registry import system_names
    from balms.data.registry import dataset_names

    p.add_argument("--spec", default=None, help="re-run the cell of a run manifest (or cell spec JSON)")
    p.add_argument("--dataset", choices=dataset_names())
    p.add_argument("--system", choices=system_names())
    p.add_argument("--model", help="registry name (balms models list); with --notebooks: comma-separated, only "
                   "their cells on these models")
    p.add_argument("--cot", action="store_true", help="chain-of-thought variant")
    p.add_argument("--n", type=_at_least(0), default=None, help="evaluation samples (0 = all test samples)")
    p.add_argument("--lookback", type=_at_least(1), default=None)
    p.add_argument("--option", action="append", default=[], help="agent option key=value (JSON values allowed)")
    p.add_argument("--max-iters", type=_at_least(1), default=None, help="PHIA iteration budget")
    p.add_argument("--config", default="demo", help="profile whose budgets to use (profiles/<name>.yaml)")
    p.add_argument("--profile", default=None, help="runs/<profile>/ folder for the records (default: cli; with "
                   "--notebooks the --config profile's own, where its notebooks read them)")
    p.add_argument("--notebooks", default=None, help="comma-separated notebooks (01_prediction,02_cot): all their "
                   "cells at once, every server busy (balms.experiments.scheduler)")
    p.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P): max_usd, "
                   "max_gpu_hours, call_deadline_s, ...; an unknown name is refused")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cache-mode", default=None, choices=["rw", "replay", "off"])
    p.add_argument("--concurrency", type=_at_least(1), default=None)
    p.add_argument("--raw", default=None, help="raw data root (default BALMS_RAW_DIR or data/raw)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)
