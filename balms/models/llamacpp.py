"""Embedded llama.cpp backend (llama-cpp-python): real small instruct models on a CPU, no server, no hub.

Each GGUF file is loaded once per process (module-level pool) and shared by every backend object that
names it; a lock serialises calls because a `Llama` object is not thread-safe. The context window starts at
4096 tokens and is grown (model reloaded) only when a prompt needs more, up to the model's trained context.
The system message is always sent explicitly: with none, Qwen's embedded chat template injects its own
("You are Qwen, created by Alibaba Cloud..."), which would make prompts differ across backends. A request
without one gets DEFAULT_SYSTEM; the backend declares it (`request_additions`), so it enters the response-cache
key and the cell spec.

OpenMP threads must not spin while idle: on a shared or oversubscribed CPU, llama.cpp's default busy-waiting
made generation many times slower here (SmolLM2 tests). OMP_WAIT_POLICY=PASSIVE is therefore set
(unless the user set it) before llama_cpp, and with it libgomp, is first imported.
"""

from __future__ import annotations

import atexit
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.reasoning import split_reasoning

DEFAULT_N_CTX = 4096
DEFAULT_SYSTEM = "You are a helpful assistant."


@dataclass
class _Loaded:
    llama: object
    n_ctx: int
    n_ctx_train: int
    lock: threading.Lock
    grammars: dict


_POOL: dict[str, _Loaded] = {}
_POOL_LOCK = threading.Lock()


def _threads(n_threads: int | None) -> int:
    return int(n_threads or os.environ.get("BALMS_LLAMA_THREADS", 2))


def _load(path: Path, n_ctx: int, n_threads: int):
    try:
        from llama_cpp import Llama
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendError(
            "llama-cpp-python is not installed: pip install 'balms[embedded]' (see OFFLINE_MODELS.md for the "
            "CMAKE_ARGS that avoid the AMX SIGILL)"
        ) from exc
    return Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_batch=512, verbose=False, seed=0)


def _entry(path: Path, n_threads: int) -> _Loaded:
    key = str(path)
    with _POOL_LOCK:
        if key not in _POOL:
            llama = _load(path, DEFAULT_N_CTX, n_threads)
            _POOL[key] = _Loaded(llama, DEFAULT_N_CTX, int(llama._model.n_ctx_train()), threading.Lock(), {})
        return _POOL[key]


@atexit.register
def _close_all() -> None:
    """Free the models before interpreter shutdown: llama-cpp-python's own __del__ runs too late (its module
    globals are gone) and prints a spurious TypeError at exit."""
    with _POOL_LOCK:
        for entry in _POOL.values():
            close = getattr(entry.llama, "close", None)
            if close is not None:
                close()
        _POOL.clear()


def loaded_models() -> list[str]:
    with _POOL_LOCK:
        return list(_POOL)


