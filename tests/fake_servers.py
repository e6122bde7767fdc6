"""Loopback fakes for tests and benchmarks: an OpenAI-compatible chat server and an Anthropic Messages API
server (stdlib ThreadingHTTPServer, port 0), each able to inject faults, plus an in-process fake backend.

Faults are consumed one per request, in order: "429", "500", "503", "529", "timeout" (sleep `timeout_sleep`
before answering: a hung server), "drip" (the answer one byte every `drip_s` seconds), "truncated"
(Content-Length larger than the body), "malformed" (an HTML page, not JSON), "missing_choices" (JSON without the
expected fields), "no_score" (a well-formed answer without an "Answer: k"), "ok" (a normal answer). After the
queue is empty every request succeeds.

Run standalone (for benchmarks, in its own process so its CPU does not share the client's GIL):
    python tests/fake_servers.py openai --latency 0.2 [--asyncio]    # prints the port on stdout
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from balms.models.base import Completion, GenParams, Message  # noqa: E402


def _echo_text(payload: dict) -> str:
    """Deterministic answer derived from the request, so tests can check routing and caching."""
    last = payload["messages"][-1]["content"] if payload.get("messages") else ""
    h = hashlib.sha256(json.dumps(payload.get("messages"), sort_keys=True).encode()).hexdigest()[:8]
    return f"echo:{h}:{last[:40]}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def handle_error(self, request, client_address):  # a client that timed out and left is expected
        exc = sys.exc_info()[1]
        if not isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeServerBase:
    kind = "base"

    def __init__(self, *, latency: float = 0.0, faults=(), timeout_sleep: float = 3.0, retry_after: str | None = "0",
                 models=("fake-model",), strict: bool = False, models_delay: float = 0.0, drip_s: float = 1.0):
        self.models = list(models)  # what GET /v1/models lists
        self.models_delay = models_delay  # seconds before GET /v1/models answers (a busy server)
        self.strict = strict  # strict: a request for a model not in `models` gets vLLM's 404
        self.latency = latency
        self.faults: deque[str] = deque(faults)
        self.timeout_sleep = timeout_sleep
        self.drip_s = drip_s
        self.arrivals: list[float] = []  # time.monotonic() of each POST's arrival
        self.retry_after = retry_after
        self.requests: list[dict] = []
        self.in_flight = 0  # POSTs being answered now, the most seen at once, and (start, end) of each
        self.peak_in_flight = 0
        self.busy: list[tuple[float, float]] = []
        self.n_gets = 0  # GET /v1/models requests (routing asks once per process)
        self.on_request = None  # called with (server, payload) before each POST is answered (tests: hold one)
        self.fault_log: list[str] = []
        self.lock = threading.Lock()
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def next_fault(self) -> str | None:
        with self.lock:
            f = self.faults.popleft() if self.faults else None
            if f:
                self.fault_log.append(f)
            return f

    def respond(self, payload: dict) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def error_body(self, status: int) -> dict:
        return {"error": {"message": f"injected {status}", "type": "server_error"}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None, length: int | None = None):
                self._done()  # before the answer leaves: the client may send its next request as soon as it has it
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_GET(self):
                with server.lock:
                    server.n_gets += 1
                time.sleep(server.models_delay)
                body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
                self._send(200, body.encode())

            def do_POST(self):
                t0 = self._t0 = time.monotonic()
                with server.lock:
                    server.arrivals.append(t0)
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                try:
                    self._post()
                finally:
                    self._done()

            def _done(self):
                """A POST stops counting as in flight (once): its answer is written, or it failed."""
                t0, self._t0 = getattr(self, "_t0", None), None
                if t0 is not None:
                    with server.lock:
                        server.in_flight -= 1
                        server.busy.append((t0, time.monotonic()))

            def _post(self):
                n = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(n) or b"{}")
                with server.lock:
                    server.requests.append(payload)
                if server.strict and payload.get("model") not in server.models:
                    err = {"error": {"message": f"The model `{payload.get('model')}` does not exist.",
                                     "type": "NotFoundError", "code": 404}}
                    self._send(404, json.dumps(err).encode())
                    return
                if server.on_request is not None:
                    server.on_request(server, payload)
                fault = server.next_fault()
                if fault == "ok":
                    fault = None
                if server.latency:
                    time.sleep(server.latency)
                if fault and fault.isdigit():
                    status = int(fault)
                    headers = {"retry-after": server.retry_after} if server.retry_after is not None else {}
                    if status == 529:
                        headers["x-should-retry"] = "true"
                    self._send(status, json.dumps(server.error_body(status)).encode(), headers)
                    return
                if fault == "timeout":
                    time.sleep(server.timeout_sleep)
                answer = server.respond(payload)
                if fault == "no_score" and "choices" in answer:
                    answer["choices"][0]["message"]["content"] = "Stress depends on many things."
                body = json.dumps(answer).encode()
                if fault == "drip":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(server.drip_s)
                    return
                if fault == "truncated":
                    self._send(200, body[: len(body) // 2], length=len(body))
                    self.close_connection = True
                    return
                if fault == "malformed":
                    body = b"<html>502 Bad Gateway</html>"
                elif fault == "missing_choices":
                    body = b'{"object": "chat.completion"}'
                self._send(200, body)

        return Handler


class FakeOpenAIServer(FakeServerBase):
    """`/v1/chat/completions` of the OpenAI protocol (what vllm serve and llama.cpp's server speak)."""

    kind = "openai"

    def respond(self, payload: dict) -> dict:
        text = payload.get("x_reply") or _echo_text(payload)
        message = {"role": "assistant", "content": text}
        if payload.get("x_reasoning"):  # vLLM --reasoning-parser: the trace in its own field
            message["reasoning_content"] = payload["x_reasoning"]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": payload.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": payload.get("x_finish") or "stop"}],
            "usage": payload.get("x_usage") or {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }


