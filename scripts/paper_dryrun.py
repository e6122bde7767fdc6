#!/usr/bin/env python
"""`make paper-dryrun`: the paper profile end to end on loopback stand-ins, one sample per cell, then a check.

What serves what (every address is 127.0.0.1; every process is started here and stopped on exit):
- one llama.cpp server (llama-cpp-python's own app behind tests/strict_llama_server.py, which refuses foreign
  model names like vLLM) per vLLM model id of the paper profile: Qwen/Qwen2.5-7B-Instruct,
  mistralai/Mistral-7B-Instruct-v0.3, Qwen/Qwen2.5-14B-Instruct and the judge meta-llama/Llama-3.3-70B-Instruct,
  each serving the embedded SmolLM2-135M under that id. These are the profile's `servers`, so balms routes each
  model by /v1/models to its own server only.
- a reasoning stand-in for deepseek-ai/DeepSeek-R1-Distill-Qwen-14B: a thin OpenAI-compatible proxy (listed in
  `servers` too) that forwards to a hidden llama.cpp server and wraps the answer as `<think>...</think>answer`,
  what an R1 distill writes when vLLM runs without a reasoning parser.
- an Anthropic stand-in speaking Messages and Message Batches (tests/fake_servers.py's FakeAnthropicBatchServer
  with its model answers taken from the hidden llama.cpp server); the official `anthropic` client reaches it via
  ANTHROPIC_BASE_URL with a dummy key, and `anthropic_batch: true` sends Claude's single-call cells as batches.

Then `make paper PROFILE=paper YES=1` with small budgets (P overrides), writing only under build/paper-dryrun/
(BALMS_OUTPUT_DIR, BALMS_RUNS_DIR, BALMS_CACHE_DIR, EXEC_DIR), and a check that every backbone and the judge
appear in every paper artefact (tables' CSVs, the artefact index, the figures' panel lists), one panel per
backbone where the paper has one, and that the batch and reasoning stand-ins were used.

    python scripts/paper_dryrun.py [--timeout-s 1500] [--make make]     # exit 0 = every check passed
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BUILD = ROOT / "build" / "paper-dryrun"
VLLM_IDS = {  # registry name -> served id, each on its own llama.cpp server
    "Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
    "Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen2.5-14B-Instruct": "Qwen/Qwen2.5-14B-Instruct",
    "Llama-3.3-70B-Instruct": "meta-llama/Llama-3.3-70B-Instruct",
}
REASONING = ("DeepSeek-R1-Distill-Qwen-14B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B")
UPSTREAM_ALIAS = "smollm2-135m-dryrun-upstream"  # the hidden server behind the proxies (not in `servers`)
# one sample per cell and small budgets: a plumbing run, its numbers mean nothing
P_OVERRIDES = [
    ("n_samples", "1"), ("lookbacks", "[7, 14]"), ("raptor_memory", "lookback"), ("concurrency", "1"),
    ("zs_max_tokens", "16"), ("cot_max_tokens", "48"), ("phia_max_iters", "2"), ("phia_step_tokens", "96"),
    ("raptor_summary_tokens", "24"), ("judge_max_tokens", "256"), ("reasoning_zs_max_tokens", "32"),
    ("reasoning_cot_max_tokens", "64"), ("reasoning_phia_step_tokens", "96"), ("anthropic_batch", "true"),
]
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(msg: str) -> None:
    print(f"[paper-dryrun {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------- stand-ins
def upstream_chat(url: str, body: dict) -> dict:
    import httpx

    r = httpx.post(url + "/v1/chat/completions", json={**body, "model": UPSTREAM_ALIAS}, timeout=600)
    r.raise_for_status()
    return r.json()


def make_proxies(upstream: str):
    from fake_servers import FakeAnthropicBatchServer, FakeOpenAIServer

    class ReasoningStandIn(FakeOpenAIServer):
        """Serves REASONING's id only (vLLM's 404 otherwise); answers as an R1 distill without a parser."""

        def respond(self, payload: dict) -> dict:
            data = upstream_chat(upstream, payload)
            msg = data["choices"][0]["message"]
            text = (msg.get("content") or "").strip()
            msg["content"] = f"<think>\nStand-in trace (SmolLM2 draft): {text}\n</think>\n\n{text}"
            u = data.get("usage") or {}
            ct = int(u.get("completion_tokens") or 0) * 2  # the trace is the draft again
            data["usage"] = {"prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": ct,
                             "total_tokens": int(u.get("prompt_tokens") or 0) + ct}
            data["model"] = payload.get("model")
            return data

    class AnthropicStandIn(FakeAnthropicBatchServer):
        """Messages + Message Batches; each answer is the hidden llama.cpp server's (one request at a time)."""

        def respond(self, payload: dict) -> dict:
            def text_of(content) -> str:
                if isinstance(content, str):
                    return content
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))

            system = payload.get("system")
            msgs = ([{"role": "system", "content": text_of(system)}] if system else []) + [
                {"role": m["role"], "content": text_of(m["content"])} for m in payload.get("messages", [])]
            body = {"messages": msgs, "max_tokens": payload.get("max_tokens", 256), "temperature": 0.0}
            if payload.get("stop_sequences"):
                body["stop"] = payload["stop_sequences"]
            fmt = (payload.get("output_config") or {}).get("format") or {}
            if fmt.get("type") == "json_schema":
                body["response_format"] = {"type": "json_object", "schema": fmt.get("schema")}
            with self.llm_lock:
                data = upstream_chat(upstream, body)
            ch = data["choices"][0]
            u = data.get("usage") or {}
            return {"id": f"msg_dryrun_{data.get('id', '')[-12:]}", "type": "message", "role": "assistant",
                    "model": payload.get("model"),
                    "content": [{"type": "text", "text": ch["message"].get("content") or ""}],
                    "stop_reason": "max_tokens" if ch.get("finish_reason") == "length" else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": int(u.get("prompt_tokens") or 0),
                              "output_tokens": int(u.get("completion_tokens") or 0)}}

    reasoning = ReasoningStandIn(models=[REASONING[1]], strict=True)
    anthropic = AnthropicStandIn(models=["claude-haiku-4-5"], polls_to_end=1)
    anthropic.llm_lock = threading.Lock()
    return reasoning, anthropic


