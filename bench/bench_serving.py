"""llama.cpp's own server on this CPU: what continuous batching and prompt-prefix reuse buy, as ratios in one run.

The server (`llama-server`, built by scripts/build-llama-server from the llama.cpp that llama-cpp-python vendors,
same flags) serves the demo's agent model (Qwen2.5-Coder-0.5B Q4_K_M) with --slots parallel slots on 2 threads.

Batching: the same requests sent 1, 2 and 4 at a time (continuous batching decodes the in-flight ones together).
The batching server keeps no prompt between requests (--cache-ram 0, cache_prompt off), so the repeated runs
cannot reuse each other's prompts.
- decode: a short prompt and 128 generated tokens (ignore_eos): aggregate generated tokens per second of wall time;
- end to end: real Health-LLM CoT prompts (paper style, PMData) with 128 generated tokens: requests per minute,
  since on a CPU the prompt is most of a call's cost;
- greedy answers identical to one-at-a-time (batched kernels may round differently).
Prefix reuse: real prompt sequences sent one after another to a fresh one-slot server, with prompt reuse off
(cache_prompt off, --cache-ram 0) and at the server's defaults (the slot's previous prompt and its RAM cache);
ratio of prompt-processing time, and the share of prompt tokens not processed again:
- instruction block: Health-LLM zero-shot prompts of successive PMData samples (only the instructions are shared);
- PHIA's growing transcript: every step of one real episode (each prompt extends the previous one);
- RAPTOR's per-day summaries: the summary prompts of one 14-day window (same instructions, a different day each).

    python bench/bench_serving.py [--slots 4] [--requests 8] [--out bench/serving.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = "qwen2.5-coder-0.5b"


def server_binary() -> str:
    if os.environ.get("LLAMA_SERVER"):
        return os.environ["LLAMA_SERVER"]
    out = subprocess.run([str(ROOT / "scripts" / "build-llama-server"), sys.executable], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One llama-server process on a loopback port; stopped on exit."""

    def __init__(self, binary: str, model: Path, slots: int, ctx_per_slot: int = 4096, threads: int = 2,
                 cache_ram: int | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(ROOT / "build" / "bench-serving-server.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port), "-np", str(slots),
             "-c", str(ctx_per_slot * slots), "-t", str(threads), "-tb", str(threads), "--seed", "0",
             *(["--cache-ram", str(cache_ram)] if cache_ram is not None else [])],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server exited ({self.proc.returncode}); see build/bench-serving-server.log")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit("llama-server did not become healthy in 120 s")

    def chat(self, messages: list[dict], max_tokens: int, *, cache_prompt: bool = False, ignore_eos: bool = False,
             slot: int | None = None) -> dict:
        body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 0,
                "cache_prompt": cache_prompt, "ignore_eos": ignore_eos}
        if slot is not None:
            body["id_slot"] = slot
        r = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=1800)
        r.raise_for_status()
        return r.json()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Recorder:
    """A backend that records every request; replies come from `inner` (a real model) or a fixed text."""

    def __init__(self, inner=None, reply: str = "Answer: 3"):
        self.inner, self.reply, self.calls = inner, reply, []
        self.model_id = inner.model_id if inner is not None else "recorder"

    def generate(self, messages, params):
        from balms.models.base import Completion

        self.calls.append([{"role": m.role, "content": m.content} for m in messages])
        if self.inner is not None:
            return self.inner.generate(messages, params)
        return Completion(text=self.reply, model_id=self.model_id, prompt_tokens=1, completion_tokens=1)


def real_sequences(n_prompts: int) -> dict[str, list[list[dict]]]:
    """The prompt sequences of the agents on real PMData: Health-LLM (zero-shot and CoT) over successive samples,
    one PHIA episode (real model replies, through the response cache), one RAPTOR window's summaries."""
    from bench_roles import pick_samples

    from balms.agents.registry import make_agent
    from balms.models.registry import get_backend

    cfg, samples = pick_samples(2 * n_prompts, seed=0)
    pm = [(t, s) for t, s in samples if s.sample_id.startswith("pmdata")][:n_prompts]
    seqs: dict[str, list[list[dict]]] = {}
    for key, cot in (("healthllm_zs", False), ("healthllm_cot", True)):
        rec = Recorder()
        agent = make_agent("healthllm", cot=cot, style=cfg.prompt_style, max_tokens=16)
        for tables, s in pm:
            agent.predict(s, tables, rec)
        seqs[key] = rec.calls
    rec = Recorder(get_backend(MODEL))  # real replies (cached after the first run), so the transcript is real
    tables, s = pm[0]
    make_agent("phia", executor="faithful", max_iters=cfg.phia_max_iters, max_tokens=cfg.phia_step_tokens,
               primer=cfg.phia_primer, fence_stop=cfg.phia_fence_stop, force_answer=cfg.phia_force_answer,
               seed=cfg.seed).predict(s, tables, rec)
    seqs["phia_episode"] = rec.calls
    rec = Recorder(reply="Steps were low and sleep was short on this day.")
    # an empty summary cache, so every day's summary is asked for
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {"BALMS_CACHE_DIR": tmp}):
        make_agent("raptor", style=cfg.prompt_style, max_tokens=16, summary_max_tokens=cfg.raptor_summary_tokens,
                   memory=cfg.raptor_memory, seed=cfg.seed).predict(s, tables, rec)
    seqs["raptor_summaries"] = rec.calls[:-1]  # the last call is the answer, not a summary
    return seqs