class AnsweringOpenAIServer(FakeOpenAIServer):
    """Answers every request with a parseable, deterministic "Answer: k" (k from the request's hash, 1-5), so
    the prompt agents' records carry predictions; a RAPTOR summary request gets the same short text."""

    def respond(self, payload: dict) -> dict:
        out = super().respond(payload)
        k = int(_echo_text(payload).split(":")[1], 16) % 5 + 1
        out["choices"][0]["message"]["content"] = f"Stress follows sleep here.\nAnswer: {k}"
        return out


class FakeAnthropicServer(FakeServerBase):
    """`/v1/messages` of the Anthropic Messages API."""

    kind = "anthropic"

    def error_body(self, status: int) -> dict:
        etype = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": f"injected {status}"}}

    def respond(self, payload: dict) -> dict:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": payload.get("model"),
            "content": [{"type": "text", "text": _echo_text(payload)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 21, "output_tokens": 9},
        }


class FakeBackend:
    """In-process deterministic backend: counts calls, optional latency and scripted exceptions."""

    def __init__(self, model_id: str = "fake-model", *, latency: float = 0.0, errors=(), name: str = "fake"):
        self.model_id = model_id
        self.name = name
        self.latency = latency
        self.errors = deque(errors)
        self.calls = 0
        self.lock = threading.Lock()

    def generate(self, messages, params: GenParams) -> Completion:
        with self.lock:
            self.calls += 1
            err = self.errors.popleft() if self.errors else None
        if self.latency:
            time.sleep(self.latency)
        if err is not None:
            raise err
        payload = {"messages": [m.to_dict() for m in messages]}
        h = hashlib.sha256(json.dumps([payload, params.cache_key_fields()], sort_keys=True).encode()).hexdigest()
        n = int(h[:8], 16) % 5 + 1
        return Completion(text=f"Reasoning {h[:6]}. Answer: {n}", model_id=self.model_id,
                          prompt_tokens=10 + len(messages[-1].content) // 4, completion_tokens=5,
                          latency_s=self.latency)


