#!/usr/bin/env python
"""`make paper-dryrun`: the paper profile end to end on loopback stand-ins, one sample per cell, then a check.

What serves what (every address is 127.0.0.1; every process is started here and stopped on exit):
- two llama.cpp servers (llama-cpp-python's own app behind tests/strict_llama_server.py, which refuses foreign
  model names like vLLM), each ONE SmolLM2-135M instance with a RAM prompt cache answering two of the paper
  profile's vLLM model ids: A = Qwen/Qwen2.5-7B-Instruct + mistralai/Mistral-7B-Instruct-v0.3, B =
  Qwen/Qwen2.5-14B-Instruct + the judge meta-llama/Llama-3.3-70B-Instruct. They are the profile's `servers`, so
  balms routes each model by /v1/models to the one server that lists it; each server logs every name it was sent,
  and the check requires that no call was refused (a mis-routed call would be a 404) and that every id reached its
  server. One instance per server (not llama-cpp-python's one per name, swapped in and out) with its prompt cache:
  every backbone is sent the same prompts, so all but the first on an instance skip the prefill.
- a reasoning stand-in for deepseek-ai/DeepSeek-R1-Distill-Qwen-14B: a thin OpenAI-compatible proxy (listed in
  `servers` too, refusing other names) that forwards to a server under a name it accepts but does not list
  (UPSTREAM_OF: server A), and wraps the answer as `<think>...</think>answer`, what an R1 distill writes when vLLM
  runs without a reasoning parser.
- an Anthropic stand-in speaking Messages and Message Batches (tests/fake_servers.py's FakeAnthropicBatchServer
  with its answers taken from server B the same way, so the two servers share the work); the official `anthropic`
  client reaches it via ANTHROPIC_BASE_URL with a dummy key, and `anthropic_batch: true` sends Claude's single-call
  cells as batches.

Then `make paper PROFILE=paper YES=1 PLAN=skip` (the profile's notebooks; the plan is tests/test_plan.py's) with P
overrides that keep every artefact but shrink each call (P_OVERRIDES says why each), writing only under
build/paper-dryrun/ (BALMS_OUTPUT_DIR, BALMS_RUNS_DIR, BALMS_CACHE_DIR, EXEC_DIR), and a check that every backbone
and the judge appear in every paper artefact (tables' CSVs, the artefact index, the figures' panel lists), one panel
per backbone where the paper has one, no record with an error, and that the batch and reasoning stand-ins were used.

The goal is 15 minutes on 2 cores; the verdict line says whether the run was within it. The hard deadline
(--timeout-s; the Makefile sets it) stops the notebooks and fails the run, so CI fails rather than overruns.

    python scripts/paper_dryrun.py [--timeout-s 1200] [--jobs 2] [--threads N]   # exit 0 = every check passed
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BUILD = ROOT / "build" / "paper-dryrun"
# the paper profile's vLLM model ids, two per llama.cpp server (registry name -> served id)
LLAMA_GROUPS = {
    "A": {"Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
          "Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-Instruct-v0.3"},
    "B": {"Qwen2.5-14B-Instruct": "Qwen/Qwen2.5-14B-Instruct",
          "Llama-3.3-70B-Instruct": "meta-llama/Llama-3.3-70B-Instruct"},
}
VLLM_IDS = {name: mid for group in LLAMA_GROUPS.values() for name, mid in group.items()}
REASONING = ("DeepSeek-R1-Distill-Qwen-14B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B")
UPSTREAM_ALIAS = "smollm2-135m-dryrun-upstream"  # the proxies' upstream: a name a server accepts but does not list
# which server each proxy forwards to: the work split evenly (A answers two backbones and the reasoning stand-in, B
# one backbone, Claude and the judge), each proxy sent the prompts a backbone on its server was sent before it
UPSTREAM_OF = {"reasoning": "A", "anthropic": "B"}
N_CTX = 4096  # the longest dry-run prompt (a judge conversation with its repair turn) is ~2,500 SmolLM2 tokens
# One sample per cell and every artefact kept, each call made small: a plumbing run, its numbers mean nothing.
# Every notebook runs every backbone; what is cut is what no check reads:
P_OVERRIDES = [
    ("n_samples", "1"),
    # a 2-day window for every dataset (same target days): RAPTOR summarises one day instead of 6 or 13 (a day
    # summary is ~1,000 SmolLM2 tokens on PMData and DiversityOne: half of notebook 01's tokens at 3 days)
    ("lookback", "2"), ("lookbacks", "[2, 3]"), ("raptor_memory", "lookback"),
    ("concurrency", "1"),
    ("zs_max_tokens", "16"), ("cot_max_tokens", "32"), ("phia_max_iters", "1"), ("phia_step_tokens", "48"),
    ("raptor_summary_tokens", "16"), ("judge_max_tokens", "96"), ("reasoning_zs_max_tokens", "24"),
    ("reasoning_cot_max_tokens", "40"), ("reasoning_phia_step_tokens", "56"),
    # 04's GLOBEM sensor-set ablation on Health-LLM only, 05 on the faithful executor only (01's PHIA cells):
    # both notebooks still run every backbone through the same routing
    ("ablation_systems", "[healthllm]"), ("executors", "[faithful]"),
    ("anthropic_batch", "true"),
    # every stand-in is one CPU llama.cpp instance answering several models' calls in turn, so a call's wall time
    # includes its queue: the default per-call deadline (sized for a GPU server's output speed) would cut it off
    ("call_deadline_s", "600"),
]
TARGET_S = 900  # the goal: 15 minutes on 2 cores, servers to verdict (said in the verdict line)
DEADLINE_S = 1200  # the hard stop: past it the notebooks are stopped and the run fails (headroom for a noisy VM)
START_TIMEOUT_S = 120


def say(msg: str) -> None:
    print(f"[paper-dryrun {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------- stand-ins
def upstream_chat(url: str, body: dict) -> dict:
    import httpx

    r = httpx.post(url + "/v1/chat/completions", json={**body, "model": UPSTREAM_ALIAS}, timeout=600)
    r.raise_for_status()
    return r.json()


def make_proxies(upstreams: dict[str, str]):
    from fake_servers import FakeAnthropicBatchServer, FakeOpenAIServer

    class ReasoningStandIn(FakeOpenAIServer):
        """Serves REASONING's id only (vLLM's 404 otherwise); answers as an R1 distill without a parser."""

        def respond(self, payload: dict) -> dict:
            data = upstream_chat(upstreams["reasoning"], payload)
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
        """Messages + Message Batches; each answer is server A's under its hidden name (one request at a time)."""

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
                data = upstream_chat(upstreams["anthropic"], body)
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
        self.request_logs: dict[str, Path] = {}

    def start_llama(self, name: str, aliases: list[str], model_path: str, threads: int, hidden=()) -> str:
        """A strict llama.cpp server: ONE SmolLM2 instance with a RAM prompt cache answering every name of
        `aliases` (and `hidden`, accepted but not listed); logs every name it is sent. One instance, not one per
        name: the paper's backbones all get the same prompts, so every backbone after the first costs no prefill."""
        from strict_llama_server import start

        proc, url, req_log = start(aliases, self.workdir, name=name, threads=threads, n_ctx=N_CTX,
                                   model_path=model_path, shared=True, hidden=hidden, prompt_cache=True)
        self.request_logs[name] = req_log
        url = url.removesuffix("/v1")
        self.procs.append((proc, url, self.workdir / f"{name}.log"))
        return url

    def requests_seen(self, name: str) -> list[tuple[int, str]]:
        """(status, model) of every POST server `name` was sent."""
        from strict_llama_server import requests_seen

        return requests_seen(self.request_logs[name])

    def wait_ready(self) -> None:
        from strict_llama_server import wait_ready

        for proc, url, log in self.procs:
            wait_ready(proc, url + "/v1", timeout_s=START_TIMEOUT_S, log_path=log)

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
    for stem, per_panel in [("fig6_latency_per_system", 3), ("fig4_judge_radar", 1)] + [
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
def cpu_busy_fraction(window_s: float = 1.0) -> float:
    """Share of all cores busy over the next `window_s` (from /proc/stat), 0.0 where it cannot be read.

    Not the load average: that lags by minutes, so right after CI's test suite (or a paused job) it still reads
    high on an idle machine and would halve the dry run's speed for nothing."""
    def snap():
        with open("/proc/stat", encoding="ascii") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)  # total, idle + iowait

    try:
        t0, i0 = snap()
        time.sleep(window_s)
        t1, i1 = snap()
    except (OSError, ValueError):
        return 0.0
    return 0.0 if t1 == t0 else 1.0 - (i1 - i0) / (t1 - t0)


