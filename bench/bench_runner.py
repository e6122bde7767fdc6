"""Runner benchmark: is the harness ever the bottleneck?

1. Against a loopback OpenAI-compatible server (own process) with a fixed artificial latency L, the full
   harness path (runner -> retry/timeout wrapper -> response cache (rw, fresh) -> HTTP backend -> fsynced JSONL)
   at concurrency 1, 8 and 64: throughput as a ratio of the ideal concurrency / L, and the harness overhead per
   request (mean time per request at concurrency 1 minus L). Target: >= 0.90 of ideal at concurrency 64.
2. Against real llama.cpp servers (SmolLM2-135M, 2 threads): the harness (runner, concurrency 1, cache off)
   vs plain HTTP POSTs of the same request bodies. Two identical servers: each harness request is paired with
   a direct POST of the same body to the twin server, alternately before and after it, so both servers see
   the same prompt sequence and the load of other jobs hits both sides alike; the roles are then swapped.
   ratio = direct time / (median paired call-time ratio x direct time + the harness's own time outside the
   model calls); the raw ratio of totals is also written. Target: >= 0.95.

Writes bench/runner.json and prints the numbers. L = 0.5 s by default (real LLM calls take seconds; a
shorter L mostly measures this shared 2-core machine). Usage: python bench/bench_runner.py [--latency 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx  # noqa: E402

from balms.models.cache import CachedBackend, ResponseCache  # noqa: E402
from balms.models.openai_http import OpenAICompatBackend  # noqa: E402
from balms.runner import run_samples  # noqa: E402
from fake_servers import TinyAgent, make_samples  # noqa: E402


def start_fake_server(latency: float):
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_servers.py"), "openai",
                             "--latency", str(latency), "--asyncio"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline().strip())
    return proc, f"http://127.0.0.1:{port}/v1"


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_ideal(latency: float, work: Path) -> dict:
    proc, url = start_fake_server(latency)
    out: dict = {"latency_s": latency}
    try:
        for c, n in [(1, 12), (8, 64), (64, 448)]:
            samples = make_samples(n, dataset=f"bench-c{c}")
            backend = CachedBackend(OpenAICompatBackend("fake-model", [url], timeout_s=30),
                                    ResponseCache(work / f"cache-c{c}.sqlite"))
            res = run_samples(TinyAgent(n_calls=1), backend, samples, None, work / f"run-c{c}.jsonl",
                              concurrency=c, progress=False)
            assert res.n_new == n and res.n_errors == 0, res
            rps = n / res.wall_s
            out[f"throughput_rps_c{c}"] = round(rps, 2)
            out[f"ideal_rps_c{c}"] = round(c / latency, 2)
            out[f"ideal_ratio_c{c}"] = round(rps / (c / latency), 4)
            if c == 1:
                out["overhead_ms_per_request"] = round((res.wall_s / n - latency) * 1000, 2)
                # the same requests as bare HTTP POSTs: what the loopback round trip itself costs
                client = httpx.Client(timeout=30)
                body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
                t0 = time.perf_counter()
                for _ in range(n):
                    client.post(url + "/chat/completions", content=body).json()
                out["bare_http_overhead_ms_per_request"] = round(((time.perf_counter() - t0) / n - latency) * 1000, 2)
                client.close()
            backend.backend.close()
    finally:
        stop(proc)
    return out


def _start_llama(n_threads: int, log: Path):
    import socket

    from balms.models.gguf_assets import gguf_path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fh = open(log, "wb")
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}  # idle llama.cpp threads must not spin on shared cores
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path("smollm2-135m")),
                             "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(n_threads),
                             "--model_alias", "smollm2", "--n_ctx", "2048"],
                            stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited; see {log}")
        try:
            if httpx.get(url + "/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError("llama.cpp server did not start")


class _Interleaved:
    """Backend wrapper that also sends each request's exact body straight to a second, identical llama.cpp
    server (plain httpx POST), alternately before and after the harness call. Both servers see the same
    prompts in the same order (same prompt-cache state) and adjacent requests share the machine's load, so
    the load of other jobs on this shared machine cancels out of the ratio."""

    def __init__(self, inner, direct_url: str):
        self.inner, self.model_id, self.name = inner, inner.model_id, inner.name
        self.direct_url = direct_url + "/chat/completions"
        self.client = httpx.Client(timeout=120)
        self.direct_s = 0.0
        self.harness_calls_s = 0.0
        self.n = 0
        self.d_list: list[float] = []
        self.h_list: list[float] = []

    def _direct(self, messages, params) -> None:
        body = json.dumps(self.inner.request_body(messages, params))
        t0 = time.perf_counter()
        r = self.client.post(self.direct_url, content=body, headers={"Content-Type": "application/json"})
        r.raise_for_status()
        r.json()
        self.direct_s += time.perf_counter() - t0
        self.d_list.append(time.perf_counter() - t0)

    supports_timeout = True  # as the HTTP backend it wraps: the runner passes the timeout, no watchdog thread

    def generate(self, messages, params, *, timeout_s=None):
        self.n += 1
        if self.n % 2:
            self._direct(messages, params)
        t0 = time.perf_counter()
        out = self.inner.generate(messages, params, timeout_s=timeout_s)
        self.harness_calls_s += time.perf_counter() - t0
        self.h_list.append(time.perf_counter() - t0)
        if not self.n % 2:
            self._direct(messages, params)
        return out


def bench_llamacpp(work: Path, n_prompts: int, max_tokens: int) -> dict:
    samples = make_samples(n_prompts, dataset="bench-llama")
    agent = TinyAgent(n_calls=1, max_tokens=max_tokens)
    servers = [_start_llama(2, work / "llama-a.log")]
    try:
        servers.append(_start_llama(2, work / "llama-b.log"))
        urls = [u for _, u in servers]
        direct_total = harness_total = 0.0
        runs, d_all, h_all, own_total = [], [], [], 0.0
        for k, (h_url, d_url) in enumerate([(urls[0], urls[1]), (urls[1], urls[0])]):  # swap the roles
            http = OpenAICompatBackend("smollm2", [h_url], json_style="llamacpp", timeout_s=120)
            inter = _Interleaved(http, d_url)
            for s in samples[:2]:  # warm-up both servers (model pages, first-prompt cost)
                inter._direct(*_messages_of(agent, s))
                http.generate(*_messages_of(agent, s))
            inter.direct_s = 0.0
            inter.d_list.clear()
            t0 = time.perf_counter()
            res = run_samples(agent, CachedBackend(inter, None, mode="off"), samples, None,
                              work / f"llama-run{k}.jsonl", concurrency=1, progress=False)
            wall = time.perf_counter() - t0
            assert res.n_new == n_prompts and res.n_errors == 0, res
            harness = wall - inter.direct_s  # the run's wall time minus the direct calls made inside it
            runs.append({"harness_url": h_url, "direct_s": round(inter.direct_s, 3), "harness_s": round(harness, 3),
                         "harness_model_calls_s": round(inter.harness_calls_s, 3)})
            direct_total += inter.direct_s
            harness_total += harness
            d_all += inter.d_list
            h_all += inter.h_list
            own_total += harness - inter.harness_calls_s
            http.close()
            inter.client.close()
    finally:
        for p, _ in servers:
            stop(p)
    # Server time per request is noisy on a shared machine (other jobs' spikes); the median of the paired
    # (adjacent in time, same body) harness/direct call-time ratios estimates it robustly, and the harness's own
    # time outside the model calls (runner, cache, records, fsync) is then added in full.
    call_ratio = statistics.median(h / d for h, d in zip(h_all, d_all, strict=True))
    robust = direct_total / (call_ratio * direct_total + own_total)
    return {
        "llamacpp_n_prompts": n_prompts,
        "llamacpp_paired_call_ratio_median": round(call_ratio, 4),
        "llamacpp_harness_own_ms_per_request": round(1000 * own_total / len(h_all), 2),
        "llamacpp_ratio_raw_totals": round(direct_total / harness_total, 4),
        "llamacpp_max_tokens": max_tokens,
        "llamacpp_runs": runs,
        "llamacpp_direct_s": round(direct_total, 3),
        "llamacpp_harness_s": round(harness_total, 3),
        "llamacpp_ratio": round(robust, 4),
    }


def _messages_of(agent, sample):
    """The (messages, params) the agent sends for `sample`."""
    from balms.models.base import Completion

    seen = []

    class _Rec:
        model_id = name = "smollm2"

        def generate(self, messages, params):
            seen.append((list(messages), params))
            return Completion(text="Answer: 3", model_id=self.model_id)

    agent.predict(sample, None, _Rec())
    return seen[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--n-prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "runner.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        work = Path(tmp)
        result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "loadavg_start": os.getloadavg()}}
        result.update(bench_ideal(args.latency, work))
        result.update(bench_llamacpp(work, args.n_prompts, args.max_tokens))
        result["machine"]["loadavg_end"] = os.getloadavg()
    result["targets"] = {"ideal_ratio_c64": 0.90, "llamacpp_ratio": 0.95}
    result["meets_targets"] = {k: result[k] >= v for k, v in result["targets"].items()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"loopback server, latency {args.latency:g} s:")
    for c in (1, 8, 64):
        print(f"  concurrency {c:>2}: {result[f'throughput_rps_c{c}']:8.2f} req/s = "
              f"{result[f'ideal_ratio_c{c}']:.3f} of ideal ({result[f'ideal_rps_c{c}']:.1f} req/s)")
    print(f"  harness overhead per request (c=1): {result['overhead_ms_per_request']:.2f} ms "
          f"(bare HTTP round trip alone: {result['bare_http_overhead_ms_per_request']:.2f} ms)")
    print(f"real llama.cpp servers (SmolLM2, {args.n_prompts} prompts x 2 runs, direct and harness interleaved):")
    print(f"  direct {result['llamacpp_direct_s']:.2f} s, harness {result['llamacpp_harness_s']:.2f} s -> "
          f"harness throughput = {result['llamacpp_ratio']:.3f} of direct (raw totals "
          f"{result['llamacpp_ratio_raw_totals']:.3f}; harness's own time "
          f"{result['llamacpp_harness_own_ms_per_request']:.1f} ms/request)")
    print(f"targets: {result['meets_targets']}  (written to {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
