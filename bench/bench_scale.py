"""The paper's prediction grid on a simulated GPU fleet split the way `balms plan --gpus` allocates it (issue 36):
notebook 01's cells run by the scheduler (balms.experiments.scheduler) against simulated vLLM servers
(bench/sim_vllm.py: the service-time model and the sources of its rates are stated there), `--gpus` A6000-class
GPUs each given to the models as the plan's allocation says (balms.experiments.plan.allocate: servers per model
that finish the phase soonest; each server holds its model's GPUs in the registry).

Grid: the `paper` profile (RAPTOR over each user's whole history, PHIA up to 10 steps) with notebook 01's cells:
every system x the four vLLM backbones x the data present (PMData and the GLOBEM sample at ../shared/data; real
prompts), `--samples` per cell for each GPU count. Claude is left out (no API here).

Reported per GPU count: fleet utilisation (GPU-seconds served / (GPUs x wall)); the busiest server's ratio (its
service time / wall); the plan's wall time on its allocation against the simulated wall; the ideal wall time
(GPU-seconds / GPUs) over the longest sample's chain of dependent calls (chain_s: the floor no fleet size
shortens); the client's CPU per call and its share of the wall; the machine's load average before and after (the
client shares this 2-core VM with other work). Compression (<= 5) divides every service time; results scale back
by it. Every run starts with fresh response, summary and runs caches. Retrieval embeds with a hash stand-in
(tests/agent_fakes): this benchmark measures serving; the prompts keep their lengths (top-k of the same nodes).
Then a loopback run with 1,000 requests in flight (one server, 1,000 threads x 2 requests, fixed 5 s service)
measures the client alone: the peak in service must reach 1,000.

    python bench/bench_scale.py [--gpus 16] [--samples 560] [--compression 5] [--out bench/scale.json]

`make bench-scale` runs 16 GPUs at the defaults (the goal: an ideal wall ten times the longest chain; the result
says how far it got: more samples add less work each, as a user's samples share RAPTOR's day summaries). 64 GPUs
is beyond this machine at the issue's settings: the client's calls per second grow with the fleet, more than a
2-core VM runs beside the simulated servers and PHIA's sandboxes at compression <= 5, and keeping the ideal wall
ten times the chain on 64 GPUs needs more PMData samples per cell than the data has.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from sim_vllm import BATCH  # noqa: E402

BACKBONES = ["Qwen2.5-7B-Instruct", "Mistral-7B-Instruct-v0.3", "Qwen2.5-14B-Instruct", "DeepSeek-R1-Distill-Qwen-14B"]
DATASETS = ["pmdata", "globem"]
PLAN_PER_CELL = 3  # the plan's block of samples per cell here (bench/plan_exact.py sets it beside every sample)


def start_sims(model_ids: list[str], compression: float, *, batch: int = BATCH, fixed_s: float | None = None,
               max_s: float = 1800.0) -> tuple[subprocess.Popen, list[str]]:
    cmd = [sys.executable, str(ROOT / "bench" / "sim_vllm.py"), "--models", ",".join(model_ids),
           "--compression", str(compression), "--batch", str(batch), "--max-s", str(max_s)]
    if fixed_s is not None:
        cmd += ["--fixed-s", str(fixed_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    urls = [f"http://127.0.0.1:{int(proc.stdout.readline())}/v1" for _ in model_ids]
    return proc, urls


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def grid_cells(cfg):
    """Notebook 01's cells (run_grid's combinations: datasets x backbones x systems, zero-shot)."""
    from balms.experiments.grid import make_cell

    return [make_cell(cfg, d, s, m2) for d in cfg.datasets for m in cfg.backbones for s in cfg.systems
            for m2 in cfg.models_for(s, [m])]


def paper_cfg(urls: list[str], samples: int, datasets: list[str]):
    from balms.experiments.config import load

    return load("paper", datasets=datasets, backbones=BACKBONES, n_samples=samples, servers=urls,
                server_slots=BATCH)


def use_dirs(base: Path) -> None:
    (base / "cache").mkdir(parents=True, exist_ok=True)
    os.environ["BALMS_CACHE_DIR"] = str(base / "cache")
    os.environ["BALMS_RUNS_DIR"] = str(base / "runs")
    tables = base.parent / "tables"  # loaded datasets are the same in every run
    tables.mkdir(exist_ok=True)
    if not (base / "cache" / "tables").exists():
        (base / "cache" / "tables").symlink_to(tables)


def run_fleet(gpus: int, servers: dict[str, int], compression: float, samples: int, datasets: list[str],
              base: Path, trace: str | None = None) -> dict:
    """The grid on `servers` ({model: simulated servers}, the plan's allocation of `gpus` GPUs)."""
    from balms.experiments.scheduler import schedule_cells
    from balms.experiments.throughput import gpus_per_server
    from balms.models.registry import MODELS, spec

    use_dirs(base)
    names = [m for m in BACKBONES for _ in range(servers[m])]
    proc, urls = start_sims([spec(m).model_id for m in names], compression)
    try:
        cfg = paper_cfg(urls, samples, datasets)
        cells = grid_cells(cfg)
        load0 = os.getloadavg()
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0, t0, m0 = time.process_time(), time.perf_counter(), time.monotonic()
        with contextlib.ExitStack() as stack:
            if trace:  # --trace: where the client's threads are, once a second
                from thread_states import Tracer

                stack.enter_context(Tracer(f"{trace}.g{gpus}.jsonl"))
            rep = schedule_cells(cfg, cells, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # PHIA's sandbox workers (the servers still run)
        kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
        load1 = os.getloadavg()
        stats = [httpx.get(u + "/stats", timeout=10).json() for u in urls]
        for st in stats:  # request times relative to the start of the run
            st["events"] = [[round(x - m0, 3) for x in e] for e in st["events"]]
    finally:
        stop(proc)
    recs = [r for rs in rep.records for r in rs]
    calls = sum(st["n"] for st in stats)
    server_s = [st["service_total_s"] / st["batch"] for st in stats]  # uncompressed busy seconds per server
    tp = [gpus_per_server(m) for m in names]
    gpu_s = sum(x * t for x, t in zip(server_s, tp, strict=True))
    bound = max(server_s) / compression
    ideal = gpu_s / gpus / compression
    chain = max((chain_s(r, compression) for r in recs if r.error is None), default=0.0)
    busiest = max(range(len(stats)), key=lambda i: server_s[i])
    name_of = {sp.model_id: n for n, sp in MODELS.items()}
    per_model: dict[str, dict] = {}
    for st, x in zip(stats, server_s, strict=True):
        pm = per_model.setdefault(name_of[st["model"]], {"servers": 0, "requests": 0, "server_s": 0.0})
        pm["servers"] += 1
        pm["requests"] += st["n"]
        pm["server_s"] = round(pm["server_s"] + x, 1)
    return {
        "gpus": gpus, "servers": servers, "n_servers": len(stats), "compression": compression,
        "samples_per_cell": samples, "n_cells": len(cells), "n_records": len(recs),
        "n_errors": sum(r.error is not None for r in recs), "n_parsed": sum(r.prediction is not None for r in recs),
        "model_calls": calls, "wall_s": round(wall, 2),
        "fleet_utilisation": round(ideal / wall, 3),  # GPU-seconds served / (GPUs x wall)
        "busiest_ratio": round(bound / wall, 3), "busiest_bound_s": round(bound, 2),
        # the fleet utilisation were the busiest server never idle: what the allocation itself allows (whole GPUs
        # per server, one server at least per model), apart from the scheduler
        "allocation_ceiling": round(ideal / bound, 3),
        "ideal_s": round(ideal, 2), "chain_s": round(chain, 2), "ideal_over_chain": round(ideal / max(chain, 1e-9), 2),
        "simulated_wall_h": round(wall * compression / 3600, 3), "gpu_hours": round(gpu_s / 3600, 3),
        "client_cpu_s": round(cpu, 2), "client_cpu_ms_per_call": round(1000 * cpu / max(calls, 1), 3),
        "client_cpu_share": round(cpu / wall, 3),
        "sandbox_cpu_s": round(kids, 2),  # CPU of the PHIA sandbox worker processes the client started
        # when the busiest server had fewer than its batch in service: where the wall exceeds its bound
        "busiest_underfed": underfed(stats[busiest]["events"], stats[busiest]["batch"], wall),
        # the machine's load average (1, 5, 15 min) before and after the run: other work on the VM slows the client
        "load_average": {"before": [round(x, 2) for x in load0], "after": [round(x, 2) for x in load1]},
        "per_model": per_model,
        "utilisation_per_server": [round(x / compression / wall, 3) for x in server_s],
    }


def chain_s(rec, compression: float) -> float:
    """Real seconds of the sample's dependent chain of calls at the simulated servers: its day summaries (sent
    together: the longest) then every other call in turn, each at sim_vllm's service time. No schedule finishes
    before its longest chain, however many servers: a second lower bound beside the servers' work."""
    from sim_vllm import A6000, service_s, size_of

    rate = A6000[size_of(rec.model_id)]
    summaries, rest = [0.0], 0.0
    for st in rec.transcript:
        m = st.meta
        if "prompt_tokens" not in m or m.get("cached") or m.get("usage_unknown"):
            continue  # not a call, or answered without the server (a summary another sample wrote)
        t = service_s(int(m["prompt_tokens"] or 0), int(m["completion_tokens"] or 0), rate["prefill_tps"],
                      rate["decode_tps"]) / compression
        if st.kind == "summary":
            summaries.append(t)
        else:
            rest += t
    return max(summaries) + rest


def underfed(events: list, batch: int, wall: float) -> dict:
    """Seconds of the run during which a server had fewer than `batch` requests in service, split into before its
    first request, the middle, and the tail after it last had a full batch (events: (arrived, started, ended))."""
    marks = sorted([(e[1], 1) for e in events] + [(e[2], -1) for e in events])
    if not marks:
        return {"start_s": round(wall, 2), "middle_s": 0.0, "tail_s": 0.0}
    n, t_prev, below, last_full = 0, 0.0, [], 0.0
    for t, d in marks:
        if n < batch and t > t_prev:
            below.append((t_prev, t))
        n += d
        if n >= batch:
            last_full = t
        t_prev = t
    below.append((t_prev, max(wall, t_prev)))
    first = marks[0][0]
    start = min(first, wall)
    tail = sum(max(0.0, b - max(a, last_full)) for a, b in below)
    middle = sum(max(0.0, min(b, last_full) - max(a, first)) for a, b in below)
    return {"start_s": round(start, 2), "middle_s": round(middle, 2), "tail_s": round(tail, 2)}


def sim_throughput() -> dict:
    """The simulated servers' rates as `balms plan` throughput classes (aggregate tokens/s, one GPU each)."""
    from sim_vllm import A6000

    return {k: {"prefill": v["prefill_tps"], "decode": v["decode_tps"]} for k, v in A6000.items()}


def grid_plan(samples: int, datasets: list[str], *, backbones: list[str] = BACKBONES,
              per_cell: int = PLAN_PER_CELL) -> dict:
    """`balms plan` of notebook 01 on the paper profile, with the simulated servers' throughput and the way they
    answer (the stand-in's SIMULATOR behaviour, which the simulated servers answer by)."""
    from balms.experiments.config import load
    from balms.experiments.plan import build_plan
    from balms.models.standin import SIMULATOR

    cfg = load("paper", datasets=datasets, backbones=backbones, n_samples=samples, notebooks=["01_prediction"])
    plan = build_plan(cfg, per_cell=per_cell, throughput=sim_throughput(), behaviour=SIMULATOR)
    return plan.to_dict()


def allocation(samples: int, datasets: list[str], gpus: int) -> dict:
    """`balms plan --gpus A6000:<gpus>` for the grid at `samples` per cell, with the simulated servers' throughput:
    its prediction phase (servers per model and the wall hours it expects)."""
    from balms.experiments.plan import allocate, phase_work

    plan = grid_plan(samples, datasets)
    work = {"prediction": phase_work(plan, slots=BATCH)["prediction"]}
    return allocate(work, "A6000", gpus)["phases"]["prediction"] | {"plan_calls": plan["total"]["calls"]}


def summary(d: dict) -> dict[str, str]:
    """The sentences the generated page states about a bench/scale.json (tests/test_bench_scale_pins.py checks its
    verdicts follow the numbers)."""
    g = d["goal"]
    rows = []
    for r in d["runs"]:
        ok = (r["fleet_utilisation"] >= g["fleet_utilisation"] and r["busiest_ratio"] >= g["busiest_ratio"]
              and abs(r["plan"]["error"]) <= g["plan_error"]
              and r["ideal_over_chain"] >= g["ideal_over_chain"])  # else the run measured its longest chain
        rows.append(f"{r['gpus']} GPUs: fleet utilisation {r['fleet_utilisation']:.3f} (the allocation's ceiling "
                    f"{r['allocation_ceiling']:.3f}), busiest server "
                    f"{r['busiest_ratio']:.3f}, plan {100 * r['plan']['error']:+.0f}% "
                    f"({'met' if ok else 'not met'})")
    lb = d["loopback_1000"] or {}
    return {
        "runs": "; ".join(rows),
        "goal": (f"goal: fleet utilisation >= {g['fleet_utilisation']}, busiest server >= {g['busiest_ratio']}, "
                 f"plan within {100 * g['plan_error']:.0f}%"),
        "loopback": (f"One client kept {lb['in_flight']:,} requests in flight (peak {lb['peak_in_service']:,} "
                     f"in service, {lb['client_cpu_ms_per_call']:.1f} ms client CPU per call, "
                     f"{lb['ratio_ideal_to_wall']:.3f} of the ideal wall time)" if lb else
                     "The 1,000-in-flight client test was not run (--no-loopback)"),
    }


def loopback_1000(n_threads: int = 1000, per_thread: int = 2, service_s: float = 5.0) -> dict:
    """1,000 requests in flight from one client: wall vs ideal, peak in service, client CPU per call."""
    from balms.models.base import GenParams, Message
    from balms.models.openai_http import OpenAICompatBackend
    from balms.models.slots import SLOTS

    proc, (url,) = start_sims(["loop/model"], 1.0, batch=n_threads, fixed_s=service_s, max_s=300)
    try:
        be = OpenAICompatBackend("loop/model", [url], max_connections=n_threads + 8)
        SLOTS.set_limit(be.base_urls[0], n_threads)
        barrier = threading.Barrier(n_threads)
        errors = []

        def worker(i):
            barrier.wait()
            for j in range(per_thread):
                try:
                    be.generate([Message("user", f"request {i}-{j}")], GenParams(max_tokens=8))
                except Exception as exc:  # noqa: BLE001 - counted
                    errors.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.join(120)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        st = httpx.get(url + "/stats", timeout=10).json()
        be.close()
    finally:
        stop(proc)
    n = n_threads * per_thread
    return {"in_flight": n_threads, "requests": n, "service_s": service_s, "wall_s": round(wall, 2),
            "ideal_s": per_thread * service_s, "ratio_ideal_to_wall": round(per_thread * service_s / wall, 3),
            "peak_in_service": st["peak"], "errors": len(errors),
            "client_cpu_ms_per_call": round(1000 * cpu / n, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default="16", help="GPU counts, each run with the plan's allocation")
    ap.add_argument("--samples", default="560", help="samples per cell, one per GPU count")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--compression", default="5", help="time compression (<= 5), one per GPU count")
    ap.add_argument("--no-loopback", action="store_true", help="skip the 1,000-in-flight client test")
    ap.add_argument("--embedder", choices=["hash", "minilm"], default="hash",
                    help="minilm: the real embedder, on the empty embedding cache of each fresh run")
    ap.add_argument("--no-embedding-stage", action="store_true",
                    help="retrieval samples embed for themselves (the scheduler's embedding stage off: the A/B)")
    ap.add_argument("--trace", help="write where the client's threads are, once a second, to TRACE.g<gpus>.jsonl "
                    "(bench/thread_states.py; it walks every thread's stack under the GIL, so it slows the client: "
                    "compare a traced run's ratios with another traced run's only)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "scale.json"))
    a = ap.parse_args(argv)
    from balms.paths import shared_data_dir

    if shared_data_dir() is None:
        raise SystemExit("bench-scale needs the real data at ../shared/data")
    os.environ["BALMS_RAW_DIR"] = str(shared_data_dir())
    from agent_fakes import HashEmbedder
    from balms.agents import embeddings

    if a.embedder == "hash":  # the plan's own hash stand-in (HASH_EMBEDDER, its cache's vectors) stays as it is
        real = embeddings.load_embedder
        embeddings.load_embedder = lambda name=embeddings.DEFAULT_EMBEDDER: (
            real(name) if name == embeddings.HASH_EMBEDDER else HashEmbedder())
    if a.no_embedding_stage:
        from balms.experiments import scheduler

        scheduler.embedding_stage = lambda *args: {}
    datasets = a.datasets.split(",")
    gpus = [int(x) for x in a.gpus.split(",")]
    samples = [int(x) for x in a.samples.split(",")]
    comp = [float(x) for x in a.compression.split(",")]
    if not len(samples) == len(comp) == len(gpus):
        raise SystemExit(f"--samples and --compression need one value per GPU count ({a.gpus!r})")
    if max(comp) > 5:
        raise SystemExit("--compression above 5 makes the simulated GPUs faster than the issue allows (<= 5)")
    work = Path(tempfile.mkdtemp(prefix="balms-bench-scale-"))
    os.environ["BALMS_CACHE_DIR"] = str(work / "plan-cache")  # the plan's caches too: nothing from an earlier run
    t_all = time.perf_counter()
    try:
        runs = []
        for g, n, c in zip(gpus, samples, comp, strict=True):
            alloc = allocation(n, datasets, g)
            r = run_fleet(g, alloc["servers"], c, n, datasets, work / f"g{g}", a.trace)
            sim_h = r["simulated_wall_h"]
            r["plan"] = {"allocation": alloc["servers"], "plan_hours": alloc["hours"], "simulated_hours": sim_h,
                         "error": round(alloc["hours"] / sim_h - 1, 3), "plan_calls": alloc["plan_calls"]}
            print(json.dumps({k: r[k] for k in ("gpus", "wall_s", "fleet_utilisation", "busiest_ratio", "plan",
                                                "ideal_over_chain", "client_cpu_ms_per_call", "load_average")}),
                  file=sys.stderr, flush=True)
            runs.append(r)
        loop = None if a.no_loopback else loopback_1000()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {
        "command": "make bench-scale (python bench/bench_scale.py " + " ".join(argv or sys.argv[1:]) + ")",
        "grid": {"profile": "paper", "notebook": "01_prediction", "datasets": datasets, "backbones": BACKBONES,
                 "judge_phase": "not run (issue 36 is open on it)"},
        "server_model": {"source": "bench/sim_vllm.py module doc", "batch": BATCH, "rates": sim_throughput(),
                         "gpus_per_server": "the registry's tensor_parallel (balms.experiments.throughput)"},
        "embedding_stage": not a.no_embedding_stage,
        "embedder": ("hash stand-in (tests/agent_fakes.HashEmbedder)" if a.embedder == "hash" else
                     f"{embeddings.DEFAULT_EMBEDDER} (sentence-transformers, CPU), empty embedding cache"),
        "runs": runs, "loopback_1000": loop,
        "goal": {"fleet_utilisation": 0.85, "busiest_ratio": 0.90, "plan_error": 0.10, "ideal_over_chain": 10},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "total_s": round(time.perf_counter() - t_all, 1),
    }
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