class LlamaCppBackend:
    """In-process llama.cpp chat completion for one GGUF model."""

    def __init__(self, model_path, model_id: str, *, name: str | None = None,
                 n_threads: int | None = None, default_system: str = DEFAULT_SYSTEM):
        # model_path may be a callable (resolved on first use, so building a backend never assembles a GGUF)
        self._model_path = model_path
        self.model_id = model_id
        self.name = name or model_id
        self.n_threads = _threads(n_threads)
        self.default_system = default_system

    @staticmethod
    def additions(default_system: str = DEFAULT_SYSTEM) -> dict:
        """What this backend adds to a request (the registry asks this for a replay stand-in too)."""
        return {"default_system": default_system}

    @property
    def request_additions(self) -> dict:
        return self.additions(self.default_system)

    @property
    def model_path(self) -> Path:
        if callable(self._model_path):
            self._model_path = self._model_path()
        return Path(self._model_path)

    def _messages(self, messages: Sequence[Message]) -> list[dict]:
        out = [m.to_dict() for m in messages]
        if not out or out[0]["role"] != "system":
            out.insert(0, {"role": "system", "content": self.default_system})
        return out

    def _ensure_ctx(self, entry: _Loaded, msgs: list[dict], max_tokens: int) -> None:
        text = "\n".join(m["content"] for m in msgs)
        need = len(entry.llama.tokenize(text.encode("utf-8"), add_bos=True)) + 16 * len(msgs) + max_tokens
        if need <= entry.n_ctx:
            return
        if need > entry.n_ctx_train:
            raise BackendError(
                f"{self.model_id}: prompt needs ~{need} tokens (incl. max_tokens={max_tokens}) but the model's "
                f"context is {entry.n_ctx_train}", transient=False)
        new_ctx = min(entry.n_ctx_train, ((need + 4095) // 4096) * 4096)
        entry.llama.close() if hasattr(entry.llama, "close") else None
        entry.llama = _load(self.model_path, new_ctx, self.n_threads)
        entry.n_ctx = new_ctx
        entry.grammars.clear()

    def _grammar(self, entry: _Loaded, gbnf: str):
        from llama_cpp import LlamaGrammar

        if gbnf not in entry.grammars:
            try:
                entry.grammars[gbnf] = LlamaGrammar.from_string(gbnf, verbose=False)
            except Exception as exc:
                raise BackendError(f"{self.model_id}: invalid GBNF grammar: {exc}", transient=False) from exc
        return entry.grammars[gbnf]

    @staticmethod
    def _logprob_recorder(llama, k: int, steps: list):
        """A logits processor that records, at each sampling step, the top-k log-probabilities of the raw
        distribution. It sees the logits before any grammar (it runs first in the sampler chain) and leaves
        them unchanged. Why not `logprobs=` of llama-cpp-python: that needs `logits_all=True`, which keeps
        n_ctx x vocab floats (gigabytes for Qwen at 4096 tokens) and computes logits at every prompt position."""
        import numpy as np

        def record(_input_ids, scores):
            x = np.asarray(scores, dtype=np.float64)
            m = float(x.max())
            lp = x - m - np.log(np.exp(x - m).sum())
            kk = min(k, lp.size)
            top = np.argpartition(-lp, kk - 1)[:kk]
            out: dict[str, float] = {}
            for i in top[np.lexsort((top, -lp[top]))]:  # most probable first, ties by token id
                tok = llama.detokenize([int(i)], special=True).decode("utf-8", errors="replace")
                # distinct tokens with the same text (rare) add up: the probability of that text
                out[tok] = float(np.logaddexp(out[tok], lp[i])) if tok in out else float(lp[i])
            steps.append(out)
            return scores

        return record

    def generate(self, messages: Sequence[Message], params: GenParams) -> Completion:
        entry = _entry(self.model_path, self.n_threads)
        msgs = self._messages(messages)
        kwargs = dict(
            messages=msgs,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            seed=params.seed,
        )
        with entry.lock:
            self._ensure_ctx(entry, msgs, params.max_tokens)
            if params.grammar:
                kwargs["grammar"] = self._grammar(entry, params.grammar)
            elif params.json_schema is not None:
                kwargs["response_format"] = {"type": "json_object", "schema": params.json_schema}
            steps: list[dict[str, float]] = []
            if params.logprobs:
                from llama_cpp import LogitsProcessorList

                kwargs["logits_processor"] = LogitsProcessorList(
                    [self._logprob_recorder(entry.llama, params.logprobs, steps)])
            t0 = time.perf_counter()
            try:
                resp = entry.llama.create_chat_completion(**kwargs)
            except (ValueError, RuntimeError) as exc:
                raise BackendError(f"{self.model_id}: llama.cpp failed: {exc}", transient=False) from exc
            latency = time.perf_counter() - t0
            choice = resp["choices"][0]
            full = choice["message"].get("content") or ""
            answer, reasoning = split_reasoning(full)
            reasoning_tokens = len(entry.llama.tokenize(reasoning.encode("utf-8"), add_bos=False)) if reasoning else 0
        usage = resp.get("usage") or {}
        return Completion(
            text=answer,
            model_id=self.model_id,
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=latency,
            reasoning=reasoning,
            reasoning_tokens=reasoning_tokens,
            raw={"id": resp.get("id"), "n_ctx": entry.n_ctx},
            logprobs=steps if params.logprobs else None,
        )
