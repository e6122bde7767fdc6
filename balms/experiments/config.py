"""The experiment configuration: one pydantic model, defaults in one place, profiles that only override.

Resolution order: the defaults below (the paper's grid on the embedded CPU model; `profiles/demo.yaml`, `make
paper`'s default, only cuts them to size) <- `profiles/<name>.yaml`
<- explicit overrides (`make paper P="-p n_samples 20"`, a notebook's parameters). Every layer is validated
with `extra="forbid"`: a misspelt key fails with the known keys listed and the closest match suggested, it is
never silently ignored. Each notebook declares the parameters it uses in its `parameters` cell (all `None` =
"take the profile's value"); `balms config params` writes exactly those, resolved, for papermill.
"""

from __future__ import annotations

import ast
import difflib
import shlex
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from balms import paths
from balms.agents import prompts
from balms.agents.registry import PAPER_SYSTEMS, get_system, system_names
from balms.data.registry import dataset_names

# the profiles ship inside the package (an installed wheel has them); `profiles/` in the checkout links here
PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
SYSTEMS = PAPER_SYSTEMS  # the default grid: the paper's four (a registered system of ours or a plugin's by name)


class ConfigError(ValueError):
    """A configuration problem, said in one message that names the source and the expected keys."""


class ExperimentConfig(BaseModel):
    """Every parameter a notebook or `balms run` may take. Defaults = the demo profile before its size cuts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = "demo"
    # what is evaluated
    datasets: list[str] = ["diversityone", "pmdata", "globem"]
    systems: list[str] = list(SYSTEMS)
    backbones: list[str] = ["qwen2.5-coder-0.5b"]
    # a system that runs on its own backbone instead of `backbones`, wherever it runs (every notebook, the judge);
    # {} = every system on every backbone (the paper's grid). Demo: see profiles/demo.yaml for the measurements.
    system_backbones: dict[str, str] = {}
    n_samples: NonNegativeInt = 2  # evaluation samples per dataset (0 = every test sample)
    # per-cell counts where they differ from n_samples, most specific key first: "<dataset>.<system>.cot",
    # "<dataset>.<system>", "<dataset>.cot", "<dataset>" (0 = all). Samples are nested: a smaller cell evaluates
    # the first n of a larger cell's samples, so cells of one dataset compare paired on their common samples.
    n_samples_by: dict[str, NonNegativeInt] = {}
    seed: NonNegativeInt = 0  # numpy's generators take no negative seed
    # which samples are scored and what the mean predictor predicts (balms.data.evaluation.EVALUATION_RULES):
    # "heldout30" = ours, a seeded 30% of each user's days; "all_days_loo" = the paper's as derived from its counts
    # (every sample scored, the mean predictor a leave-one-out mean); the paper profile sets it
    evaluation_rule: str = "heldout30"
    # the MAE compared with the paper (docs/scoring.md; both are always reported): "exclude" = parse failures left
    # out; "fill" = each scored as the answer 0 (balms.metrics.PAPER_FAILURE_FILL), the rule the paper's Table 3 and
    # Table 7 numbers allow; the paper profile sets it
    scoring: Literal["exclude", "fill"] = "exclude"
    prompt_style: Literal["paper", "corrected"] = "paper"  # Health-LLM/RAG/RAPTOR template (see README)
    # the paper style's CoT answer format (balms.agents.paper_prompts.COT_FORMATS): "printed" = the paper's template
    # with its worked reasoning paragraph (the paper profile); "paper" = a placeholder paragraph, then "The user's
    # stress score is 3." (the demo's); "answer_line" = our earlier "Reasoning:" placeholder then "Answer:"
    cot_format: Literal["paper", "answer_line", "printed"] = "paper"
    # decoding budgets
    zs_max_tokens: PositiveInt = prompts.ZERO_SHOT_MAX_TOKENS
    cot_max_tokens: PositiveInt = prompts.COT_MAX_TOKENS
    cot_systems: list[str] | None = None  # the systems that run with CoT, in every notebook (None: `systems`)
    # ours: a CoT reply that ends without an answer statement (cut off by cot_max_tokens, or finished without one) is
    # asked for its answer alone (balms.agents.prompts.FORCE_ANSWER); records say force_answer, transcripts the reason
    cot_force_answer: bool = True
    cot_force_missing: bool = True  # ours, with cot_force_answer: also ask when a reply finished without an answer
    # ours: a PHIA forced finish without an answer statement is asked once more for the answer alone
    # (records: options.force_answer, a "forced_answer" step); off in the paper profile
    phia_force_answer: bool = True
    phia_max_iters: PositiveInt = 3
    phia_step_tokens: PositiveInt = prompts.PHIA_STEP_MAX_TOKENS  # max tokens per PHIA model call (thought + code)
    # ours, off in the paper profile (balms.agents.prompts.PHIA_PRIMERS): "code_first" asks for a first step with a
    # python block over the DataFrames, "example" shows a worked first step; recorded in records' options
    # demo and CPU study: code_first + fence stop. Measured by `make bench-roles` (bench/roles.json, 6 real PMData and
    # GLOBEM episodes per contract): with the plain prompt the 0.5B model wrote code in 0 of 6 episodes under either
    # contract; with code_first+stop in 6 of 6 (its own code; the "example" primer's blocks were mostly the example's)
    phia_primer: Literal["none", "code_first", "example"] = "code_first"
    phia_fence_stop: bool = True  # ours: a PHIA step's generation ends at its first closing code fence
    # where the paper contradicts itself (balms.agents.phia): PHIA's frames hold the user's full record (Appendix A)
    # or the look-back window (Appendix D's trace, 56 = 14 x 4 GLOBEM rows); its PMData sleep column follows the
    # corrected recipe or the paper's, which the other systems' prompts read ("identical input windows", 3.3)
    phia_frame_span: Literal["record", "lookback"] = "record"
    # ours: PHIA's code fence in its prompts (balms.agents.prompts.PHIA_CODE_FENCES); "tool_code" = the label of the
    # paper's printed trace (Appendix D), "python" = every committed response's
    phia_code_fence: Literal["python", "tool_code"] = "python"
    phia_sleep_recipe: Literal["corrected", "paper"] = "corrected"
    # reasoning models (registry is_reasoning, e.g. DeepSeek-R1-Distill): the <think> trace comes out of the same
    # max_tokens, so they get their own budgets (balms.models.budgets.budget_for)
    reasoning_zs_max_tokens: PositiveInt = 2048
    reasoning_cot_max_tokens: PositiveInt = 4096
    reasoning_phia_step_tokens: PositiveInt = 2048
    raptor_summary_tokens: PositiveInt = prompts.SUMMARY_MAX_TOKENS  # max tokens of one RAPTOR day summary
    retrieval_top_k: PositiveInt = 3  # RAG's and RAPTOR's top-k (the paper's top-3)
    raptor_memory: Literal["lookback", "history"] = "lookback"  # history = every earlier day (the paper's)
    # look-back (days) of every cell outside notebook 03's sweep; None = each dataset's own (DiversityOne 7,
    # PMData and GLOBEM 14). Same target days either way: the window is cut to its last `lookback` days.
    lookback: PositiveInt | None = None
    # look-back sweep (notebook 03)
    lookbacks: list[PositiveInt] = Field(default=[7, 14, 28], min_length=1)
    horizon_datasets: list[str] = ["pmdata", "globem"]
    horizon_backbone: str | None = None  # None: the first backbone
    horizon_systems: list[str] = ["healthllm", "rag", "phia"]
    # the model-size check of notebook 08 (the CPU study): the zero-shot cells of the single-call systems among
    # `systems` (registry cost model "single") repeated on each of these backbones, on the same samples
    size_backbones: list[str] = []
    # per dataset, how many of the zero-shot cells' target days the size check repeats: the first n of the same
    # nested order, so its days are a subset of the study backbone's and the two compare paired (absent: all)
    size_n_samples: dict[str, PositiveInt] = {}
    # the sensor test of notebook 08 (issue 39), on these datasets (empty: off): each system that supports it
    # (`sensor_test_systems`) on every backbone of the study (`backbones`, then `size_backbones` on their days)
    # repeats its zero-shot cell with the sensor placebo (another user's window; the same user's distant one),
    # without sensor lines (mood only), without the same-day mood, and with the paper template's neutral format
    # example (balms.experiments.cells, balms.experiments.study.sensor_rows); only those among `datasets` (elsewhere
    # there is no real zero-shot cell to compare with, so a narrowed `datasets` narrows the test too)
    sensor_test_datasets: list[str] = []
    # the backbones among those it runs on (empty: all of them); the others' rows say "not run"
    sensor_test_models: list[str] = []
    # ablations (04) and PHIA executors (05)
    ablation_systems: list[str] = list(SYSTEMS)
    executors: list[str] = ["faithful", "improved"]
    # judge (07)
    judge_model: str = "qwen2.5-coder-1.5b"  # geval: the 0.5B model's score distributions ignore the rationale
    judge_systems: list[str] = ["healthllm"]
    # datasets whose CoT rationales notebook 07 judges (it runs the CoT cells it grades, also of a dataset outside
    # `datasets`); None = `datasets`. The paper judged GLOBEM only (Figure 4, Table 6)
    judge_datasets: list[str] | None = None
    judge_max_tokens: PositiveInt = 160
    judge_justify: bool = False  # paper mode only. False: scores only (about a fifth of the tokens)
    # "paper": the paper's judge, one greedy JSON answer for all dimensions. "geval": one question per dimension,
    # score = expectation over the judge's score-token distribution (balms.judges.geval); tells rationales apart
    # on a CPU model where greedy JSON gives every rationale the same scores.
    judge_mode: Literal["paper", "geval"] = "geval"
    # the judge's input (1) (balms.judges.llm_judge.JUDGE_WINDOWS): "agent" = each agent's own view (ours, the demo);
    # "lookback" = the paper's "per-feature arrays over the look-back window" for every system (the paper profile)
    judge_window: Literal["agent", "lookback"] = "agent"
    judge_grounding_hint: bool = True  # our extension: show the judge the grounding checker's verified findings
    # execution
    servers: list[str] = []  # OpenAI-compatible base URLs (with BALMS_VLLM_BASE_URLS); routed by /v1/models
    anthropic_batch: bool = False  # Claude's single-call cells through the Message Batches API (half price)
    cache_mode: Literal["rw", "replay", "off"] = "rw"
    concurrency: PositiveInt = 1
    # a record whose sample failed with an error (agent, harness or backend; status "error"), and a judge verdict
    # that is a backend error, is not a result: the next run retries it. False keeps them as they are.
    retry_errors: bool = True
    # a grid with any error record stops its notebook once every cell has run (so `make paper` exits non-zero, and
    # the next run retries them); True lets the notebooks go on and show the errors beside the results
    allow_errors: bool = False
    # the scheduler (balms.experiments.scheduler): requests in flight per OpenAI-compatible server (a URL in
    # server_slot_limits overrides it; vLLM's --max-num-seqs is the server's own batch limit, 256 by default, but
    # more in flight than the GPU batches well only queues), per Anthropic account, and sample threads at once
    server_slots: PositiveInt = 16
    server_slot_limits: dict[str, PositiveInt] = {}
    anthropic_slots: PositiveInt = 8
    scheduler_threads: PositiveInt = 1024
    # spending cap of a scheduled run (balms.experiments.budget): Claude at list price, vLLM GPU hours by tokens
    max_usd: PositiveFloat | None = None
    max_gpu_hours: PositiveFloat | None = None
    # each model call's wall-clock deadline in seconds, retried like any transient error (None: from the call's
    # max_tokens, balms.models.retrying.call_deadline); a server that hangs or drips bytes meets it
    call_deadline_s: PositiveFloat | None = None
    raw_root: str | None = None  # default: balms.paths.raw_dir() (BALMS_RAW_DIR, ../shared/data, data/raw)
    # a dataset committed as real that resolves to synthetic writes to build/synthetic/ unless this is true
    allow_synthetic: bool = False
    # the notebooks `make paper` executes (stems); a study notebook (08_cpu_study) runs only where a profile names it
    notebooks: list[str] | None = ["00_preprocessing", "01_prediction", "02_cot", "03_long_horizon", "04_ablations",
                                   "05_phia_failures", "06_latency", "07_rationale_quality"]

    @field_validator("datasets", "horizon_datasets", "judge_datasets")
    @classmethod
    def _known_datasets(cls, v: list[str] | None) -> list[str] | None:
        bad = [d for d in v or [] if d not in dataset_names()]
        if bad:
            raise ValueError(f"unknown dataset(s) {bad}; known: {dataset_names()}")
        return v

    @field_validator("systems", "horizon_systems", "ablation_systems", "judge_systems", "cot_systems")
    @classmethod
    def _known_systems(cls, v: list[str] | None) -> list[str] | None:
        known = system_names()
        bad = [s for s in v or [] if s not in known]
        if bad:
            raise ValueError(f"unknown system(s) {bad}; known: {known}")
        return v

    @field_validator("horizon_systems")
    @classmethod
    def _horizon_split(cls, v: list[str]) -> list[str]:
        if "personal_baseline" in v:  # its baselines follow the default look-back's split (its split_lookback)
            raise ValueError("personal_baseline cannot run in the look-back sweep: the sweep draws its target days "
                             "from another split (the longest look-back's), which its baselines do not follow")
        return v

    @field_validator("evaluation_rule")
    @classmethod
    def _known_evaluation_rule(cls, v: str) -> str:
        from balms.data.evaluation import EVALUATION_RULES

        if v not in EVALUATION_RULES:
            raise ValueError(f"unknown evaluation rule {v!r}; known: {sorted(EVALUATION_RULES)}")
        return v

    @model_validator(mode="after")
    def _personal_baseline_needs_held_out_days(self) -> ExperimentConfig:
        # its label anchor is the mean of the user's training-day labels (balms.data.samples.target_day_split, the
        # heldout30 split); under a rule that scores every day those labels are scored too: refuse, never leak
        named = {*self.systems, *self.ablation_systems, *self.judge_systems, *(self.cot_systems or [])}
        if "personal_baseline" in named and self.evaluation_rule != "heldout30":
            raise ValueError(f"personal_baseline needs evaluation_rule 'heldout30' (its baselines are the user's "
                             f"training days, which rule {self.evaluation_rule!r} also scores)")
        return self

    @model_validator(mode="after")
    def _sensor_models_are_the_studys(self) -> ExperimentConfig:
        study = [*self.backbones, *self.size_backbones]
        bad = [m for m in self.sensor_test_models if m not in study]
        if bad:
            raise ValueError(f"sensor_test_models: {bad} not among the study's backbones and size_backbones {study}")
        return self

    @field_validator("system_backbones")
    @classmethod
    def _known_system_keys(cls, v: dict[str, str]) -> dict[str, str]:
        from balms.models.registry import canonical_name

        known = system_names()
        bad = [s for s in v if s not in known]
        if bad:
            raise ValueError(f"unknown system(s) {bad}; known: {known}")
        return {s: canonical_name(m) for s, m in v.items()}

    @field_validator("backbones", "horizon_backbone", "judge_model")
    @classmethod
    def _canonical_models(cls, v: list[str] | str | None) -> list[str] | str | None:
        """Model names as the registry spells them (it matches any case): one model is one cell, one run file."""
        from balms.models.registry import canonical_name

        if v is None or isinstance(v, str):
            return v if v is None else canonical_name(v)
        return list(dict.fromkeys(canonical_name(m) for m in v))

    @field_validator("n_samples_by")
    @classmethod
    def _sample_keys(cls, v: dict[str, int]) -> dict[str, int]:
        known = system_names()
        valid = {f"{d}{s}{c}" for d in dataset_names() for s in ("", *(f".{x}" for x in known)) for c in ("", ".cot")}
        for key in v:
            if key not in valid:
                raise ValueError(f"n_samples_by key {key!r}: expected '<dataset>', '<dataset>.<system>', "
                                 f"'<dataset>.cot' or '<dataset>.<system>.cot' with a dataset in {dataset_names()} "
                                 f"and a system in {known}")
        return v

    @field_validator("sensor_test_datasets")
    @classmethod
    def _sensor_datasets(cls, v: list[str]) -> list[str]:
        bad = [d for d in v if d not in dataset_names()]
        if bad:
            raise ValueError(f"sensor_test_datasets: unknown dataset(s) {bad}; expected among {dataset_names()}")
        return v

    @field_validator("size_n_samples")
    @classmethod
    def _size_keys(cls, v: dict[str, int]) -> dict[str, int]:
        for key in v:
            if key not in dataset_names():
                raise ValueError(f"size_n_samples key {key!r}: expected a dataset in {dataset_names()}")
        return v

    # ------------------------------------------------------------------------------------------ helpers
    def n_for(self, dataset: str, system: str | None = None, cot: bool = False) -> int:
        """How many evaluation samples a cell gets (`n_samples_by`, most specific key first, else n_samples)."""
        keys = ([f"{dataset}.{system}.cot"] if system and cot else []) + ([f"{dataset}.{system}"] if system else []) \
            + ([f"{dataset}.cot"] if cot else []) + [dataset]
        return next((self.n_samples_by[k] for k in keys if k in self.n_samples_by), self.n_samples)

    @property
    def size_systems(self) -> list[str]:
        """The systems notebook 08 repeats on `size_backbones`: the single-call ones among `systems`."""
        return [s for s in self.systems if get_system(s).single_call]

    @property
    def sensor_test_systems(self) -> list[str]:
        """The systems notebook 08's sensor test repeats: those among `systems` whose agent applies the sensor test
        options (`sensor_test`; RAPTOR and PHIA do not)."""
        return [s for s in self.systems if getattr(get_system(s).agent, "sensor_test", False)]

    def runs_cot(self, system: str) -> bool:
        """Whether `system` has CoT cells (`cot_systems`, None = every system)."""
        return self.cot_systems is None or system in self.cot_systems

    @property
    def horizon_model(self) -> str:
        return self.horizon_backbone or self.backbones[0]

    def models_for(self, system: str, models: list[str] | None = None) -> list[str]:
        """The backbones `system` runs on: its own from `system_backbones`, else `models` (a notebook's choice,
        e.g. the look-back sweep's one backbone), else `backbones`."""
        if system in self.system_backbones:
            return [self.system_backbones[system]]
        return list(models) if models else list(self.backbones)

    def backend_kind(self, model: str) -> str | None:
        """The kind of backend serving `model` under these servers (None: a name no one knows, reported by
        check_models / make_cell)."""
        from balms.models.registry import UnknownModelError, resolve_spec

        try:
            return resolve_spec(model, self.servers).backend
        except UnknownModelError:
            return None

    @property
    def judged_datasets(self) -> list[str]:
        """The datasets notebook 07 judges: `judge_datasets`, or the evaluated `datasets` when it is None."""
        return list(self.datasets if self.judge_datasets is None else self.judge_datasets)

    def runs_root(self) -> Path:
        return paths.runs_dir() / self.profile

    def replace(self, **changes) -> "ExperimentConfig":
        """A copy with some fields changed, validated like any other source."""
        return build(self.model_dump() | changes, source="replace()")


FIELDS = tuple(ExperimentConfig.model_fields)


def _unknown_message(keys: list[str], source: str) -> str:
    hints = []
    for k in keys:
        close = difflib.get_close_matches(k, FIELDS, n=1, cutoff=0.6)
        hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"{source}: unknown parameter(s) {', '.join(hints)}; known parameters: {', '.join(FIELDS)}"


def build(values: dict[str, Any], *, source: str) -> ExperimentConfig:
    """Validate a full set of values; every problem is one ConfigError naming `source` and the keys."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(_unknown_message(unknown, source))
    try:
        return ExperimentConfig(**values)
    except ValidationError as exc:
        probs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                          for e in exc.errors())
        raise ConfigError(f"{source}: {probs}") from None


def profile_path(profile: str | Path) -> Path:
    p = Path(profile)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    p = PROFILES_DIR / f"{profile}.yaml"
    if not p.exists():
        known = sorted(x.stem for x in PROFILES_DIR.glob("*.yaml"))
        raise ConfigError(f"profile {profile!r} not found at {p}; known profiles: {known}")
    return p


def profile_values(profile: str | Path) -> dict[str, Any]:
    """The overrides a profile file holds (validated by `load`)."""
    p = profile_path(profile)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of parameter: value, got {type(data).__name__}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ConfigError(_unknown_message(unknown, str(p)))
    return data


def load(profile: str | Path = "demo", **overrides) -> ExperimentConfig:
    """Defaults <- profile file <- overrides (None values mean "not given")."""
    name = Path(profile).stem
    values = {**profile_values(profile), "profile": name}
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise ConfigError(_unknown_message(unknown, "overrides"))
    return build(values | given, source=f"profile {name!r} with overrides {sorted(given)}")


# The one parameter every notebook declares besides `profile` and its own fields: command-line overrides the
# notebook does not declare (servers, anthropic_batch, reasoning budgets) arrive in it as a dict, so papermill has
# nothing to warn about ("Passed unknown parameter") and the executed notebook still records them.
SETTINGS = "settings"


def from_notebook(namespace: dict[str, Any]) -> ExperimentConfig:
    """A notebook's config: its `profile`, the parameters its parameters cell declares (None = profile's) and
    the command line's other overrides (`settings`)."""
    profile = namespace.get("profile") or "demo"
    extra = dict(namespace.get(SETTINGS) or {})
    unknown = sorted(set(extra) - set(FIELDS))
    if unknown:
        raise ConfigError(_unknown_message(unknown, f"the notebook's {SETTINGS!r} parameter"))
    declared = {k: namespace[k] for k in FIELDS if k != "profile" and k in namespace}
    cfg = load(profile, **(extra | declared))
    paths.announce_data(cfg.datasets, allow_synthetic=cfg.allow_synthetic)  # on stderr, before anything runs
    return cfg