def default_threads() -> int:
    """llama.cpp threads per server: every core (at most 2) when the cores are free now; one when they are busy.

    An oversubscribed multi-threaded llama.cpp spins at its barriers: measured here with the 1-min load average
    at 8.5 on 2 cores, SmolLM2 prompt processing ran at 21 tok/s with 2 threads against 49 tok/s with 1. `main`
    divides this by the notebooks run at once (--jobs), each of which makes one call at a time."""
    cores = os.cpu_count() or 1
    busy = cpu_busy_fraction() > 0.5
    return 1 if busy or cores < 2 else min(2, cores)


def routing_problems(srv: "Servers", reasoning, anthropic) -> list[str]:
    """Every vLLM id reached its own llama.cpp server and no server refused a name (a mis-routed call is a 404)."""
    problems = []
    for name, group in LLAMA_GROUPS.items():
        seen = [(st, m) for st, m in srv.requests_seen(name) if m != UPSTREAM_ALIAS]
        refused = sorted({m for st, m in seen if st != 200})
        got = {mid: sum(1 for st, m in seen if st == 200 and m == mid) for mid in group.values()}
        ok = not refused and all(got.values())
        print(("  ok   " if ok else "  FAIL ") + f"server {name} {srv.urls_by_group[name]}: "
              + ", ".join(f"{m} {n} call(s)" for m, n in got.items())
              + (f"; refused {refused}" if refused else "; nothing refused"))
        if not ok:
            problems.append(f"server {name}: calls {got}, refused {refused}")
    foreign = sorted({r.get("model") for r in reasoning.requests} - {REASONING[1]})
    ok = not foreign
    print(("  ok   " if ok else "  FAIL ") + f"reasoning stand-in: {len(reasoning.requests)} call(s), "
          + (f"foreign names {foreign}" if foreign else f"all for {REASONING[1]}"))
    if not ok:
        problems.append(f"reasoning stand-in was sent {foreign}")
    up = [(st, m) for g in sorted(set(UPSTREAM_OF.values())) for st, m in srv.requests_seen(g) if m == UPSTREAM_ALIAS]
    bad = sorted({m for st, m in up if st != 200})
    print(("  ok   " if not bad else "  FAIL ") + f"hidden upstream: {len(up)} call(s) from the two proxies"
          + (f"; refused {bad}" if bad else ""))
    if bad:
        problems.append(f"hidden upstream refused {bad}")
    return problems


