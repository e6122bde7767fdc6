"""Per-sample seeds: a stable hash of (sample id, run seed), so a sample decodes the same way in every
process and on every machine (Python's `hash()` is salted per process and cannot be used)."""

from __future__ import annotations

import hashlib


def sample_seed(sample_id: str, seed: int) -> int:
    """A 31-bit non-negative seed derived from `sample_id` and the run `seed` (fits every backend's seed)."""
    digest = hashlib.sha256(f"{seed}\x1f{sample_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFF
