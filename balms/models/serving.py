"""How vLLM serves a registry model: one server's GPUs and flags, worked out in one place from the registry's
`tensor_parallel`, `quantization` and context length. Its readers: the SkyPilot tasks and the single-node recipe
(`balms deploy skypilot|local`), and the plan's GPU hours and allocation (balms.experiments.throughput)."""

from __future__ import annotations

from dataclasses import dataclass

# vLLM's --max-model-len: the registry's context length, at most this (the judge's 131k window would leave its
# 48 GB GPUs little KV cache; its prompts are a rationale and a window, far below)
MAX_MODEL_LEN_CAP = 32768
# vLLM's reasoning parser per model family (balms splits <think> itself where none is set)
REASONING_PARSERS = {"deepseek-ai/DeepSeek-R1": "deepseek_r1"}
# How a registry `quantization` is served: vLLM's --quantization, and the transformers keyword that writes the
# pre-quantised checkpoint vLLM loads (vLLM quantises bitsandbytes in flight only to 4 bits)
QUANTIZATIONS = {"bitsandbytes-8bit": ("bitsandbytes", "load_in_8bit")}


@dataclass(frozen=True)
class VllmServer:
    """One vLLM server of a registry model."""

    name: str  # the registry's name
    model_id: str  # the served name (--served-model-name): balms routes by it (/v1/models)
    weights: str  # what vLLM loads: the Hugging Face repo, or the pre-quantised checkpoint written from it
    gpus: int  # --tensor-parallel-size: the registry's tensor_parallel
    max_model_len: int
    quantization: str | None = None  # vLLM's --quantization
    quantize_kwarg: str | None = None  # transformers' keyword that writes `weights` from `model_id`
    reasoning_parser: str | None = None

    def flags(self) -> list[str]:
        """The `vllm serve` flags after the weights, the served name and the port."""
        return (["--tensor-parallel-size", str(self.gpus), "--max-model-len", str(self.max_model_len)]
                + (["--quantization", self.quantization] if self.quantization else [])
                + (["--reasoning-parser", self.reasoning_parser] if self.reasoning_parser else []))


def reasoning_parser(model_id: str) -> str | None:
    return next((p for prefix, p in REASONING_PARSERS.items() if model_id.startswith(prefix)), None)


def vllm_server(model) -> VllmServer:
    """The server of `model` (a registry name or spec); UnknownModelError for a name the registry does not know,
    ValueError for a quantization nothing here knows how to serve."""
    from balms.models.registry import spec

    s = spec(model) if isinstance(model, str) else model
    if s.quantization and s.quantization not in QUANTIZATIONS:
        raise ValueError(f"{s.name}: quantization {s.quantization!r} (balms/models/registry.py) has no serving "
                         f"recipe ({', '.join(QUANTIZATIONS)})")
    quant, kwarg = QUANTIZATIONS.get(s.quantization, (None, None))
    return VllmServer(
        s.name, s.model_id,
        weights=f"models/{s.model_id.split('/')[-1]}-{s.quantization}" if quant else s.model_id,
        gpus=s.tensor_parallel, max_model_len=min(s.context_length, MAX_MODEL_LEN_CAP), quantization=quant,
        quantize_kwarg=kwarg, reasoning_parser=reasoning_parser(s.model_id) if s.is_reasoning else None)
