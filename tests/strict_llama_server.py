"""llama-cpp-python's OpenAI server behind a strict model-name check, as vLLM behaves.

Why: llama-cpp-python 0.3.36 answers ANY model name with its default model, even with a multi-model
`--config_file` (LlamaProxy falls back to the first model for an unknown alias; verified by hand: a request for
"other-name" to a server whose only alias is "alpha-smol" gets HTTP 200 and the alias's text). vLLM instead
answers 404 "The model `x` does not exist." Routing tests need servers that refuse foreign names, so this
wrapper puts a pure-ASGI check in front of the real app: inference is llama.cpp's own; `/v1/models` is answered by
the wrapper from the same aliases (llama-cpp-python's handler waits for the model lock, so it stalls while the
server generates; vLLM's answers at once).

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

SHARED_ALIAS = "stand-in"  # the one model instance of a `--serve` server (never a served name)
PROMPT_CACHE_BYTES = 512 << 20  # llama-cpp-python's RAM prompt cache bound (see `start`)


def vllm_dialect(body: dict) -> dict:
    """vLLM's structured-output fields rewritten to llama-cpp-python's (see the module docstring)."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        body = {**body, "response_format": {"type": "json_object", **({"schema": schema} if schema else {})}}
    if "guided_grammar" in body:
        body = {k: v for k, v in body.items() if k != "guided_grammar"} | {"grammar": body["guided_grammar"]}
    return body


def strict(app, aliases: list[str], request_log: str | None = None, *, rename: dict[str, str] | None = None,
           hidden: tuple[str, ...] = ()):
    """ASGI wrapper: a POST whose JSON body names a model outside `aliases` (+ `hidden`) gets vLLM's 404.

    `rename` maps served names onto the config's model alias (one llama.cpp instance answering several names, so
    its prompt cache serves them all); `hidden` names are accepted but not listed by /v1/models."""
    rename = rename or {}
    accepted = set(aliases) | set(hidden)

    def note(status: int, model: str) -> None:
        if request_log:
            with open(request_log, "a", encoding="utf-8") as fh:
                fh.write(f"{status} {model}\n")

    async def respond(send, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") == "/v1/models":
            # answered here, at once, as vLLM does: llama-cpp-python's own handler takes the model lock, so while
            # the server generates (seconds to minutes on a CPU) a client's discovery would time out
            return await respond(send, 200, {"object": "list", "data": [
                {"id": a, "object": "model", "owned_by": "me", "permissions": []} for a in aliases]})
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
        if isinstance(parsed, dict) and (vllm_dialect(parsed) != parsed or model in rename):
            body = json.dumps(vllm_dialect(parsed) | ({"model": rename[model]} if model in rename else {})).encode()
            scope = {**scope, "headers": [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                                          for k, v in scope.get("headers", [])]}
        if model is not None:
            note(404 if model not in accepted else 200, str(model))
        if model is not None and model not in accepted:
            return await respond(send, 404, {"error": {"message": f"The model `{model}` does not exist.",
                                                       "type": "NotFoundError", "param": None, "code": 404}})
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapped


def start(aliases, workdir, *, name: str, threads: int = 1, n_ctx: int = 1024, model_path: str | None = None,
          shared: bool = False, hidden=(), prompt_cache: bool = False):
    """Start this server in a subprocess serving SmolLM2 (or `model_path`) under `aliases`; return
    (Popen, base url ending in /v1, request-log path). The caller waits with `wait_ready` and stops it.

    shared: one model instance answers every alias (and the `hidden` ones, accepted but not listed), instead of
    llama-cpp-python's one instance per alias swapped in and out; prompt_cache: its RAM prompt cache (states kept
    by prompt prefix, PROMPT_CACHE_BYTES), so a prompt another name already sent costs no prefill."""
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
    # cache_size bounds only llama.cpp's state bytes (~23 KB per SmolLM2 token); each entry also keeps a copy of
    # up to n_batch x n_vocab logits (~100 MB), so real memory is ~5x the bound: 512 MiB holds ~20 prompts of
    # 1,000 tokens in ~3 GB (2 GiB reached 8.5 GB on one server, measured)
    one = {"model": model_path, "n_ctx": n_ctx, "n_threads": threads, "n_threads_batch": threads, "verbose": False,
           **({"cache": True, "cache_type": "ram", "cache_size": PROMPT_CACHE_BYTES} if prompt_cache else {})}
    instances = [SHARED_ALIAS] if shared else list(aliases)
    cfg = {"host": "127.0.0.1", "port": port, "models": [one | {"model_alias": a} for a in instances]}
    (workdir / f"{name}.json").write_text(json.dumps(cfg))
    req_log = workdir / f"{name}.requests"
    names = []
    if shared:
        names = [a for n in aliases for a in ("--serve", n)] + [a for n in hidden for a in ("--hidden", n)]
    with open(workdir / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, __file__, "--config_file", str(workdir / f"{name}.json"),
                                 "--request-log", str(req_log), *names], stdout=log, stderr=subprocess.STDOUT,
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
    ap.add_argument("--serve", action="append", default=[],
                    help="a name the config's only model answers to (repeat); default: the config's aliases")
    ap.add_argument("--hidden", action="append", default=[], help="a name accepted but not listed (repeat)")
    args = ap.parse_args(argv)
    with open(args.config_file, "rb") as fh:
        cfg = ConfigFileSettings.model_validate_json(fh.read())
    server = ServerSettings.model_validate(cfg)
    app = create_app(server_settings=server, model_settings=cfg.models)
    aliases = list(dict.fromkeys(m.model_alias or m.model for m in cfg.models))  # config order, as llama.cpp lists
    rename = {}
    if args.serve or args.hidden:
        if len(aliases) != 1:
            ap.error(f"--serve/--hidden need a config with exactly one model, got {aliases}")
        rename = {n: aliases[0] for n in args.serve + args.hidden}
        aliases = list(dict.fromkeys(args.serve))
    uvicorn.run(strict(app, aliases, args.request_log, rename=rename, hidden=tuple(args.hidden)),
                host=server.host, port=server.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
