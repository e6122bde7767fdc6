"""Prompt tokens per sample per agent at look-back 7, 14, 21 and 28 days on PMData or GLOBEM (the
paper's Figure 2), plus the sandbox round trip per block (persistent worker vs a fresh process).

Both prompt styles are measured. The paper's chunk RAG (memory = the look-back days, prompt = top-3 days
+ the query day) must not grow with the look-back: `rag_growth_28_vs_7` reports its ratio (RAG and RAPTOR),
which should stay within 10% of 1; `... context_window` is the earlier prompt that also holds the whole window.
RAPTOR's default prompt is the same budget (top-3 retrieved leaves or day summaries + the query day).

No generation: Health-LLM and RAG prompts are built exactly as the agents send them; for RAPTOR the
answering prompt is estimated with retrieval over leaves only (day summaries need a model), and the
mean day-summary prompt is reported beside it; for PHIA the first prompt (faithful and improved,
the latter with the schema card). The same target days are used at every look-back (those valid at
28 days), so only the look-back changes. Tokens are counted with the embedded default model's
tokenizer (llama.cpp, vocab only), per chat message plus the template's framing tokens.

    python bench/bench_agents.py [--dataset pmdata|globem] [--n 16] [--tokenizer qwen2.5-coder-1.5b]
                                 [--sandbox-blocks 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOOKBACKS = (7, 14, 21, 28)
# (label, system, options)
CONFIGS = [
    ("healthllm paper", "healthllm", {}),
    ("healthllm+cot paper", "healthllm", {"cot": True}),
    ("healthllm corrected", "healthllm", {"style": "corrected"}),
    ("healthllm+cot corrected", "healthllm", {"cot": True, "style": "corrected"}),
    ("rag paper", "rag", {}),
    ("rag corrected", "rag", {"style": "corrected"}),
    ("rag paper context_window", "rag", {"context_window": True}),
    ("rag corrected context_window", "rag", {"style": "corrected", "context_window": True}),
    ("raptor paper (leaves-only estimate)", "raptor", {}),
    ("raptor paper context_window (leaves-only estimate)", "raptor", {"context_window": True}),
    ("phia faithful (first prompt)", "phia", {"executor": "faithful"}),
    ("phia improved (first prompt)", "phia", {"executor": "improved"}),
]
MESSAGE_FRAMING_TOKENS = 5  # "<|im_start|>role\n ... <|im_end|>\n" in the Qwen/SmolLM chat templates


class Tokenizer:
    def __init__(self, model: str):
        from llama_cpp import Llama

        from balms.models.gguf_assets import gguf_path

        self.model = model
        self.path = gguf_path(model)
        self.llm = Llama(model_path=str(self.path), vocab_only=True, verbose=False)

    def count(self, messages) -> int:
        n = 3  # assistant turn opener
        for m in messages:
            n += len(self.llm.tokenize(m.content.encode("utf-8"), add_bos=False, special=False))
            n += MESSAGE_FRAMING_TOKENS
        return n


def pick_targets(tables, n: int, seed: int):
    from balms.data.samples import build_samples

    sets = {L: {(s.user, s.target_date): s for s in build_samples(tables, lookback=L).samples} for L in LOOKBACKS}
    common = sorted(set.intersection(*(set(v) for v in sets.values())))
    rng = random.Random(seed)
    chosen = sorted(rng.sample(common, min(n, len(common))))
    return {L: [sets[L][k] for k in chosen] for L in LOOKBACKS}, len(common)


def summary_tokens(tables, samples, tok) -> float:
    """Mean tokens of a RAPTOR day-summary prompt over the window days of `samples`."""
    from balms.agents import prompts
    from balms.agents.rag import user_history
    from balms.agents.raptor import build_leaves, day_tables
    from balms.data.channels import DEFAULT_STYLE, get_window, prompt_channels

    counts = []
    for s in samples:
        w = get_window(tables, s, context=True, channels=prompt_channels(tables, None, DEFAULT_STYLE))
        hist = user_history(tables, w, "lookback")
        leaves, _ = build_leaves(tables, hist)
        compact = day_tables(tables, hist)
        for ts, lv in leaves.items():
            records = compact.get(ts) or "\n".join(lv)
            msgs = prompts.messages(prompts.SUMMARY_SYSTEM_PROMPT,
                                    prompts.summary_prompt(ts.date().isoformat(), records, tables.subday_unit))
            counts.append(tok.count(msgs))
    return statistics.mean(counts) if counts else 0.0


def sandbox_round_trip(blocks: int) -> dict:
    spec = importlib.util.spec_from_file_location("bench_sandbox", ROOT / "bench" / "bench_sandbox.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    improved = mod._measure("improved", blocks)
    fresh = mod._measure("faithful", blocks)
    return {"persistent_worker": improved, "fresh_process": fresh,
            "ratio_fresh_over_persistent_median": round(fresh["median_s"] / improved["median_s"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="target days (same at every look-back)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default="qwen2.5-coder-1.5b")
    ap.add_argument("--sandbox-blocks", type=int, default=10, help="0 skips the sandbox measurement")
    ap.add_argument("--dataset", default="pmdata", choices=("pmdata", "globem"))
    ap.add_argument("--raw", default=None, help="raw folder (default: data/raw or ../shared/data)")
    ap.add_argument("--out", default=None, help="default bench/agents.json (PMData), bench/agents_<dataset>.json")
    args = ap.parse_args()
    if args.out is None:
        name = "agents.json" if args.dataset == "pmdata" else f"agents_{args.dataset}.json"
        args.out = str(Path(__file__).with_name(name))

    from balms.agents.registry import make_agent
    from balms.data.loading import load_dataset, load_from_dir
    from balms.paths import shared_data_dir

    t0 = time.perf_counter()
    if args.raw:
        tables = load_from_dir(args.dataset, Path(args.raw))
    elif shared_data_dir() is not None and (shared_data_dir() / args.dataset).is_dir():
        tables = load_from_dir(args.dataset, shared_data_dir() / args.dataset)
    else:
        tables = load_dataset(args.dataset)
    per_L, n_common = pick_targets(tables, args.n, args.seed)
    tok = Tokenizer(args.tokenizer)

    results: dict = {}
    timings: dict = {}
    for label, system, opts in CONFIGS:
        agent = make_agent(system, **opts)
        results[label] = {}
        t = time.perf_counter()
        for L in LOOKBACKS:
            counts = [tok.count(agent.first_prompt(s, tables)) for s in per_L[L]]
            results[label][L] = {"mean": round(statistics.mean(counts), 1), "median": statistics.median(counts),
                                 "min": min(counts), "max": max(counts)}
        timings[label] = round(time.perf_counter() - t, 2)
    summ = {L: round(summary_tokens(tables, per_L[L], tok), 1) for L in LOOKBACKS}
    tok.llm.close()  # free the vocab now, not in an interpreter-shutdown finaliser

    rag_growth = {k: round(results[k][LOOKBACKS[-1]]["mean"] / results[k][LOOKBACKS[0]]["mean"], 3)
                  for k in results if k.startswith(("rag", "raptor"))}
    report = {
        "dataset": args.dataset, "source": tables.source, "tokenizer": args.tokenizer,
        "tokenizer_file": tok.path.name, "raptor_memory": "lookback (agent default)",
        "n_target_days": len(per_L[LOOKBACKS[0]]),
        "n_target_days_valid_at_all_lookbacks": n_common, "seed": args.seed, "lookbacks": list(LOOKBACKS),
        "prompt_tokens": {k: {str(L): v for L, v in d.items()} for k, d in results.items()},
        "raptor_day_summary_prompt_tokens_mean": {str(L): v for L, v in summ.items()},
        f"rag_growth_{LOOKBACKS[-1]}_vs_{LOOKBACKS[0]}": rag_growth,
        "notes": ["RAPTOR: answering prompt estimated from leaves-only retrieval (no model for summaries); "
                  "each day summary costs one extra call of the size given in raptor_day_summary_prompt_tokens_mean, "
                  "once per (user, day, model), cached.",
                  "PHIA: first prompt only; later steps add the transcript.",
                  f"counting: tokens per message content + {MESSAGE_FRAMING_TOKENS} framing tokens per message + 3."],
        "build_seconds_per_config": timings,
        "python": platform.python_version(),
    }
    if args.sandbox_blocks > 0:
        report["sandbox_round_trip"] = sandbox_round_trip(args.sandbox_blocks)
    report["total_seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")

    label = f"agent (mean prompt tokens, {args.dataset})"
    head = f"{label:<40}" + "".join(f"{'L=' + str(L):>9}" for L in LOOKBACKS)
    print(head)
    print("-" * len(head))
    for label in results:
        print(f"{label:<40}" + "".join(f"{results[label][L]['mean']:>9.0f}" for L in LOOKBACKS))
    print(f"{'raptor day-summary prompt (each)':<40}" + "".join(f"{summ[L]:>9.0f}" for L in LOOKBACKS))
    for k, v in rag_growth.items():
        print(f"{k}: L={LOOKBACKS[-1]} / L={LOOKBACKS[0]} = {v}")
    print(f"({report['n_target_days']} target days, same at every look-back; tokenizer {args.tokenizer})")
    if "sandbox_round_trip" in report:
        sb = report["sandbox_round_trip"]
        for k in ("persistent_worker", "fresh_process"):
            r = sb[k]
            print(f"sandbox {k:<20} median {r['median_s'] * 1000:8.2f} ms  p95 {r['p95_s'] * 1000:8.2f} ms "
                  f"(n={r['blocks']})")
        print(f"fresh process / persistent worker (median): {sb['ratio_fresh_over_persistent_median']}x")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
