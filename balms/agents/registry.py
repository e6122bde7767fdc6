"""The systems of the benchmark, declared once: a `SystemSpec` per system, built into an agent from the config.

    make_agent("healthllm", cot=True, channels="wearable", context=False)
    build_agent("phia", cfg, model="qwen2.5-coder-0.5b", extra={"executor": "improved"})

Configuration validation, the CLI's choices, the grid, the plan's cost model, the notebooks' display names and
the report read this registry; nothing else lists systems. Another installed package adds a system through the
entry-point group `balms.systems` (each entry point loads a `SystemSpec`, or a callable returning one), the way
pytest and inspect_ai find plugins: no edit to `balms/` is needed (see examples/balms-weekly-means).

Every option that changes the output is recorded in PredictionRecord.options by the agent itself; an agent's
dataclass defaults equal the configuration's defaults for every option the configuration sets
(`SystemSpec.config_fields`; tests/test_systems.py checks it), so a bare `make_agent` and a configured run agree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from balms.agents.base import Agent
from balms.agents.healthllm import HealthLLMAgent
from balms.agents.personal_baseline import PersonalBaselineAgent
from balms.agents.phia import PhiaAgent
from balms.agents.rag import RAGAgent
from balms.agents.raptor import RaptorAgent

ENTRY_POINT_GROUP = "balms.systems"


@dataclass(frozen=True)
class SystemSpec:
    """One system: its agent class and everything the benchmark needs to know about it."""

    name: str
    agent: type  # a dataclass agent: agent(cot=..., **options) with .predict(sample, tables, backend)
    display_name: str  # as tables and figures name it (the paper's name for the paper's systems)
    description: str = ""
    paper: bool = True  # one of the paper's four systems; False = ours, labelled as such wherever it appears
    # one model call per sample (the sensor test's and the size check's systems); False: a chain (a ReAct loop, day
    # summaries), which the scheduler starts first, as its chain makes a run's tail
    single_call: bool = True
    batchable: bool = False  # one call per sample with the prompt known up front (Anthropic Message Batches)
    # a sample's calls depend on what its user's earlier samples cached (RAPTOR's day summaries): the plan measures
    # each sample it runs right after its user's previous one (balms.experiments.plan.neighbour_pairs)
    shares_calls: bool = False
    prompt_styles: tuple[str, ...] = ()  # template styles it accepts ("paper", "corrected"); () = none
    has_cot: bool = True  # whether a CoT variant exists
    # agent option -> ExperimentConfig field it is set from (the agent's default must equal the config's)
    config_fields: dict[str, str] = field(default_factory=dict)
    # token budget role of one answer call (balms.models.budgets): "answer" = zs or cot by the cell's CoT
    budget_role: str = "answer"
    # fixed options of every configured cell (e.g. PHIA's default executor, recorded in every spec)
    fixed_options: dict[str, Any] = field(default_factory=dict)
    source: str = "balms"  # the distribution that registered it ("balms" or the plugin's)
    # what `balms prompt` adds to the agent's first prompt: preview(agent, sample, tables, model) -> (the messages,
    # or None for `agent.first_prompt`; notes for stderr). `preview_model`: `--model` builds the exact prompt
    # (RAPTOR's day summaries); without it `model` is always None
    preview: Callable | None = None
    preview_model: bool = False

    @property
    def label(self) -> str:
        """The name tables show: the paper's systems as named there; ours marked as ours."""
        return self.display_name if self.paper else f"{self.display_name} (ours)"

    def accepted_options(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.agent) if f.init and f.name != "cot"]


def _rag_preview(agent, sample, tables, model):
    """RAG: the days its retrieval picks for the query window."""
    from balms.agents.rag import retrieve_days

    window, _ = agent.window(sample, tables)
    got = retrieve_days(tables, window, k=agent.top_k, scope=agent.memory, embedder=agent.embedder, style=agent.style)
    return None, [f"retrieved days {got['dates']} (scores {got['scores']}) of {got['n_candidates']} candidates; "
                  f"query day {got['query_date']}"]