# ------------------------------------------------------------------------------ papermill parameters ---
def notebook_parameters(notebook: str | Path) -> list[str]:
    """The names a notebook's `parameters` cell assigns (py:percent source), in order."""
    src = Path(notebook).read_text(encoding="utf-8")
    lines, cell, inside = src.splitlines(), [], False
    for line in lines:
        if line.startswith("# %%"):
            if inside:
                break
            inside = "parameters" in line and "tags=" in line
            continue
        if inside:
            cell.append(line)
    if not cell:
        raise ConfigError(f"{notebook}: no cell tagged 'parameters' (expected '# %% tags=[\"parameters\"]')")
    names = []
    for node in ast.parse("\n".join(cell)).body:
        if isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    bad = [n for n in names if n not in FIELDS and n != SETTINGS]
    if bad:
        raise ConfigError(_unknown_message(bad, f"{notebook} parameters cell"))
    return names


def parse_cli_overrides(text: str) -> dict[str, Any]:
    """`-p name value ...` (papermill's syntax, values parsed as YAML like papermill does) -> dict."""
    toks, out = shlex.split(text or ""), {}
    for i in range(0, len(toks), 3):
        if toks[i] not in ("-p", "--parameters"):
            raise ConfigError(f"P: expected '-p name value' pairs, got {toks[i:]!r}")
        if i + 2 >= len(toks):
            raise ConfigError(f"P: {' '.join(toks[i:])!r} is not a '-p name value' pair")
        out[toks[i + 1]] = yaml.safe_load(toks[i + 2])
    return out


