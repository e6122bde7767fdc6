"""Every agent end to end with a REAL model (SmolLM2-135M from PyPI, llama.cpp, 2 threads) on REAL
PMData and GLOBEM samples; RAG/RAPTOR use the real MiniLM embedder. Small budgets keep each run short.

SmolLM2 is too small to answer well: the assertions are about complete records (prediction or an
explicit parse failure with the raw text, transcript, tokens, latency), not about accuracy.
"""

from __future__ import annotations

import pytest

from agent_fakes import samples_of
from balms.agents.registry import make_agent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    from balms.models.registry import get_backend

    return get_backend("smollm2-135m", cache_mode="off")


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BALMS_CACHE_DIR", str(tmp_path_factory.mktemp("smol-cache")))
        yield


def _early(samples, user=None):
    """An early sample (short history: few RAPTOR summaries to generate)."""
    pool = [s for s in samples if user is None or s.user == user]
    return pool[0]


# Budgets that keep each run near 30 s on a busy 2-core machine. RAPTOR and PHIA use a 4-day
# look-back (3 day summaries to generate; a short record in the frames), the others the default 14.
OPTS = {
    "healthllm": dict(max_tokens=16),
    "rag": dict(max_tokens=16),
    "raptor": dict(max_tokens=16, summary_max_tokens=16, memory="lookback"),
    "phia": dict(max_tokens=48, max_iters=1, primer="none", fence_stop=False, force_answer=False),  # the paper's
}
LOOKBACK = {"healthllm": 14, "rag": 14, "raptor": 4, "phia": 4}


def _check(rec, sample, system, backend):
    assert rec.system == system and rec.sample_id == sample.sample_id and rec.label == sample.label
    assert rec.model_id == backend.model_id and rec.model_id.startswith("gguf:smollm2")
    assert rec.raw_answer != "" or rec.parse_error
    assert (rec.prediction is None) == (rec.parse_error is not None)
    if rec.prediction is not None:
        assert 0 <= rec.prediction <= 5
    assert rec.prompt_tokens > 100 and rec.completion_tokens > 0 and rec.n_steps >= 1
    assert rec.latency_s > 0 and rec.error is None
    assert any(st.kind in ("completion", "forced_finish") for st in rec.transcript)
    assert rec.options and "seed" in rec.options


@pytest.mark.parametrize("system", ["healthllm", "rag", "raptor", "phia"])
@pytest.mark.parametrize("dataset", ["pmdata", "globem"])
def test_agent_end_to_end_with_smollm(system, dataset, smol, private_cache, real_data):
    tables, samples = samples_of("real", dataset, LOOKBACK[system])
    sample = _early(samples, "p03" if dataset == "pmdata" else None)
    rec = make_agent(system, **OPTS[system]).predict(sample, tables, smol)
    _check(rec, sample, system, smol)
    if system == "phia":
        assert rec.n_steps <= 2  # max_iters + one forced finish
        assert rec.transcript[-1].kind in ("completion", "forced_finish")
    if system in ("rag", "raptor"):
        assert any(st.kind == "retrieval" for st in rec.transcript)
    # records serialise (the runner writes them as JSONL)
    assert type(rec).model_validate_json(rec.model_dump_json()) == rec


def test_cot_record_keeps_rationale(smol, private_cache, real_data):
    tables, samples = samples_of("real", "pmdata")
    # corrected style: its CoT instruction demands reasoning; the paper's CoT prompt only shows a "Reasoning:"
    # line in its example format, which SmolLM2-135M skips (7 completion tokens, no reasoning, when measured).
    rec = make_agent("healthllm", cot=True, max_tokens=40, style="corrected").predict(samples[0], tables, smol)
    assert rec.cot and rec.completion_tokens > 16
    # parsed or not, the reasoning text is kept (as rationale, or inside the raw answer)
    assert rec.rationale or rec.raw_answer