def _raptor_preview(agent, sample, tables, model):
    """RAPTOR: with a model, the exact prompt (day summaries from the cache or generated); else leaves only."""
    if model is None:
        return None, ["RAPTOR without --model: day summaries need an LLM, so this prompt comes from a retrieval "
                      "over the sub-day leaves only; pass --model NAME for the exact prompt with summaries"]
    from balms.agents import prompts
    from balms.agents.common import Episode
    from balms.models.registry import get_backend

    backend = get_backend(model)
    episode = Episode(backend)
    msgs = prompts.messages(agent.system_prompt, agent._prompt(sample, tables, backend, episode))
    ret = next((st for st in episode.transcript if st.kind == "retrieval"), None)
    return msgs, ([] if ret is None else [f"retrieved: {ret.meta.get('ids')} ({ret.meta.get('summaries_generated')} "
                                          "summaries generated now)"])


# the prompt systems: template style and the CoT forced answer (ours; the agents apply it to CoT cells only)
_PROMPT_FIELDS = {"style": "prompt_style", "force_answer": "cot_force_answer", "force_missing": "cot_force_missing",
                  "cot_format": "cot_format"}
_PROMPT = dict(prompt_styles=("paper", "corrected"))
_BUILTIN = (
    SystemSpec("healthllm", HealthLLMAgent, "Health-LLM", "one prompt with the look-back window (Kim et al. 2024)",
               batchable=True, config_fields=_PROMPT_FIELDS, **_PROMPT),
    SystemSpec("rag", RAGAgent, "RAG", "top-k days of the user's memory by embedding similarity, plus the query day",
               batchable=True, config_fields={**_PROMPT_FIELDS, "top_k": "retrieval_top_k"}, preview=_rag_preview,
               **_PROMPT),
    SystemSpec("raptor", RaptorAgent, "Raptor", "day summaries over sub-day leaves, retrieved from a two-level tree",
               single_call=False, shares_calls=True,
               config_fields={**_PROMPT_FIELDS, "top_k": "retrieval_top_k", "memory": "raptor_memory"},
               preview=_raptor_preview, preview_model=True, **_PROMPT),
    SystemSpec("phia", PhiaAgent, "PHIA", "ReAct loop writing pandas code over the user's record in a sandbox",
               single_call=False, budget_role="phia_step", fixed_options={"executor": "faithful"},
               config_fields={"max_iters": "phia_max_iters", "primer": "phia_primer", "fence_stop": "phia_fence_stop",
                              "force_answer": "phia_force_answer", "frame_span": "phia_frame_span",
                              "code_fence": "phia_code_fence",
                              "sleep_recipe": "phia_sleep_recipe"}),
    # ours (issue 26): the paper's lesson as a system; runs only where a profile or parameter names it
    SystemSpec("personal_baseline", PersonalBaselineAgent, "Personal baseline",
               "one prompt with the user's training-day label anchor and the window as deviations from the user's "
               "own training-day channel means", paper=False, batchable=True, prompt_styles=("corrected",),
               config_fields={"split_seed": "seed", "force_answer": "cot_force_answer",
                              "force_missing": "cot_force_missing"}),
)
_SYSTEMS: dict[str, SystemSpec] = {s.name: s for s in _BUILTIN}
_PLUGINS_LOADED = False
PAPER_SYSTEMS: tuple[str, ...] = tuple(s.name for s in _BUILTIN if s.paper)


