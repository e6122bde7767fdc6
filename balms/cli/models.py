"""`balms models ...`: list the registry, and ping a model end to end (one short real generation).

    balms models list [--json]
    balms models ping smollm2-135m [--base-url URL ...] [--cache-mode off] [--json]
"""

from __future__ import annotations

import json
import time


def _list(args) -> int:
    from balms.models.registry import default_model_name, list_models

    df = list_models()
    cols = ["backend", "model_id", "is_reasoning", "is_embedded_cpu", "context_length", "role",
            "price_in_per_mtok", "price_out_per_mtok"]
    if args.json:
        print(json.dumps({"default": default_model_name(), "models": df[["name"] + cols].to_dict(orient="records")},
                         indent=2))
    else:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60):
            print(df[cols].to_string())
        print(f"\ndefault: {default_model_name()} (env BALMS_MODEL)")
    return 0


def _ping(args) -> int:
    from balms.models.base import BackendError, GenParams, Message
    from balms.models.registry import get_backend

    overrides = {}
    if args.base_url:
        overrides["base_urls"] = args.base_url
    if args.backend:
        overrides["backend"] = args.backend
    t0 = time.perf_counter()
    try:
        b = get_backend(args.name, cache_mode=args.cache_mode, **overrides)
        c = b.generate([Message("system", "You are a terse assistant."), Message("user", args.prompt)],
                       GenParams(max_tokens=args.max_tokens))
    except (BackendError, ValueError, KeyError) as exc:
        out = {"ok": False, "model": args.name, "error": str(exc)}
        print(json.dumps(out, indent=2) if args.json else f"FAIL {args.name}: {exc}")
        return 1
    out = {"ok": True, "model": args.name, "model_id": c.model_id, "text": c.text, "cached": c.cached,
           "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
           "latency_s": round(c.latency_s, 3), "wall_s": round(time.perf_counter() - t0, 3)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"OK {args.name} [{c.model_id}] {out['latency_s']} s, {c.prompt_tokens}+{c.completion_tokens} tokens"
              f"{' (cached)' if c.cached else ''}: {c.text!r}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="model registry: list, ping")
    sub = p.add_subparsers(dest="models_command", required=True)
    pl = sub.add_parser("list", help="registered models, backends, exact ids, prices")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_list)
    pp = sub.add_parser("ping", help="one short generation through the named model")
    pp.add_argument("name", help="registry name (see `balms models list`)")
    pp.add_argument("--base-url", action="append", help="OpenAI-compatible base URL (repeatable)")
    pp.add_argument("--backend", help="override the backend kind, e.g. vllm-local")
    pp.add_argument("--cache-mode", default="off", choices=["rw", "replay", "off"])
    pp.add_argument("--prompt", default="Reply with the single word: ready.")
    pp.add_argument("--max-tokens", type=int, default=8)
    pp.add_argument("--json", action="store_true")
    pp.set_defaults(func=_ping)
