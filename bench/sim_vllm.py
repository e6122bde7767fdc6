"""Loopback OpenAI-compatible servers that behave like vLLM under load, for `make bench-scale` (bench/bench_scale.py).

One process, one asyncio loop, N servers (one port each, one served model id each). Service-time model, per
request, for a server holding at most `batch` requests in service (vLLM's continuous batching at a fixed batch):

    service_s = batch * (prompt_tokens / prefill_tps + completion_tokens / decode_tps)

i.e. the request gets 1/batch of the GPU's aggregate prefill and decode throughput while in service; requests
beyond `batch` wait in a FIFO queue. A server's total GPU time is sum(service_s) / batch, and no schedule can
finish before the busiest server's total: that is the server-bound minimum the benchmark compares against.
Time is compressed: every service time is divided by `compression` (reported; results scale back by it).

Parameters (A6000-class GPU, 48 GB, 768 GB/s, 154.8 dense FP16 TFLOPS; one model per GPU), with their source:
- decode: Llama-3.1-8B on one A100-40GB (1,555 GB/s) under vLLM decodes ~75 tokens/s for one request and 6.6x
  that at 8 in flight (johnmusgrave.com, "vLLM throughput-latency sweep on NVIDIA A100", 1024 in / 128 out);
  extrapolated to 16 in flight (~x11) and scaled by the bandwidth ratio 768/1555: 7B ~420 tokens/s in total at
  batch 16; a 14B model reads twice the weights per token: ~210 tokens/s.
- prefill: compute-bound, 2 x parameters FLOPs per token at 50% of the A6000's dense FP16 peak: 7B ~5,500
  tokens/s, 14B ~2,750 tokens/s.
- batch 16: the issue's measurement setting (16 requests in service per server), the scheduler's default slots.
Token counts: prompt tokens = characters / 4 of every message; completion tokens and replies are the rule-answering
stand-in's (balms.models.standin, behaviour SIMULATOR: half the request's max_tokens, one PHIA code step then the
answer), the stand-in `balms plan` runs the agents against, so the plan and the simulated fleet count the same work.
GET /v1/models lists the server's model; GET /stats returns what it served.

    python bench/sim_vllm.py --models m1,m2,... --compression 200   # prints one port per line
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from balms.models.standin import SIMULATOR, completion_tokens  # noqa: E402
from balms.models.standin import reply_for as standin_reply  # noqa: E402
from fake_servers import json_http  # noqa: E402

A6000 = {  # tokens per second of one A6000-class GPU at batch 16 (module doc)
    "7b": {"prefill_tps": 5500.0, "decode_tps": 420.0},
    "14b": {"prefill_tps": 2750.0, "decode_tps": 210.0},
}
BATCH = 16


def size_of(model_id: str) -> str:
    return "14b" if "14b" in model_id.lower() else "7b"


def service_s(prompt_tokens: int, completion_tokens: int, prefill_tps: float, decode_tps: float,
              batch: int = BATCH) -> float:
    """Uncompressed seconds one request spends in service (module doc)."""
    return batch * (prompt_tokens / prefill_tps + completion_tokens / decode_tps)


def tokens_of(payload: dict) -> tuple[int, int]:
    p = sum(len(m.get("content") or "") for m in payload.get("messages", [])) // 4
    return max(1, p), completion_tokens(payload.get("max_tokens"), SIMULATOR)


def reply_for(payload: dict) -> str:
    """The stand-in's reply (balms.models.standin.reply_for, behaviour SIMULATOR)."""
    fmt = payload.get("response_format") or {}
    schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
    return standin_reply(payload.get("messages", []), payload.get("max_tokens"), SIMULATOR, schema,
                         payload.get("model") or "")


@dataclass
class SimServer:
    model_id: str
    prefill_tps: float
    decode_tps: float
    batch: int
    compression: float
    fixed_s: float | None = None  # a fixed real service time instead of the model (the 1,000-in-flight client test)
    n: int = 0
    service_total_s: float = 0.0  # uncompressed, summed over requests
    in_service: int = 0
    peak: int = 0
    first_t: float | None = None
    last_t: float | None = None
    sem: asyncio.Semaphore = field(default=None)
    events: list = field(default_factory=list)  # (arrived, started, ended) monotonic seconds, per request

    async def serve(self, payload: dict) -> dict:
        p, c = tokens_of(payload)
        s = (self.fixed_s * self.compression if self.fixed_s is not None
             else service_s(p, c, self.prefill_tps, self.decode_tps, self.batch))
        arrived = time.monotonic()
        async with self.sem:
            self.in_service += 1
            self.peak = max(self.peak, self.in_service)
            now = time.monotonic()
            self.first_t = now if self.first_t is None else self.first_t
            await asyncio.sleep(s / self.compression)
            self.in_service -= 1
            self.n += 1
            self.service_total_s += s
            self.last_t = time.monotonic()
            self.events.append((arrived, now, self.last_t))
        return {"id": f"sim-{self.n}", "object": "chat.completion", "model": self.model_id,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply_for(payload)}}],
                "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}

    def stats(self) -> dict:
        return {"model": self.model_id, "n": self.n, "service_total_s": self.service_total_s, "peak": self.peak,
                "batch": self.batch, "busy_span_s": (self.last_t - self.first_t) if self.first_t else 0.0,
                "prefill_tps": self.prefill_tps, "decode_tps": self.decode_tps, "events": self.events}

    def reset(self) -> None:
        self.n, self.service_total_s, self.peak, self.first_t, self.last_t = 0, 0.0, 0, None, None
        self.events = []


async def _handle(sim: SimServer, reader, writer) -> None:
    async def answer(path: str, payload: dict) -> dict:
        if path.endswith("/models"):
            return {"object": "list", "data": [{"id": sim.model_id, "object": "model"}]}
        if path.endswith("/stats"):
            return sim.stats()
        if path.endswith("/reset"):
            sim.reset()
            return {"ok": True}
        return await sim.serve(payload)

    await json_http(reader, writer, answer)


async def _main(models: list[str], compression: float, batch: int, max_s: float, fixed_s: float | None) -> None:
    servers = []
    for m in models:
        rates = A6000[size_of(m)]
        sim = SimServer(m, rates["prefill_tps"], rates["decode_tps"], batch, compression, fixed_s)
        sim.sem = asyncio.Semaphore(batch)
        srv = await asyncio.start_server(lambda r, w, s=sim: _handle(s, r, w), "127.0.0.1", 0, backlog=2048)
        servers.append(srv)
        print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(max_s)  # bounded: the servers exit on their own even if the client dies


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="comma-separated served model ids, one server each")
    ap.add_argument("--compression", type=float, default=200.0)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--max-s", type=float, default=1800.0, help="exit after this many seconds")
    ap.add_argument("--fixed-s", type=float, default=None, help="every request in service this many real seconds")
    a = ap.parse_args(argv)
    asyncio.run(_main(a.models.split(","), a.compression, a.batch, a.max_s, a.fixed_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
