"""What a GPU serving a model gets through (tokens per second, GPUs per server), by model size: the one place
`balms plan` (bill and hours) and the spending cap (balms.experiments.budget) count GPU time from tokens."""

from __future__ import annotations

import re

# Aggregate vLLM throughput of ONE server (continuous batching, concurrency ~32), tokens/s, and its GPUs, per size
# class on A6000-class (48 GB) GPUs. Rough engineering figures, not measurements: override with --throughput.
THROUGHPUT: dict[str, dict[str, float]] = {
    "7b": {"prefill": 8000.0, "decode": 1200.0, "gpus": 1},
    "14b": {"prefill": 5000.0, "decode": 700.0, "gpus": 2},
    "70b": {"prefill": 1200.0, "decode": 120.0, "gpus": 2},  # 8-bit bitsandbytes, tensor parallel 2
    "small": {"prefill": 20000.0, "decode": 3000.0, "gpus": 1},
}


def size_class(model: str) -> str:
    """7b / 14b / 70b / small from the model's name (the registry has no parameter counts)."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*[bB]\b", model.replace("-", " "))
    if not m:
        return "small"
    b = float(m.group(1))
    return "small" if b < 3 else "7b" if b <= 9 else "14b" if b <= 20 else "70b"
