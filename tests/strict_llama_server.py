"""llama-cpp-python's OpenAI server behind a strict model-name check, as vLLM behaves.

Why: llama-cpp-python 0.3.36 answers ANY model name with its default model, even with a multi-model
`--config_file` (LlamaProxy falls back to the first model for an unknown alias; verified by hand: a request for
"other-name" to a server whose only alias is "alpha-smol" gets HTTP 200 and the alias's text). vLLM instead
answers 404 "The model `x` does not exist." Routing tests need servers that refuse foreign names, so this
wrapper puts a pure-ASGI check in front of the real app: `/v1/models` and inference are llama.cpp's own.

    python tests/strict_llama_server.py --config_file cfg.json [--request-log requests.log]
    # cfg.json: {"host": "127.0.0.1", "port": N, "models": [{"model": PATH, "model_alias": NAME, ...}]}

With --request-log, every POST naming a model appends one line "<status> <model>" (200 = passed on to llama.cpp,
404 = refused), so a caller can check which names reached which server.

It also accepts vLLM's structured-output dialect, so a client configured for vLLM gets constrained decoding here
too: `response_format: {"type": "json_schema", "json_schema": {"schema": S}}` becomes llama.cpp's
`{"type": "json_object", "schema": S}` and `guided_grammar` becomes `grammar` (llama-cpp-python's server would
answer 422 to the former and ignore the latter).
"""

from __future__ import annotations

import argparse
import json


def vllm_dialect(body: dict) -> dict:
    """vLLM's structured-output fields rewritten to llama-cpp-python's (see the module docstring)."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        body = {**body, "response_format": {"type": "json_object", **({"schema": schema} if schema else {})}}
    if "guided_grammar" in body:
        body = {k: v for k, v in body.items() if k != "guided_grammar"} | {"grammar": body["guided_grammar"]}
    return body


def strict(app, aliases: set[str], request_log: str | None = None):
    """ASGI wrapper: a POST whose JSON body names a model outside `aliases` gets vLLM's 404."""

    def note(status: int, model: str) -> None:
        if request_log:
            with open(request_log, "a", encoding="utf-8") as fh:
                fh.write(f"{status} {model}\n")

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body or b"{}")
            model = parsed.get("model")
        except (ValueError, AttributeError):
            parsed, model = None, None
        if isinstance(parsed, dict) and vllm_dialect(parsed) != parsed:
            body = json.dumps(vllm_dialect(parsed)).encode()
            scope = {**scope, "headers": [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                                          for k, v in scope.get("headers", [])]}
        if model is not None:
            note(404 if model not in aliases else 200, str(model))
        if model is not None and model not in aliases:
            err = json.dumps(
                {
                    "error": {
                        "message": f"The model `{model}` does not exist.",
                        "type": "NotFoundError",
                        "param": None,
                        "code": 404,
                    }
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(err)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": err})
            return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapped


def start(aliases, workdir, *, name: str, threads: int = 1, n_ctx: int = 1024, model_path: str | None = None):
    """Start this server in a subprocess serving SmolLM2 (or `model_path`) under `aliases`; return
    (Popen, base url ending in /v1, request-log path). The caller waits with `wait_ready` and stops it."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    if model_path is None:
        from balms.models.gguf_assets import gguf_path

        model_path = str(gguf_path("smollm2-135m"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = Path(workdir)
    cfg = {"host": "127.0.0.1", "port": port,
           "models": [{"model": model_path, "model_alias": a, "n_ctx": n_ctx, "n_threads": threads,
                       "n_threads_batch": threads, "verbose": False} for a in aliases]}
    (workdir / f"{name}.json").write_text(json.dumps(cfg))
    req_log = workdir / f"{name}.requests"
    with open(workdir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, __file__, "--config_file", str(workdir / f"{name}.json"),
                                 "--request-log", str(req_log)], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}/v1", req_log


def wait_ready(proc, url: str, *, timeout_s: float = 120.0, log_path=None) -> None:
    """Until `url`/models answers 200; a server that exits or stays silent raises with its log's tail."""
    import time
    from pathlib import Path

    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        tail = Path(log_path).read_text(errors="replace")[-2000:] if log_path and Path(log_path).exists() else ""
        if proc.poll() is not None:
            raise RuntimeError(f"server {url} exited ({proc.returncode}):\n{tail}")
        try:
            if httpx.get(url.rstrip("/") + "/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"server {url} not ready after {timeout_s:g} s:\n{tail}")
        time.sleep(0.3)


def requests_seen(req_log) -> list[tuple[int, str]]:
    """(status, model) of every POST the server logged."""
    from pathlib import Path

    p = Path(req_log)
    lines = p.read_text(encoding="utf-8").splitlines() if p.exists() else []
    return [(int(a), b) for a, b in (ln.split(" ", 1) for ln in lines if ln.strip())]


def main(argv=None) -> int:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ConfigFileSettings, ServerSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--config_file", required=True)
    ap.add_argument("--request-log", default=None, help="append '<status> <model>' per POST to this file")
    args = ap.parse_args(argv)
    with open(args.config_file, "rb") as fh:
        cfg = ConfigFileSettings.model_validate_json(fh.read())
    server = ServerSettings.model_validate(cfg)
    app = create_app(server_settings=server, model_settings=cfg.models)
    aliases = {m.model_alias or m.model for m in cfg.models}
    uvicorn.run(strict(app, aliases, args.request_log), host=server.host, port=server.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
