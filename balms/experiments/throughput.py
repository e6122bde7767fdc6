"""What one server of a model gets through (tokens per second), by model size: the one place `balms plan` (bill,
hours, allocation) and the spending cap (balms.experiments.budget) count GPU time from tokens. A server's GPUs are
the model registry's `tensor_parallel` (stated once, there), read through balms.models.serving as the deploy
commands read it."""

from __future__ import annotations

import re

# Aggregate vLLM throughput of ONE server (continuous batching, concurrency ~32), tokens/s, per size class on
# A6000-class (48 GB) GPUs, each server on the registry's GPUs for its model. Rough engineering figures, not
# measurements: override with --throughput.
THROUGHPUT: dict[str, dict[str, float]] = {
    "7b": {"prefill": 8000.0, "decode": 1200.0},
    "14b": {"prefill": 5000.0, "decode": 700.0},
    "70b": {"prefill": 1200.0, "decode": 120.0},  # the judge, served as the registry says (8-bit over its GPUs)
    "small": {"prefill": 20000.0, "decode": 3000.0},
}
# GPU types the throughput figures hold for, with their memory (GB): the paper's A6000 class
GPU_MEMORY_GB = {"A6000": 48, "L40S": 48}


def size_class(model: str) -> str:
    """7b / 14b / 70b / small from the model's name (the registry has no parameter counts)."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*[bB]\b", model.replace("-", " "))
    if not m:
        return "small"
    b = float(m.group(1))
    return "small" if b < 3 else "7b" if b <= 9 else "14b" if b <= 20 else "70b"


def gpus_per_server(model: str) -> int:
    """The GPUs of one server of `model` as the SkyPilot tasks and `balms deploy local` serve it
    (balms.models.serving: the registry's); 1 for a model the registry does not know."""
    from balms.models.registry import UnknownModelError
    from balms.models.serving import vllm_server

    try:
        return vllm_server(model).gpus
    except UnknownModelError:
        return 1


def server_seconds(model: str, prompt_tokens: float, output_tokens: float, throughput: dict | None = None) -> float:
    """Seconds of one server of `model` that the tokens take at its size class's throughput."""
    t = (throughput or THROUGHPUT)[size_class(model)]
    return prompt_tokens / t["prefill"] + output_tokens / t["decode"]


def gpu_hours(model: str, prompt_tokens: float, output_tokens: float, throughput: dict | None = None) -> float:
    """GPU hours: server time times the server's GPUs (the registry's)."""
    return server_seconds(model, prompt_tokens, output_tokens, throughput) * gpus_per_server(model) / 3600
