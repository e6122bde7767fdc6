"""llama-cpp-python's OpenAI server behind a strict model-name check, as vLLM behaves.

Why: llama-cpp-python 0.3.36 answers ANY model name with its default model, even with a multi-model
`--config_file` (LlamaProxy falls back to the first model for an unknown alias; verified by hand: a request for
"other-name" to a server whose only alias is "alpha-smol" gets HTTP 200 and the alias's text). vLLM instead
answers 404 "The model `x` does not exist." Routing tests need servers that refuse foreign names, so this
wrapper puts a pure-ASGI check in front of the real app: `/v1/models` and inference are llama.cpp's own.

    python tests/strict_llama_server.py --config_file cfg.json
    # cfg.json: {"host": "127.0.0.1", "port": N, "models": [{"model": PATH, "model_alias": NAME, ...}]}
"""

from __future__ import annotations

import argparse
import json


def strict(app, aliases: set[str]):
    """ASGI wrapper: a POST whose JSON body names a model outside `aliases` gets vLLM's 404."""

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
            model = json.loads(body or b"{}").get("model")
        except (ValueError, AttributeError):
            model = None
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


def main(argv=None) -> int:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ConfigFileSettings, ServerSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--config_file", required=True)
    args = ap.parse_args(argv)
    with open(args.config_file, "rb") as fh:
        cfg = ConfigFileSettings.model_validate_json(fh.read())
    server = ServerSettings.model_validate(cfg)
    app = create_app(server_settings=server, model_settings=cfg.models)
    aliases = {m.model_alias or m.model for m in cfg.models}
    uvicorn.run(strict(app, aliases), host=server.host, port=server.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