def register_system(spec: SystemSpec, *, replace: bool = False) -> SystemSpec:
    """Add a system (an entry point does this for an installed plugin); a clash is an error unless `replace`."""
    if not isinstance(spec, SystemSpec):
        raise TypeError(f"register_system expects a SystemSpec, got {type(spec).__name__}")
    if not spec.name.isidentifier() or spec.name != spec.name.lower():
        raise ValueError(f"system name {spec.name!r}: expected a lower-case identifier (it names run files)")
    if spec.name in _SYSTEMS and not replace and _SYSTEMS[spec.name] is not spec:
        raise ValueError(f"system {spec.name!r} is already registered (by {_SYSTEMS[spec.name].source})")
    _SYSTEMS[spec.name] = spec
    return spec


def load_plugins() -> None:
    """Register every `balms.systems` entry point once; a broken plugin is named on stderr and skipped."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from balms.plugins import register_entry_points

    register_entry_points(ENTRY_POINT_GROUP, SystemSpec, register_system, "system")


def system_names(*, paper_only: bool = False) -> list[str]:
    """Every registered system (built-ins first, then plugins); `paper_only`: the paper's four."""
    load_plugins()
    return [n for n, s in _SYSTEMS.items() if s.paper or not paper_only]


def get_system(name: str) -> SystemSpec:
    """The system's spec, by name or display name in any case and punctuation ("Health-LLM" = "healthllm")."""
    load_plugins()
    if name in _SYSTEMS:
        return _SYSTEMS[name]
    norm = "".join(ch for ch in str(name).lower() if ch.isalnum())
    for s in _SYSTEMS.values():
        if norm in ("".join(ch for ch in s.name if ch.isalnum()),
                    "".join(ch for ch in s.display_name.lower() if ch.isalnum())):
            return s
    raise ValueError(f"unknown system {name!r}; known systems: {', '.join(_SYSTEMS)}")


def display_names() -> dict[str, str]:
    """system -> the label tables show."""
    return {n: get_system(n).label for n in system_names()}


def agent_options(system: str) -> list[str]:
    """The option names a system accepts (besides `cot`)."""
    return get_system(system).accepted_options()


def make_agent(system: str, *, cot: bool = False, **options) -> Agent:
    """Build an agent from explicit options (the rest are the agent's defaults, equal to the configuration's);
    unknown systems or options are an error that lists the valid ones."""
    spec = get_system(system)
    allowed = spec.accepted_options()
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ValueError(f"{spec.name}: unknown option(s) {bad}; allowed: {allowed}")
    return spec.agent(cot=cot, **options)


def config_options(system: str, cfg, cot: bool, model: str | None = None, extra: dict | None = None) -> dict:
    """The options a system gets from an ExperimentConfig `cfg` (then `extra`, e.g. an ablation's channels).
    Token budgets follow the model: reasoning models get their own (balms.models.budgets.budget_for)."""
    from balms.models.budgets import budget_for

    spec = get_system(system)

    def budget(role: str) -> int:
        return budget_for(model, role, cfg) if model else int(getattr(cfg, {
            "zs": "zs_max_tokens", "cot": "cot_max_tokens", "phia_step": "phia_step_tokens",
            "raptor_summary": "raptor_summary_tokens"}[role]))

    accepted = set(spec.accepted_options())
    role = ("cot" if cot else "zs") if spec.budget_role == "answer" else spec.budget_role
    opts: dict = {}
    if "max_tokens" in accepted:
        opts["max_tokens"] = budget(role)
    if "seed" in accepted:
        opts["seed"] = cfg.seed
    if "summary_max_tokens" in accepted:
        opts["summary_max_tokens"] = budget("raptor_summary")
    opts.update({opt: getattr(cfg, f) for opt, f in spec.config_fields.items() if opt in accepted})
    opts.update(spec.fixed_options)
    opts.update(extra or {})
    return opts


def build_agent(system: str, cfg, *, cot: bool = False, model: str | None = None, extra: dict | None = None) -> Agent:
    """The agent a cell runs: options from the configuration (`config_options`), then `extra`."""
    return make_agent(system, cot=cot, **config_options(system, cfg, cot, model, extra))


SYSTEMS = list(PAPER_SYSTEMS)  # kept for callers of the old constant: the paper's four