def record_problems(runs: Path) -> list[str]:
    """No prediction record carries an error (a refused or failed call would)."""
    n, errs = 0, []
    for f in sorted(runs.rglob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                n += 1
                err = json.loads(line).get("error")
                if err:
                    errs.append(f"{f.relative_to(runs)}: {err.splitlines()[0][:200]}")
    print(("  ok   " if n and not errs else "  FAIL ") + f"{n} prediction records, {len(errs)} with an error")
    for e in errs[:5]:
        print("         " + e)
    return [f"{len(errs)} record(s) with an error"] if errs else ([] if n else ["no prediction records"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout-s", type=float, default=DEADLINE_S,
                    help=f"deadline of the whole run, servers to verdict (default {DEADLINE_S} s); past it: fail")
    ap.add_argument("--make", default=os.environ.get("MAKE", "make"))
    ap.add_argument("--venv", default=os.environ.get("VENV", ".venv"))
    ap.add_argument("--jobs", type=int, default=None,
                    help="notebooks run at once (make -j; default: one per core, at most 2). Cells two notebooks "
                         "share are locked, so the second waits for the first and replays its calls")
    ap.add_argument("--threads", type=int, default=None,
                    help="llama.cpp threads per server (default: cores / jobs; 1 when the cores are busy now)")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    deadline = t0 + a.timeout_s
    jobs = a.jobs or min(2, os.cpu_count() or 1)
    threads = a.threads or max(1, default_threads() // jobs)
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
    srv.urls_by_group = {}

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through `finally`: every server stops

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    make = None
    load0 = os.getloadavg()
    try:
        for name, group in LLAMA_GROUPS.items():
            # a proxy's upstream is a server's instance under a name it does not list (UPSTREAM_OF): the proxy
            # then reuses the prompt states of that server's backbones
            url = srv.start_llama(name, list(group.values()), model, threads,
                                  hidden=(UPSTREAM_ALIAS,) if name in UPSTREAM_OF.values() else ())
            srv.urls_by_group[name] = url
            for reg in group:
                srv.urls[reg] = url
        upstreams = {proxy: srv.urls_by_group[g] for proxy, g in UPSTREAM_OF.items()}
        srv.wait_ready()
        reasoning, anthropic = make_proxies(upstreams)
        srv.proxies = [reasoning.start(), anthropic.start()]
        srv.urls[REASONING[0]] = reasoning.url
        servers = list(dict.fromkeys(u + "/v1" for u in srv.urls.values()))
        say(f"{len(srv.procs)} llama.cpp servers (SmolLM2-135M, {threads} thread(s) each, n_ctx {N_CTX}) and 2 "
            f"proxies for {jobs} notebook(s) at once up in {time.monotonic() - t0:.0f} s; load average "
            f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}:")
        for name, u in srv.urls.items():
            print(f"    {name:30s} {u}")
        for proxy, u in upstreams.items():
            print(f"    {'(hidden upstream of ' + proxy + ')':30s} {u}")
        print(f"    {'Claude-Haiku-4.5 (Anthropic)':30s} {anthropic.url}")
        from balms.models.routing import check_models

        routes = check_models(list(VLLM_IDS) + [REASONING[0]], servers)
        assert all(v == [srv.urls[k] + "/v1"] for k, v in routes.items()), \
            f"each model must route to exactly its own server: {routes}"
        p = " ".join(f"-p {k} {v!r}" if " " in v or "[" in v else f"-p {k} {v}" for k, v in P_OVERRIDES)
        p += f" -p servers '{json.dumps(servers)}'"
        env = {k: v for k, v in os.environ.items() if k not in ("BALMS_VLLM_BASE_URLS", "BALMS_P")}
        env.update(BALMS_OUTPUT_DIR=str(BUILD / "out"), BALMS_RUNS_DIR=str(BUILD / "runs"),
                   BALMS_CACHE_DIR=str(cache), ANTHROPIC_API_KEY="dryrun-loopback-not-a-key",
                   ANTHROPIC_BASE_URL=anthropic.url)
        env.pop("BALMS_ANTHROPIC_MODEL", None)
        # (make paper points the notebooks' kernels at this checkout's balms: PYTHONPATH in the Makefile)
        # PLAN=skip: the plan runs every cell's agents against its own stand-in (minutes here; tests/test_plan.py)
        cmd = [a.make, "--no-print-directory", f"-j{jobs}", "paper", "PROFILE=paper", "YES=1", "PLAN=skip",
               f"VENV={a.venv}",
               f"EXEC_DIR={BUILD.relative_to(ROOT)}/executed", f"P={p}"]
        say("running: " + " ".join(cmd[:8]) + " EXEC_DIR=... P=\"" + p + "\"")
        t_nb = time.monotonic()
        make = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
        try:
            rc = make.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(30)
            say(f"FAILED: past the {a.timeout_s:g} s deadline ({time.monotonic() - t0:.0f} s wall, notebooks "
                f"stopped after {time.monotonic() - t_nb:.0f} s; load average {os.getloadavg()[0]:.2f})")
            return 1
        say(f"notebooks finished in {time.monotonic() - t_nb:.0f} s (make exit {rc})")
        if rc != 0:
            say("FAILED: make paper failed (see above)")
            return 1
        counters = {"batches": len(anthropic.batches),
                    "batch_requests": sum(len(b["requests"]) for b in anthropic.batches.values()),
                    "direct": anthropic.direct, "reasoning": len(reasoning.requests)}
        say("check: routing, records, and every backbone and the judge in every paper artefact")
        problems = routing_problems(srv, reasoning, anthropic) + record_problems(BUILD / "runs")
        backbones = list(VLLM_IDS)[:3] + [REASONING[0], "Claude-Haiku-4.5"]
        from balms.experiments.config import load

        paper = load("paper")
        backbones = [b for b in paper.backbones if b in backbones]
        assert len(backbones) == 5, f"the paper profile's backbones changed: {paper.backbones}"
        problems += check(BUILD / "out", backbones, JUDGE_MODEL, counters)
        wall = time.monotonic() - t0
        load1 = os.getloadavg()
        target = f"within the {TARGET_S} s target" if wall <= TARGET_S else f"OVER the {TARGET_S} s target"
        say(f"{'PASSED' if not problems else f'FAILED ({len(problems)} problem(s))'} in {wall:.0f} s wall, {target} "
            f"(deadline {a.timeout_s:g} s); load average at start {load0[0]:.2f}, at end {load1[0]:.2f} "
            f"{load1[1]:.2f} {load1[2]:.2f}")
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
