"""llama.cpp build flavours on this CPU: prompt and generation speed of the installed build against the
portable AVX2 wheel, in one run, as ratios (what `scripts/install-llama-cpp` chose and why).

Each flavour runs in its own process (a build is a shared library; two cannot share one interpreter): the
portable wheel is unpacked into a temporary folder that shadows the installed package on PYTHONPATH. The
model is the embedded default (Qwen2.5-Coder-0.5B Q4_K_M, 2 threads); the prompt is a real PMData window
repeated three times (2,733 tokens here); generation is 128 tokens of free text. Best of --repeats per measurement.
It also measures what the second core buys (`threads` in bench/llama.json): the installed build at 1 and 2 threads
(BALMS_LLAMA_THREADS) and two 1-thread processes at once; prompt processing that does not speed up with threads
is why the demo is sized by prompt tokens and runs one call at a time.

    python bench/bench_llama.py [--wheels ../shared/wheels] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys, time
import llama_cpp
from balms.models.registry import get_backend
from balms.models.base import GenParams, Message
from balms.data.loading import load_dataset
from balms.data.render import render_window
from balms.data.samples import build_samples, window_of

repeats = int(sys.argv[1])
tables = load_dataset("pmdata")
sample = build_samples(tables).samples[0]
window = render_window(window_of(tables, sample))
be = get_backend("qwen2.5-coder-0.5b", cache_mode="off")
prompt_s, gen_s, n_prompt, n_gen = [], [], 0, 0
for i in range(repeats):
    # a different system line each time so no prompt prefix is reused from the previous call
    msgs = [Message("system", f"You are a careful analyst ({i})."), Message("user", (window + "\n") * 3)]
    t = time.perf_counter(); c = be.generate(msgs, GenParams(temperature=0, max_tokens=1, seed=i))
    prompt_s.append(time.perf_counter() - t); n_prompt = c.prompt_tokens
    msgs = [Message("system", f"You are a writer ({i})."),
            Message("user", "Write a long essay, at least 600 words, on sleep, exercise and mood.")]
    t = time.perf_counter(); c = be.generate(msgs, GenParams(temperature=0, max_tokens=128, seed=i))
    gen_s.append(time.perf_counter() - t); n_gen = c.completion_tokens
print(json.dumps({"module": llama_cpp.__file__, "system_info": llama_cpp.llama_print_system_info().decode().strip(),
                  "prompt_tokens": n_prompt, "prompt_tok_s": n_prompt / min(prompt_s),
                  "gen_tokens": n_gen, "gen_tok_s": n_gen / min(gen_s)}))
"""


def _probe_env(pythonpath: str | None, threads: int | None) -> dict:
    env = dict(os.environ, BALMS_CACHE_DIR=os.environ.get("BALMS_CACHE_DIR", str(ROOT / ".cache")))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    if threads:
        env["BALMS_LLAMA_THREADS"] = str(threads)
    return env


def probes(repeats: int, pythonpath: str | None = None, threads: int | None = None, at_once: int = 1) -> list[dict]:
    """`at_once` probe processes started together (each its own model and threads); one result each."""
    procs = [subprocess.Popen([sys.executable, "-c", PROBE, str(repeats)], env=_probe_env(pythonpath, threads),
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(at_once)]
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"probe failed:\n{err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def probe(repeats: int, pythonpath: str | None = None, threads: int | None = None) -> dict:
    return probes(repeats, pythonpath, threads)[0]


def thread_scaling(repeats: int) -> dict:
    """What the second core buys: one process at 1 and at 2 threads, and two 1-thread processes at once (the
    aggregate is what two independent workers would get)."""
    one, two = probe(repeats, threads=1), probe(repeats, threads=2)
    pair = probes(repeats, threads=1, at_once=2)
    agg = {k: sum(p[k] for p in pair) for k in ("prompt_tok_s", "gen_tok_s")}
    return {"1_thread": one, "2_threads": two, "two_1_thread_processes": pair,
            "ratio_2_threads_vs_1": {"prompt": two["prompt_tok_s"] / one["prompt_tok_s"],
                                     "generation": two["gen_tok_s"] / one["gen_tok_s"]},
            "ratio_two_processes_vs_1_thread": {"prompt": agg["prompt_tok_s"] / one["prompt_tok_s"],
                                                "generation": agg["gen_tok_s"] / one["gen_tok_s"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=str(ROOT.parent / "shared" / "wheels"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "llama.json"))
    ap.add_argument("--no-threads", action="store_true", help="skip the 1 vs 2 threads vs two processes rows")
    args = ap.parse_args()
    result = {"machine": platform.platform(), "cpus": os.cpu_count(), "installed": probe(args.repeats)}
    if not args.no_threads:
        result["threads"] = thread_scaling(args.repeats)
    wheels = sorted(Path(args.wheels).glob("llama_cpp_python-*.whl"))
    if wheels:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp,
                            str(wheels[-1])], check=True)
            result["portable_wheel"] = probe(args.repeats, tmp)
        i, p = result["installed"], result["portable_wheel"]
        result["ratio_installed_vs_portable"] = {"prompt": i["prompt_tok_s"] / p["prompt_tok_s"],
                                                 "generation": i["gen_tok_s"] / p["gen_tok_s"]}
    else:
        result["portable_wheel"] = f"no wheel in {args.wheels}: nothing to compare against"
    Path(args.out).write_text(json.dumps(result, indent=1))
    for k in ("installed", "portable_wheel"):
        v = result[k]
        if isinstance(v, dict):
            flags = [f for f in v["system_info"].split("|") if "AVX512 " in f or "AVX2 " in f]
            print(f"{k:15s} prompt {v['prompt_tok_s']:6.1f} tok/s ({v['prompt_tokens']} tokens)  "
                  f"generation {v['gen_tok_s']:5.1f} tok/s  [{';'.join(f.strip() for f in flags)}]")
    if "threads" in result:
        t = result["threads"]
        for k in ("1_thread", "2_threads"):
            print(f"installed, {k:9s} prompt {t[k]['prompt_tok_s']:6.1f} tok/s  "
                  f"generation {t[k]['gen_tok_s']:5.1f} tok/s")
        r2, rp = t["ratio_2_threads_vs_1"], t["ratio_two_processes_vs_1_thread"]
        print(f"2 threads / 1: prompt x{r2['prompt']:.2f}, generation x{r2['generation']:.2f}; two 1-thread processes "
              f"at once / one: prompt x{rp['prompt']:.2f}, generation x{rp['generation']:.2f}")
    if "ratio_installed_vs_portable" in result:
        r = result["ratio_installed_vs_portable"]
        print(f"installed / portable: prompt x{r['prompt']:.2f}, generation x{r['generation']:.2f}")


if __name__ == "__main__":
    main()
