"""`balms run`: one cell of the benchmark from the shell, the same code path the notebooks use.

    balms run --dataset pmdata --system healthllm --model qwen2.5-coder-1.5b --n 10 --cot
    balms run --dataset globem --system phia --model Qwen2.5-14B-Instruct --option executor=improved --n 0
    balms run --spec runs/demo/pmdata/<run>.manifest.json     # re-run any cell from its manifest (or spec JSON)
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


def _run(args) -> int:
    from balms import experiments as ex

    if args.spec:
        cfg = ex.load(args.config, cache_mode=args.cache_mode, concurrency=args.concurrency, raw_root=args.raw)
        cell = ex.Cell.from_spec(_spec_of(args.spec), cfg.replace(profile=args.profile))
        recs = ex.run_cell_spec(cfg.replace(profile=args.profile), cell)
        return _print(recs, args)
    missing = [f"--{k}" for k in ("dataset", "system", "model") if getattr(args, k) is None]
    if missing:
        raise SystemExit(f"balms run: {', '.join(missing)} required (or --spec MANIFEST)")
    try:
        cfg = ex.load(args.config, n_samples=args.n, seed=args.seed, cache_mode=args.cache_mode,
                      concurrency=args.concurrency, raw_root=args.raw, phia_max_iters=args.max_iters)
    except ex.ConfigError as exc:
        raise SystemExit(f"balms run: {exc}") from None
    cfg = cfg.replace(profile=args.profile)
    from balms.models.registry import UnknownModelError
    from balms.models.routing import RoutingError, check_models

    try:  # before any call: an unknown name or a model without a server is one message, not a traceback
        check_models([args.model], cfg.servers, cache_mode=cfg.cache_mode)
    except (UnknownModelError, RoutingError) as exc:
        raise SystemExit(f"balms run: {exc}") from None
    recs = ex.run_cell(cfg, args.dataset, args.system, args.model, cot=args.cot, lookback=args.lookback,
                       options=dict(_parse_option(o) for o in args.option))
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
    p.add_argument("--model", help="registry name (balms models list)")
    p.add_argument("--cot", action="store_true", help="chain-of-thought variant")
    p.add_argument("--n", type=int, default=None, help="evaluation samples (0 = all test samples)")
    p.add_argument("--lookback", type=int, default=None)
    p.add_argument("--option", action="append", default=[], help="agent option key=value (JSON values allowed)")
    p.add_argument("--max-iters", type=int, default=None, help="PHIA iteration budget")
    p.add_argument("--config", default="demo", help="profile whose budgets to use (profiles/<name>.yaml)")
    p.add_argument("--profile", default="cli", help="runs/<profile>/ folder for the records")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cache-mode", default=None, choices=["rw", "replay", "off"])
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--raw", default=None, help="raw data root (default BALMS_RAW_DIR or data/raw)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)
