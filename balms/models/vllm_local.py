"""vLLM in-process: offline batched chat generation on local GPUs (`vllm.LLM.chat` with SamplingParams).

vLLM is imported only when this backend is built (its wheels are CUDA-only); without it the error says how to
install it or to use `vllm serve` + the OpenAI-compatible backend instead. `generate_batch` sends many
conversations in one call, which is where in-process vLLM beats a server; `generate` is the one-request
Backend interface (calls are serialised: vLLM's offline engine is not thread-safe).
For the server route and tensor parallelism over several GPUs, see `balms.models.openai_http`.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.reasoning import estimate_reasoning_tokens, split_reasoning


def _import_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise BackendError(
            "vLLM is not installed, so backend='vllm-local' is unavailable. Install it on a CUDA machine "
            "(pip install 'balms[vllm]'), or start `vllm serve MODEL` and use the OpenAI-compatible backend "
            "(BALMS_VLLM_BASE_URLS=http://host:8000/v1)."
        ) from exc
    return vllm


class VLLMLocalBackend:
    def __init__(self, model_id: str, *, name: str | None = None, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, **engine_kwargs):
        vllm = _import_vllm()
        self._vllm = vllm
        self.model_id = model_id
        self.name = name or model_id
        kwargs = dict(model=model_id, tensor_parallel_size=tensor_parallel_size, **engine_kwargs)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)
        self._lock = threading.Lock()

    def _sampling(self, params: GenParams):
        kw = dict(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                  stop=list(params.stop) or None, seed=params.seed)
        guided = None
        if params.json_schema is not None or params.grammar:
            try:
                from vllm.sampling_params import GuidedDecodingParams

                guided = GuidedDecodingParams(json=params.json_schema) if params.json_schema is not None \
                    else GuidedDecodingParams(grammar=params.grammar)
                kw["guided_decoding"] = guided
            except ImportError:  # newer vLLM: structured outputs
                from vllm.sampling_params import StructuredOutputsParams

                kw["structured_outputs"] = StructuredOutputsParams(json=params.json_schema) \
                    if params.json_schema is not None else StructuredOutputsParams(grammar=params.grammar)
        return self._vllm.SamplingParams(**kw)

    def generate_batch(self, conversations: Sequence[Sequence[Message]], params: GenParams) -> list[Completion]:
        sampling = self._sampling(params)
        convs = [[m.to_dict() for m in msgs] for msgs in conversations]
        t0 = time.perf_counter()
        with self._lock:
            outputs = self.llm.chat(convs, sampling_params=sampling, use_tqdm=False)
        latency = (time.perf_counter() - t0) / max(1, len(convs))
        out = []
        for o in outputs:
            gen = o.outputs[0]
            answer, reasoning = split_reasoning(gen.text)
            n_out = len(gen.token_ids)
            out.append(Completion(
                text=answer, model_id=self.model_id, finish_reason=gen.finish_reason or "stop",
                prompt_tokens=len(o.prompt_token_ids or []), completion_tokens=n_out, latency_s=latency,
                reasoning=reasoning, reasoning_tokens=estimate_reasoning_tokens(gen.text, reasoning, n_out),
            ))
        return out

    def generate(self, messages: Sequence[Message], params: GenParams) -> Completion:
        return self.generate_batch([messages], params)[0]
