"""Agent registry: a system name and options -> an Agent (see balms.agents.base.Agent).

    make_agent("healthllm", cot=True, channels="wearable", context=False)
    make_agent("phia", executor="improved", max_iters=10)

Every option that changes the output is recorded in PredictionRecord.options by the agent itself.
"""

from __future__ import annotations

import dataclasses

from balms.agents.base import Agent
from balms.agents.healthllm import HealthLLMAgent
from balms.agents.personal_baseline import PersonalBaselineAgent
from balms.agents.phia import PhiaAgent
from balms.agents.rag import RAGAgent
from balms.agents.raptor import RaptorAgent

PAPER_SYSTEMS = ["healthllm", "rag", "raptor", "phia"]  # the paper's four, what its profile runs by default
OURS = ["personal_baseline"]  # systems of ours (not in the paper), labelled as ours wherever they appear
SYSTEMS = [*PAPER_SYSTEMS, *OURS]
_CLASSES = {"healthllm": HealthLLMAgent, "rag": RAGAgent, "raptor": RaptorAgent, "phia": PhiaAgent,
            "personal_baseline": PersonalBaselineAgent}
# One model call per sample with its prompt known up front (Message Batches, the plan's batch pricing, the
# CPU study's model-size cells).
SINGLE_CALL = ("healthllm", "rag", "personal_baseline")


def agent_options(system: str) -> list[str]:
    """The option names a system accepts (besides `cot`)."""
    cls = _CLASSES[system]
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name != "cot"]


def make_agent(system: str, *, cot: bool = False, **options) -> Agent:
    """Build an agent; unknown systems or options are an error that lists the valid ones."""
    key = {k.replace("_", ""): k for k in _CLASSES}.get(system.lower().replace("-", "").replace("_", ""))
    if key is None:
        raise ValueError(f"unknown system {system!r}; known systems: {', '.join(SYSTEMS)}")
    allowed = agent_options(key)
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ValueError(f"{key}: unknown option(s) {bad}; allowed: {allowed}")
    return _CLASSES[key](cot=cot, **options)
