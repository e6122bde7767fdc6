"""Test doubles for the agent tests: scripted and echoing backends, a cheap deterministic embedder,
and cached loaders of the real / synthetic tables (loading PMData once per session)."""

from __future__ import annotations

import hashlib
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from balms.models.base import Completion
from balms.paths import shared_data_dir


class ScriptedBackend:
    """Replies from a script (then `default`); remembers every request."""

    def __init__(self, replies=(), default="Answer: 3", model_id="fake-scripted"):
        self.replies = list(replies)
        self.default = default
        self.model_id = model_id
        self.name = "fake"
        self.calls = []

    def generate(self, messages, params):
        self.calls.append((list(messages), params))
        text = self.replies.pop(0) if self.replies else self.default
        return Completion(text=text, model_id=self.model_id, prompt_tokens=11, completion_tokens=3,
                          latency_s=0.001)


class EchoBackend(ScriptedBackend):
    """Echoes the last user message (so whatever a prompt carries flows on into summaries), then
    answers; every request is recorded for leakage checks."""

    def generate(self, messages, params):
        self.calls.append((list(messages), params))
        last = next(m.content for m in reversed(messages) if m.role == "user")
        return Completion(text=last[-2000:] + "\nAnswer: 2", model_id=self.model_id,
                          prompt_tokens=len(last) // 4, completion_tokens=5)


class HashEmbedder:
    """Deterministic bag-of-tokens hashing embedder (no torch): stands in for MiniLM where only the
    plumbing matters (leakage, caching)."""

    dim = 64

    def encode(self, texts, **kw):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in t.split():
                h = int(hashlib.md5(tok.encode()).hexdigest()[:8], 16)
                out[i, h % self.dim] += 1.0
            n = np.linalg.norm(out[i])
            out[i] /= n if n else 1.0
        return out


def use_hash_embedder(monkeypatch):
    from balms.agents import embeddings

    monkeypatch.setattr(embeddings, "load_embedder", lambda name=embeddings.DEFAULT_EMBEDDER: HashEmbedder())


@lru_cache(maxsize=None)
def real_tables(name: str):
    root = shared_data_dir()
    if root is None or not (root / name).is_dir():
        return None
    from balms.data.loading import load_from_dir

    return load_from_dir(name, root / name, source="real")


@lru_cache(maxsize=None)
def synthetic_tables(name: str):
    from balms.data.loading import load_from_dir
    from balms.data.synthetic import write_synthetic

    d = Path(tempfile.mkdtemp(prefix=f"balms-test-synth-{name}-"))
    write_synthetic(name, d, seed=0, n_users=3, n_days=40)
    return load_from_dir(name, d, source="synthetic")


@lru_cache(maxsize=None)
def samples_of(kind: str, name: str, lookback: int = 14):
    from balms.data.samples import build_samples

    tables = real_tables(name) if kind == "real" else synthetic_tables(name)
    if tables is None:
        return None, []
    return tables, build_samples(tables, lookback=lookback).samples