def resolve_for_notebook(profile: str, notebook: str | Path, cli: str = "") -> dict[str, Any]:
    """Validate profile + CLI overrides against the whole config, then keep only the notebook's parameters."""
    overrides = parse_cli_overrides(cli)
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise ConfigError(_unknown_message(unknown, "P (command-line parameters)"))
    cfg = load(profile, **overrides)
    # the notebook's declared parameters, resolved; every other key given explicitly on the command line
    # (execution settings no parameters cell declares: servers, anthropic_batch, reasoning budgets) goes into
    # the declared `settings` dict, which `from_notebook` merges, instead of being dropped
    declared = notebook_parameters(notebook)
    full = cfg.model_dump()
    out = {k: full[k] for k in declared if k != SETTINGS}
    extra = {k: full[k] for k in overrides if k not in declared and k != "profile"}
    if extra:
        if SETTINGS not in declared:
            raise ConfigError(f"{notebook}: overrides {sorted(extra)} need a {SETTINGS!r} parameter to reach it")
        out[SETTINGS] = extra
    return out


NOTEBOOKS_DIR = paths.PROJECT_ROOT / "notebooks"


def profile_notebooks(profile: str | Path) -> list[Path]:
    """The notebook sources (`notebooks/NN_name.py`) a profile's `make paper` executes, in order."""
    every = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))
    wanted = load(profile).notebooks
    if wanted is None:
        return every
    by_stem = {p.stem: p for p in every}
    unknown = [n for n in wanted if n not in by_stem]
    if unknown:
        raise ConfigError(f"profile {profile!r}: unknown notebook(s) {unknown}; known: {sorted(by_stem)}")
    return [by_stem[n] for n in sorted(wanted)]