class TinyAgent:
    """A minimal agent for runner tests and benchmarks: `n_calls` model calls, answer parsed from the last."""

    name = "tiny"
    cot = False

    def __init__(self, n_calls: int = 1, max_tokens: int = 16, fail_on: frozenset = frozenset()):
        self.n_calls = n_calls
        self.max_tokens = max_tokens
        self.fail_on = fail_on
        self.options = {"n_calls": n_calls}

    def predict(self, sample, tables, backend):
        import re

        from balms.models.seeds import sample_seed
        from balms.records import PredictionRecord, Step

        if sample.sample_id in self.fail_on:
            raise ValueError(f"tiny agent refuses {sample.sample_id}")
        params = GenParams(max_tokens=self.max_tokens, seed=sample_seed(sample.sample_id, 0))
        msgs = [Message("system", "You predict stress 1-5. End with 'Answer: <int>'."),
                Message("user", f"User {sample.user}, day {sample.target_date}, look-back {sample.lookback}.")]
        steps, pt, ct, lat = [], 0, 0, 0.0
        for k in range(self.n_calls):
            c = backend.generate(msgs, params)
            steps += [Step(kind="prompt", content=msgs[-1].content),
                      Step(kind="completion", content=c.text, meta={"response_key": c.cache_key})]
            pt, ct, lat = pt + c.prompt_tokens, ct + c.completion_tokens, lat + c.latency_s
            msgs = msgs + [Message("assistant", c.text), Message("user", f"Step {k + 2}: continue.")]
        m = re.search(r"Answer:\s*(-?\d+)", c.text)
        pred = int(m.group(1)) if m and 1 <= int(m.group(1)) <= 5 else None
        return PredictionRecord(
            sample_id=sample.sample_id, dataset=sample.dataset, user=sample.user,
            target_date=sample.target_date.isoformat(), lookback=sample.lookback, label=sample.label,
            source=sample.source, system=self.name, cot=self.cot, model=getattr(backend, "name", backend.model_id),
            model_id=backend.model_id, options=self.options, prediction=pred,
            parse_error=None if pred is not None else "no 'Answer: <1-5>'", raw_answer=c.text,
            transcript=steps, n_steps=self.n_calls, prompt_tokens=pt, completion_tokens=ct, latency_s=lat,
        )


