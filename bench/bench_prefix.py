"""Prompt-prefix reuse in llama.cpp: what a prompt costs cold, when its prefix was the previous prompt, and when it
was seen a few prompts ago and kept in llama-cpp-python's RAM prompt cache. Ratios measured in one run.

Why it matters here: PHIA re-sends its whole growing transcript every step (the previous prompt is a prefix of the
next), and the paper's backbones, systems and look-backs send many prompts that share a long prefix or repeat
exactly (the paper dry run's stand-ins serve every backbone from one instance with this cache).

Model: the demo's agent model (Qwen2.5-Coder-0.5B, 2 threads); prompt: a real PMData window (the Health-LLM
rendering) and a next "turn" of ~100 tokens appended to it, as a PHIA step does. Each case is timed on a fresh
context (reset) so only the reuse under test applies; best of --repeats.

    python bench/bench_prefix.py [--repeats 3] [--model qwen2.5-coder-0.5b] [--out bench/prefix.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from llama_cpp import Llama, LlamaRAMCache

    from balms.data.loading import load_dataset
    from balms.data.render import render_window
    from balms.data.samples import build_samples, window_of
    from balms.models.gguf_assets import gguf_path

    tables = load_dataset("pmdata")
    samples = build_samples(tables).samples
    base = render_window(window_of(tables, samples[0]))
    other = render_window(window_of(tables, samples[-1]))  # another user's window: no shared prefix beyond a line
    turn = base + "\n\nObservation: " + ", ".join(f"day {i}: {1000 + 37 * i} steps" for i in range(1, 15))
    llm = Llama(model_path=str(gguf_path(a.model)), n_ctx=4096, n_threads=2, n_threads_batch=2, verbose=False)
    n_turn = len(llm.tokenize(turn.encode()))
    n_base = len(llm.tokenize(base.encode()))

    def timed(prompt: str) -> float:
        t = time.perf_counter()
        llm.create_completion(prompt, max_tokens=1, temperature=0.0)
        return time.perf_counter() - t

    def case(prep) -> float:
        best = float("inf")
        for _ in range(a.repeats):
            llm.reset()
            llm.set_cache(None)
            prep()
            best = min(best, timed(turn))
        return best

    cold = case(lambda: None)
    growing = case(lambda: timed(base))  # the previous prompt is a prefix of this one (PHIA's next step)

    def seen_before():  # the same prompt two prompts ago: only the RAM cache can bring it back
        llm.set_cache(LlamaRAMCache(capacity_bytes=512 << 20))
        timed(turn)
        timed(other)

    cached = case(seen_before)

    def seen_before_no_cache():
        timed(turn)
        timed(other)

    uncached = case(seen_before_no_cache)
    res = {"model": a.model, "prompt_tokens": n_turn, "prefix_tokens": n_base, "repeats": a.repeats,
           "cold_s": round(cold, 3), "growing_prefix_s": round(growing, 3), "ram_cache_s": round(cached, 3),
           "seen_before_without_cache_s": round(uncached, 3),
           "speedup_growing_prefix": round(cold / growing, 2), "speedup_ram_cache": round(cold / cached, 2),
           "speedup_without_cache": round(cold / uncached, 2)}
    print(json.dumps(res, indent=1))
    print(f"{a.model}: a {n_turn}-token prompt costs {cold:.2f} s cold; {growing:.2f} s when its first {n_base} "
          f"tokens were the previous prompt (x{res['speedup_growing_prefix']}); {cached:.2f} s when seen two prompts "
          f"ago with the RAM prompt cache (x{res['speedup_ram_cache']}), {uncached:.2f} s without it "
          f"(x{res['speedup_without_cache']})")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