class Servers:
    """The llama.cpp processes and the in-process proxies; `stop()` ends all of them (idempotent)."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[tuple[subprocess.Popen, str, Path]] = []
        self.proxies = []
        self.urls: dict[str, str] = {}

    def start_llama(self, alias: str, model_path: str, threads: int) -> str:
        port = free_port()
        cfg = {"host": "127.0.0.1", "port": port,
               "models": [{"model": model_path, "model_alias": alias, "n_ctx": 8192, "n_threads": threads,
                           "n_threads_batch": threads, "verbose": False}]}
        name = alias.replace("/", "_")
        (self.workdir / f"{name}.json").write_text(json.dumps(cfg))
        log = self.workdir / f"{name}.log"
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "strict_llama_server.py"), "--config_file",
                                 str(self.workdir / f"{name}.json")], stdout=open(log, "wb"),
                                stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        self.procs.append((proc, url, log))
        return url

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + START_TIMEOUT_S
        for proc, url, log in self.procs:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama.cpp server {url} exited ({proc.returncode}):\n"
                                       f"{log.read_text(errors='replace')[-2000:]}")
                try:
                    if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama.cpp server {url} not ready after {START_TIMEOUT_S} s (log: {log})")
                time.sleep(0.3)

    def stop(self) -> None:
        for p in self.proxies:
            try:
                p.stop()
            except Exception:  # noqa: BLE001 - stopping is best effort, the others still stop
                pass
        self.proxies = []
        for proc, _, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, _, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


# ------------------------------------------------------------------------------------------------ check
def check(out_dir: Path, backbones: list[str], judge: str, counters: dict) -> list[str]:
    """Problems found (empty = pass); prints what it read."""
    import pandas as pd

    tables, figures = out_dir / "paper" / "tables", out_dir / "paper" / "figures"
    problems: list[str] = []

    def need(cond: bool, msg: str) -> None:
        print(("  ok   " if cond else "  FAIL ") + msg)
        if not cond:
            problems.append(msg)

    def csv(stem: str):
        p = tables / f"{stem}.csv"
        need(p.exists(), f"{stem}.csv exists")
        return pd.read_csv(p) if p.exists() else None

    for stem in ("table3_zero_shot", "table3_cot"):
        t = csv(stem)
        if t is not None:
            for b in backbones:
                c = f"ours {b}"
                need(c in t.columns and f"paper {b}" in t.columns
                     and list(t.columns).index(c) == list(t.columns).index(f"paper {b}") + 1,
                     f"{stem}: 'ours {b}' right beside 'paper {b}'")
                if c in t.columns:
                    need(t[f"{c} parse fail"].notna().all(),
                         f"{stem}: {b} has a cell in each of {len(t)} rows ({t[c].notna().sum()} with a parsed MAE)")
    grouped = (("prediction_zero_shot_cells", ["dataset", "system"]), ("latency", ["dataset", "system", "cot"]))
    for stem, keys in grouped:
        t = csv(stem)
        if t is not None:
            per = t.groupby(keys)["model"].apply(set)
            need(all(set(backbones) <= s for s in per), f"{stem}: all {len(backbones)} backbones in each of "
                 f"{len(per)} ({', '.join(keys)}) groups")
    agg = csv("fig4_judge_aggregate")
    if agg is not None:
        need(set(agg["model"]) == set(backbones), f"fig4_judge_aggregate: models {sorted(set(agg['model']))}")
        need(set(agg["dataset"]) == {"globem"} and set(agg["system"]) == {"healthllm", "rag", "phia"},
             f"fig4_judge_aggregate: GLOBEM x Health-LLM/RAG/PHIA only (got {sorted(set(agg['dataset']))} x "
             f"{sorted(set(agg['system']))})")
    t6 = csv("table6_globem_tier2")
    if t6 is not None:
        ours = t6[t6["who"] == "ours"]
        need(set(ours["backbone"]) == set(backbones),
             f"table6_globem_tier2: ours rows for {sorted(set(ours['backbone']))}")
    idx_p = tables / "index.csv"
    need(idx_p.exists(), "artefact index exists")
    if idx_p.exists():
        idx = pd.read_csv(idx_p)
        print(f"  index: {len(idx)} artefacts")
        paper_arts = {"Table 3", "Table 3 (+CoT)", "Table 3 (cells)", "Figure 6", "Figures 6, 8-10 (table)",
                      "Figure 4", "Figure 4 (table)", "Table 6"}
        for a in sorted(paper_arts):
            rows = idx[idx["artefact"] == a]
            need(len(rows) == 1, f"index lists {a!r}")
            if len(rows):
                models = set(str(rows["models"].iloc[0]).split(";"))
                want = set(backbones) | ({judge} if a.startswith(("Figure 4", "Table 6")) else set())
                need(want <= models, f"index {a!r}: models include every backbone"
                     + (" and the judge" if judge in want else ""))
        f810 = idx[idx["artefact"].str.startswith("Figures 8-10 (")]
        need(len(f810) == 3, f"Figures 8-10: a figure per dataset ({len(f810)})")
    for stem, per_panel in [("fig6_latency_per_system", 3), ("fig4_tier1", 1)] + [
            (f"fig8_10_latency_{d}", 1) for d in ("diversityone", "pmdata", "globem")]:
        p = figures / f"{stem}.panels.json"
        need(p.exists(), f"{stem}: figure and panel list exist")
        if p.exists():
            info = json.loads(p.read_text())
            panels = info["panels"]
            hit = {b: sum(b in t for t in panels) for b in backbones}
            need(len(panels) == per_panel * len(backbones) and all(v == per_panel for v in hit.values()),
                 f"{stem}: {len(panels)} panels, {per_panel} per backbone ({hit})")
            need(all(b in info["title"] for b in backbones) and "CPU cores" not in info["title"],
                 f"{stem}: title names every backbone that ran")
    need(counters["batches"] > 0, f"Claude through Message Batches: {counters['batches']} batch(es), "
         f"{counters['batch_requests']} request(s); {counters['direct']} direct Messages call(s)")
    need(counters["reasoning"] > 0, f"reasoning stand-in answered {counters['reasoning']} request(s)")
    return problems


# ------------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout-s", type=float, default=1500, help="stop the notebooks after this long")
    ap.add_argument("--make", default=os.environ.get("MAKE", "make"))
    ap.add_argument("--venv", default=os.environ.get("VENV", ".venv"))
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads per server")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    from balms.models.gguf_assets import gguf_path
    from balms.models.registry import JUDGE_MODEL

    for sub in ("runs", "out", "executed", "servers"):
        shutil.rmtree(BUILD / sub, ignore_errors=True)
    (BUILD / "servers").mkdir(parents=True)
    cache = BUILD / "cache"  # fresh responses/batches/summaries every run; embeddings are kept (not model calls)
    cache.mkdir(parents=True, exist_ok=True)
    for f in cache.glob("*"):
        if f.name.startswith(("responses.sqlite", "anthropic_batches.sqlite", "raptor_summaries.sqlite")):
            f.unlink()
    model = str(gguf_path("smollm2-135m"))

    srv = Servers(BUILD / "servers")

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through `finally`: every server stops

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    make = None
    try:
        for name, mid in VLLM_IDS.items():
            srv.urls[name] = srv.start_llama(mid, model, a.threads)
        upstream = srv.start_llama(UPSTREAM_ALIAS, model, a.threads)
        srv.wait_ready()
        reasoning, anthropic = make_proxies(upstream)
        srv.proxies = [reasoning.start(), anthropic.start()]
        srv.urls[REASONING[0]] = reasoning.url
        servers = [u + "/v1" for u in srv.urls.values()]
        say(f"{len(srv.procs)} llama.cpp servers (SmolLM2-135M) and 2 proxies up in {time.monotonic() - t0:.0f} s:")
        for name, u in srv.urls.items():
            print(f"    {name:30s} {u}")
        print(f"    {'(hidden upstream)':30s} {upstream}\n    {'Claude-Haiku-4.5 (Anthropic)':30s} {anthropic.url}")
        from balms.models.routing import check_models

        routes = check_models(list(VLLM_IDS) + [REASONING[0]], servers)
        assert all(len(v) == 1 for v in routes.values()), f"each model must route to exactly one server: {routes}"
        p = " ".join(f"-p {k} {v!r}" if " " in v else f"-p {k} {v}" for k, v in P_OVERRIDES)
        p += f" -p servers '{json.dumps(servers)}'"
        env = {k: v for k, v in os.environ.items() if k not in ("BALMS_VLLM_BASE_URLS", "BALMS_P")}
        env.update(BALMS_OUTPUT_DIR=str(BUILD / "out"), BALMS_RUNS_DIR=str(BUILD / "runs"),
                   BALMS_CACHE_DIR=str(cache), ANTHROPIC_API_KEY="dryrun-loopback-not-a-key",
                   ANTHROPIC_BASE_URL=anthropic.url)
        env.pop("BALMS_ANTHROPIC_MODEL", None)
        cmd = [a.make, "--no-print-directory", "paper", "PROFILE=paper", "YES=1", f"VENV={a.venv}",
               f"EXEC_DIR={BUILD.relative_to(ROOT)}/executed", f"P={p}"]
        say("running: " + " ".join(cmd[:6]) + " EXEC_DIR=... P=\"" + p + "\"")
        t_nb = time.monotonic()
        make = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
        try:
            rc = make.wait(timeout=a.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(30)
            say(f"FAILED: the notebooks did not finish within {a.timeout_s:g} s")
            return 1
        say(f"notebooks finished in {time.monotonic() - t_nb:.0f} s (make exit {rc})")
        if rc != 0:
            say("FAILED: make paper failed (see above)")
            return 1
        counters = {"batches": len(anthropic.batches),
                    "batch_requests": sum(len(b["requests"]) for b in anthropic.batches.values()),
                    "direct": anthropic.direct, "reasoning": len(reasoning.requests)}
        say("check: every backbone and the judge in every paper artefact")
        backbones = list(VLLM_IDS)[:3] + [REASONING[0], "Claude-Haiku-4.5"]
        from balms.experiments.config import load

        paper = load("paper")
        backbones = [b for b in paper.backbones if b in backbones]
        problems = check(BUILD / "out", backbones, JUDGE_MODEL, counters)
        say(f"{'PASSED' if not problems else f'FAILED ({len(problems)} problem(s))'} in "
            f"{time.monotonic() - t0:.0f} s wall")
        return 0 if not problems else 1
    finally:
        if make is not None and make.poll() is None:
            try:
                os.killpg(make.pid, signal.SIGTERM)
                make.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        srv.stop()


if __name__ == "__main__":
    raise SystemExit(main())