def make_samples(n: int, dataset: str = "synthetic-test"):
    """n distinct synthetic samples (users u0..u4, consecutive days)."""
    import datetime as _dt

    from balms.data.schema import Sample

    out = []
    for i in range(n):
        day = _dt.date(2020, 1, 15) + _dt.timedelta(days=i // 5)
        out.append(Sample(dataset=dataset, user=f"u{i % 5}", target_date=day, label=1 + i % 5, lookback=7,
                          window_start=day - _dt.timedelta(days=7), window_end=day - _dt.timedelta(days=1),
                          source="synthetic"))
    return out


async def json_http(reader, writer, answer) -> None:
    """One keep-alive connection of a minimal HTTP/1.1 JSON server: `await answer(path, payload) -> dict` for
    each request. Shared by the benchmark servers (here and bench/sim_vllm.py)."""
    import asyncio

    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            payload = json.loads(await reader.readexactly(length)) if length else {}
            body = json.dumps(await answer(head.split(b" ", 2)[1].decode(), payload)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve_openai_asyncio(latency: float) -> None:
    """Low-overhead OpenAI-compatible server for benchmarks: one event loop, no thread per connection, so the
    benchmark measures the client harness rather than this server's CPU. Speaks just enough HTTP/1.1."""
    import asyncio

    async def answer(path, payload):
        if path.endswith("/models"):
            return {"object": "list", "data": [{"id": "fake-model"}]}
        await asyncio.sleep(latency)
        return FakeOpenAIServer.respond(None, payload)

    async def handle(reader, writer):
        await json_http(reader, writer, answer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["openai", "anthropic"])
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--asyncio", action="store_true", help="low-overhead event-loop server (openai only)")
    args = ap.parse_args(argv)
    if args.asyncio:
        import asyncio

        try:
            asyncio.run(_serve_openai_asyncio(args.latency))
        except KeyboardInterrupt:
            pass
        return 0
    cls = FakeOpenAIServer if args.kind == "openai" else FakeAnthropicServer
    srv = cls(latency=args.latency)
    print(srv.port, flush=True)
    try:
        srv.httpd.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())


class FakeAnthropicBatchServer(FakeAnthropicServer):
    """The Message Batches endpoints on top of /v1/messages: POST /v1/messages/batches, GET .../{id} (ends after
    `polls_to_end` retrieves), GET .../{id}/results (JSONL). Each request's outcome is taken, at submission, from
    `outcomes` in order ("succeeded", "overloaded", "invalid", "expired", "canceled"); then "succeeded"."""

    def __init__(self, *, outcomes=(), polls_to_end: int = 1, create_delays=(), **kw):
        super().__init__(**kw)
        self.outcomes: deque[str] = deque(outcomes)
        self.create_delays: deque[float] = deque(create_delays)  # seconds before each creation, in order
        self.polls_to_end = polls_to_end
        self.batches: dict[str, dict] = {}  # id -> {"requests": [...], "outcomes": [...], "polls": n}
        self.direct = 0  # POST /v1/messages (not batched) requests
        self.log: list[tuple[str, str]] = []  # ("create" | "poll", batch id), in the order they arrived

    def _batch_obj(self, bid: str) -> dict:
        b = self.batches[bid]
        ended = b["polls"] >= self.polls_to_end and b["lines"] is not None  # and its answers are all made
        counts = {"processing": 0 if ended else len(b["requests"]), "succeeded": 0, "errored": 0, "canceled": 0,
                  "expired": 0}
        return {"id": bid, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": counts, "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
                "ended_at": "2026-01-01T01:00:00Z" if ended else None, "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{self.url}/v1/messages/batches/{bid}/results" if ended else None}

    def _result_line(self, req: dict, outcome: str) -> dict:
        cid = req["custom_id"]
        if outcome == "succeeded":
            return {"custom_id": cid, "result": {"type": "succeeded", "message": self.respond(req["params"])}}
        if outcome in ("overloaded", "invalid"):
            etype = "overloaded_error" if outcome == "overloaded" else "invalid_request_error"
            return {"custom_id": cid, "result": {"type": "errored", "error": {
                "type": "error", "error": {"type": etype, "message": f"injected {outcome}"}}}}
        return {"custom_id": cid, "result": {"type": outcome}}

    def _handler(self):
        base = super()._handler()
        server = self

        class Handler(base):
            def do_GET(self):
                parts = self.path.rstrip("/").split("/")  # ['', 'v1', 'messages', 'batches', id, ('results')]
                if len(parts) >= 5 and parts[3] == "batches" and parts[4] in server.batches:
                    bid = parts[4]
                    with server.lock:
                        if len(parts) == 6 and parts[5] == "results":
                            lines = server.batches[bid]["lines"] or []
                            self._send(200, ("\n".join(lines) + "\n").encode())
                            return
                        server.batches[bid]["polls"] += 1
                        server.log.append(("poll", bid))
                        body = server._batch_obj(bid)
                    self._send(200, json.dumps(body).encode())
                    return
                self._send(404, json.dumps({"type": "error", "error": {"type": "not_found_error",
                                                                       "message": self.path}}).encode())

            def do_POST(self):
                if self.path.rstrip("/").endswith("/messages/batches"):
                    n = int(self.headers.get("Content-Length") or 0)
                    payload = json.loads(self.rfile.read(n) or b"{}")
                    with server.lock:
                        delay = server.create_delays.popleft() if server.create_delays else 0.0
                    time.sleep(delay)
                    with server.lock:
                        bid = f"msgbatch_{len(server.batches) + 1:04d}"
                        reqs = payload["requests"]
                        outs = [server.outcomes.popleft() if server.outcomes else "succeeded" for _ in reqs]
                        server.batches[bid] = {"requests": reqs, "outcomes": outs, "polls": 0, "lines": None}
                        server.log.append(("create", bid))
                        body = server._batch_obj(bid)

                    def process(b=server.batches[bid]):  # answered in the background, as the real API does:
                        # a poll never waits for the answers (they may come from a busy stand-in server)
                        lines = [json.dumps(server._result_line(r, o))
                                 for r, o in zip(b["requests"], b["outcomes"], strict=True)]
                        with server.lock:
                            b["lines"] = lines

                    threading.Thread(target=process, daemon=True).start()
                    self._send(200, json.dumps(body).encode())
                    return
                with server.lock:
                    server.direct += 1
                super().do_POST()

        return Handler