def batching(server: Server, prompts: list[list[dict]], in_flight: int, max_tokens: int, ignore_eos: bool) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        outs = list(pool.map(lambda m: server.chat(m, max_tokens, ignore_eos=ignore_eos), prompts))
    wall = time.perf_counter() - t0
    gen = sum(o["usage"]["completion_tokens"] for o in outs)
    return {"in_flight": in_flight, "requests": len(outs), "wall_s": round(wall, 2), "gen_tokens": gen,
            "gen_tok_per_s": round(gen / wall, 2), "requests_per_min": round(60 * len(outs) / wall, 2),
            "texts": [o["choices"][0]["message"]["content"] for o in outs]}


def prefix_reuse(binary: str, model: Path, seq: list[list[dict]]) -> dict:
    """The sequence on a fresh one-slot server, without any prompt reuse (cache_prompt off, RAM cache 0) and with
    the server's defaults (the slot's previous prompt and its RAM prompt cache): only earlier prompts of the same
    sequence can be reused."""
    rows = {}
    for cache in (False, True):
        server = Server(binary, model, 1, cache_ram=None if cache else 0)
        ms, processed, total = 0.0, 0, 0
        try:
            server.chat([{"role": "user", "content": "Hello"}], 2, cache_prompt=False)  # warm-up, shares nothing
            for msgs in seq:
                o = server.chat(msgs, 1, cache_prompt=cache)
                ms += o["timings"]["prompt_ms"]
                processed += o["timings"]["prompt_n"]
                total += o["usage"]["prompt_tokens"]
        finally:
            server.stop()
        rows[cache] = {"prompt_ms": round(ms, 1), "processed": processed, "total": total}
    off, on = rows[False], rows[True]
    return {"prompts": len(seq), "prompt_tokens": off["total"], "prompt_s_cache_off": round(off["prompt_ms"] / 1e3, 2),
            "prompt_s_cache_on": round(on["prompt_ms"] / 1e3, 2),
            "speedup": round(off["prompt_ms"] / on["prompt_ms"], 2) if on["prompt_ms"] else None,
            "tokens_reused_share": round(1 - on["processed"] / max(on["total"], 1), 3)}


def batching_runs(binary: str, model: Path, a, seqs) -> tuple[list[dict], list[dict]]:
    """Decode-only and CoT end-to-end requests at 1, 2 and 4 in flight on one server with --slots slots."""
    server = Server(binary, model, a.slots, cache_ram=0)  # no prompt reused across the repeated runs
    try:
        server.chat([{"role": "user", "content": "Hello"}], 4)  # warm-up
        short = [[{"role": "user", "content": f"Write a long essay on sleep and mood, part {i}."}]
                 for i in range(a.requests)]
        cot = seqs["healthllm_cot"][: a.requests]
        decode, e2e = [], []
        for n in (1, 2, 4):
            decode.append(batching(server, short, n, a.gen_tokens, ignore_eos=True))
            e2e.append(batching(server, cot, n, a.gen_tokens, ignore_eos=False))
            print(f"in flight {n}: decode {decode[-1]['gen_tok_per_s']} tok/s, CoT end to end "
                  f"{e2e[-1]['requests_per_min']} req/min", flush=True)
        for rows in (decode, e2e):
            base = rows[0]
            for r in rows:
                r["gen_ratio_vs_1"] = round(r["gen_tok_per_s"] / base["gen_tok_per_s"], 2)
                r["req_ratio_vs_1"] = round(r["requests_per_min"] / base["requests_per_min"], 2)
                r["greedy_same_as_1"] = sum(x == y for x, y in zip(r["texts"], base["texts"], strict=True))
    finally:
        server.stop()
    return [{k: v for k, v in r.items() if k != "texts"} for r in decode], \
        [{k: v for k, v in r.items() if k != "texts"} for r in e2e]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--requests", type=int, default=8, help="requests per batching measurement")
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--only", choices=("batching", "prefix"), default=None,
                    help="re-measure one part; the other is kept from an existing --out file")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from balms.models.gguf_assets import gguf_path

    if not os.environ.get("BALMS_RAW_DIR"):
        from balms.paths import shared_data_dir

        if shared_data_dir() is not None:
            os.environ["BALMS_RAW_DIR"] = str(shared_data_dir())
    (ROOT / "build").mkdir(exist_ok=True)
    seqs = real_sequences(a.requests)
    binary = server_binary()
    model = gguf_path(MODEL)
    load0 = round(os.getloadavg()[0], 2)
    previous = json.loads(Path(a.out).read_text()) if a.only and a.out and Path(a.out).exists() else {}
    if a.only == "prefix":
        decode, e2e = previous["batching_decode"], previous["batching_cot_end_to_end"]
    else:
        decode, e2e = batching_runs(binary, model, a, seqs)
    if a.only == "batching":
        prefix = previous["prefix_reuse"]
    else:
        prefix = {name: prefix_reuse(binary, model, seqs[key]) for name, key in (
            ("instruction block (Health-LLM zero-shot, successive samples)", "healthllm_zs"),
            ("PHIA's growing transcript (one episode)", "phia_episode"),
            ("RAPTOR's per-day summaries (one window)", "raptor_summaries"))}
    for k, v in prefix.items():
        print(f"prefix reuse, {k}: x{v['speedup']} ({v['tokens_reused_share']:.0%} of prompt tokens reused)")

    doc = {"command": "python bench/bench_serving.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "server": binary, "build": (Path(binary).parent / "BUILD").read_text().strip()
           if (Path(binary).parent / "BUILD").exists() else None, "model": MODEL, "slots": a.slots,
           "cpu_count": os.cpu_count(), "machine": platform.machine(), "load_1m_start": load0,
           "load_1m_end": round(os.getloadavg()[0], 2), "measured_at": time.strftime("%Y-%m-%d %H:%M"),
           "batching_decode": decode, "batching_cot_end_to_end": e2e,
           "prefix_reuse": prefix}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"# wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    raise SystemExit(main())
