"""PHIA: a ReAct loop in which the model analyses the user's record by writing Python.

Loop (at most `max_iters` model calls, then one forced-finish call):
  model writes [Thought] + [Act] ```python ...``` -> the sandbox runs the block -> "[Observe] <output>"
  is sent back; a reply with no code block but a valid "Answer: N" finishes the episode; a reply with
  neither gets a short nudge (it still costs an iteration). Stop sequences end generation at
  "[Observe]" so the model cannot invent its own observations, and anything written after the first
  code block is cut before it enters the conversation.

Data: the user's full record up to `window_end` (the day before the target day; Appendix A: "initialized with the
user's full longitudinal record"), or with `frame_span="lookback"` only the look-back window (Appendix D's trace:
`subday_df` of 56 rows = 14 days x 4 GLOBEM segments; the paper contradicts itself, both are options), as DataFrames
named as in the paper's trace: `daily_df` (one row per day: `date` and the selected channels) and, when the dataset
has sub-day rows, `subday_df` (one row per segment: `date`, `segment` and the sub-day channels), which the model has
to aggregate per day itself (what the F5 failure checks). Never any label or self-report column, never a date after
window_end. Each record's options say the frames' names, spans and columns (`frames`).
Sleep (PMData): the corrected recipe by default; `sleep_recipe="paper"` gives the frames the paper's recipe, the
one the Health-LLM, RAG and RAPTOR prompts read (the paper's "identical input windows").

Executors (balms.sandbox): "faithful" reproduces the original (fresh scope per block, only
printed output, "Code executed (no output)"); "improved" keeps state in one worker per episode, shows
the last expression's value, returns short tracebacks, and adds a schema card to the prompt.

The sandbox fails closed: where its isolation is missing, the record carries the refusal as its error and
no model is asked for code, unless `allow_degraded=True` (or BALMS_SANDBOX_ALLOW_DEGRADED=1). Every record whose
episode ran code lists the mechanisms applied in options["sandbox_mechanisms"] and options["sandbox_degraded"].
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from balms.agents import prompts
from balms.agents.common import Episode, build_record, parse_for, per_sample_seed
from balms.agents.parsing import NO_ANSWER
from balms.data.channels import (  # noqa: F401 (DAILY_FRAME, SUBDAY_FRAME: re-exported, the frames' names)
    DAILY_FRAME,
    FRAME_SPANS,
    SLEEP_RECIPES,
    SUBDAY_FRAME,
    agent_view,
    channels_option,
    frames_option,
    get_window,
    prompt_channels,
    user_frames,
)
from balms.data.schema import DatasetTables, Sample, Window
from balms.models.base import Backend, BackendError, GenParams, Message
from balms.records import PredictionRecord

EXECUTORS = ("faithful", "improved")
_TAGS = re.compile(r"^\s*\[(?:Finish|Observe|Observation|Thought)\]\s*", re.MULTILINE)
_CODE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(?P<code>.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
# with code_fence="tool_code" (the paper's trace label) a ```tool_code block is code too
_CODE_TOOL = re.compile(r"```[ \t]*(?:python|py|tool_code)?[ \t]*\n(?P<code>.*?)(?:```|\Z)",
                        re.DOTALL | re.IGNORECASE)


def extract_code(text: str, fence: str = "python") -> tuple[str | None, str]:
    """The first fenced code block (an unterminated block runs to the end of the text), and the reply
    cut right after that block (what the conversation keeps)."""
    m = (_CODE_TOOL if fence == "tool_code" else _CODE).search(text)
    if not m:
        return None, text
    code = m.group("code").strip("\n")
    if not code.strip():
        return None, text
    kept = text[: m.end()]
    if not kept.rstrip().endswith("```"):
        kept = kept.rstrip("\n") + "\n```"
    return code, kept


@dataclass
class PhiaAgent:
    cot: bool = False
    channels: object = None
    context: object = True  # as in Health-LLM: True = dataset default, False, or channel names
    executor: str = "faithful"
    max_iters: int = 3
    max_tokens: int | None = None  # per step; default prompts.PHIA_STEP_MAX_TOKENS
    temperature: float = 0.0
    seed: int = 0
    limits: object = None  # sandbox.SandboxLimits; None = the sandbox's defaults
    allow_degraded: bool = False  # run code even where the sandbox lacks required isolation (recorded per record)
    primer: str = "code_first"  # ours: "code_first" / "example" prompt primers (prompts.PHIA_PRIMERS); "none" = as is
    fence_stop: bool = True  # ours: end each step's generation at its first closing code fence
    # ours: a forced finish without a parseable answer is asked once more for the answer alone (as a CoT reply
    # without an answer line is, prompts.FORCE_ANSWER_MISSING); the transcript labels it a "forced_answer" step
    force_answer: bool = True
    frame_span: str = "record"  # "record" (Appendix A) or "lookback" (Appendix D's trace); see the module doc
    code_fence: str = "python"  # ours: the prompts' code fence; "tool_code" = the paper trace's label (an option)
    sleep_recipe: str = "corrected"  # PMData sleep in the frames: "corrected" or "paper" (the prompts' recipe)
    name: str = field(default="phia", init=False)

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.frame_span not in FRAME_SPANS:
            raise ValueError(f"frame_span must be one of {FRAME_SPANS}, got {self.frame_span!r}")
        if self.sleep_recipe not in SLEEP_RECIPES:
            raise ValueError(f"sleep_recipe must be one of {SLEEP_RECIPES}, got {self.sleep_recipe!r}")
        prompts.check_primer(self.primer)
        prompts.check_code_fence(self.code_fence)
        if int(self.max_iters) < 1:
            raise ValueError(f"max_iters must be >= 1, got {self.max_iters}")

    @property
    def step_max_tokens(self) -> int:
        return int(self.max_tokens) if self.max_tokens is not None else prompts.PHIA_STEP_MAX_TOKENS

    def options(self) -> dict:
        opts = {"channels": channels_option(self.effective_channels),
                "context": self.context if isinstance(self.context, bool) else list(self.context),
                "executor": self.executor, "max_iters": int(self.max_iters),
                "max_tokens": self.step_max_tokens, "temperature": self.temperature, "seed": self.seed,
                "prompt_version": prompts.PHIA_PROMPT_VERSION,
                # our additions, recorded only when used (a record without them ran the plain prompt and stops)
                **({"primer": self.primer} if self.primer != "none" else {}),
                **({"fence_stop": True} if self.fence_stop else {}),
                **({"force_answer": True} if self.force_answer else {}),
                # the paper-inconsistent choices, recorded only when not the default (records before them ran it)
                **({"frame_span": self.frame_span} if self.frame_span != "record" else {}),
                **({"code_fence": self.code_fence} if self.code_fence != "python" else {}),
                **({"sleep_recipe": self.sleep_recipe} if self.sleep_recipe != "corrected" else {})}
        # the effective sandbox limits change observations (timeouts, truncation): always recorded
        from balms.sandbox import SandboxLimits

        lim = self.limits if self.limits is not None else SandboxLimits()
        opts["limits"] = dataclasses.asdict(lim) if dataclasses.is_dataclass(lim) else str(lim)
        return opts

    @property
    def effective_channels(self):
        """PHIA's default is the user's full record: every daily channel (not the Health-LLM prompt set).
        Recorded as such in the options, so the judge rebuilds the window PHIA saw."""
        return "all" if self.channels is None else self.channels

    def _setup(self, sample: Sample, tables: DatasetTables):
        # every daily channel, with one sleep recipe (PMData: sleep_minutes, or sleep_minutes_paper with
        # sleep_recipe="paper"; the other is left out unless named)
        chans = prompt_channels(tables, self.effective_channels, self.sleep_recipe)
        window = get_window(tables, sample, context=self.context, channels=chans)
        frames = user_frames(tables, window, chans, self.frame_span)
        schema = None
        if self.executor == "improved":
            from balms.sandbox import schema_card

            t = tables.target
            units = {c.name: c.unit for c in [*window.channels, *tables.subday_channels] if c.unit}
            schema = schema_card(frames, target_desc=f"{t.label}, an integer from {t.scale_min} to "
                                 f"{t.scale_max}" + (f" ({t.description})" if t.description else ""),
                                 units=units)
        t = tables.target
        system = prompts.phia_system_prompt(t.scale_min, t.scale_max, self.primer, self.code_fence)
        user = prompts.phia_user_prompt(window, frames, executor=self.executor, context=self.context,
                                        schema=schema, cot=self.cot, primer=self.primer,
                                        frame_span=self.frame_span, fence=self.code_fence)
        return window, frames, [Message("system", system), Message("user", user)]

    def seen_window(self, sample: Sample, tables: DatasetTables) -> Window:
        """The window as this agent was given it: its daily frame's span (the full record, or the look-back)."""
        window, frames, _ = self._setup(sample, tables)
        return agent_view(tables, window, {**self.options(), "frames": frames_option(frames, window.subday_unit)})

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        """The messages of the first model call (token benchmarks; no model, no sandbox)."""
        return self._setup(sample, tables)[2]

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        from balms.sandbox import REQUIRED, Sandbox, SandboxUnavailable

        episode = Episode(backend)
        window, frames, msgs = self._setup(sample, tables)
        t = tables.target
        params = GenParams(temperature=self.temperature, max_tokens=self.step_max_tokens,
                           stop=prompts.PHIA_STOP + ((prompts.PHIA_FENCE_STOP,) if self.fence_stop else ()),
                           seed=per_sample_seed(sample, self.seed))
        final_text, parsed, error, reasoning = "", None, None, None
        kwargs = {"mode": self.executor, "allow_degraded": True if self.allow_degraded else None}
        if self.limits is not None:
            kwargs["limits"] = self.limits
        options = {**self.options(), "frames": frames_option(frames, window.subday_unit)}
        box = None
        try:
            with Sandbox(frames, **kwargs) as box:
                for it in range(int(self.max_iters)):
                    comp = episode.call(msgs, params, iteration=it, log_prompt=(it == 0))
                    code, kept = extract_code(comp.text, self.code_fence)
                    if code is None:
                        p = parse_for(tables, comp.text)
                        msgs.append(Message("assistant", comp.text))
                        if p.value is not None:
                            final_text, parsed = comp.text, p
                            break
                        nudge = prompts.phia_nudge(t.scale_min, t.scale_max, self.code_fence)
                        episode.log("observation", nudge, status="no_action", error_type=p.error)
                        msgs.append(Message("user", nudge))
                        continue
                    episode.log("code", code, iteration=it)
                    obs = box.run(code)
                    episode.log("observation", obs.text, status=obs.status,
                                error_type=getattr(obs, "error_type", None),
                                **_obs_meta(obs))
                    msgs.append(Message("assistant", kept))
                    msgs.append(Message("user", prompts.phia_observation(obs.text)))
        except BackendError:
            raise
        except SandboxUnavailable as e:  # fail closed: no code runs, the record says why and how to enable it
            error = f"sandbox refused: {e}"
            options.update(_sandbox_options(e.mechanisms, REQUIRED))
        except Exception as e:  # sandbox infrastructure failure: keep the transcript, flag the record
            error = f"sandbox failure: {type(e).__name__}: {e}"
        if box is not None:
            options.update(_sandbox_options(box.mechanisms, REQUIRED))
        if parsed is None and error is None:
            force = prompts.phia_force_finish(t.scale_min, t.scale_max)
            if msgs[-1].role == "user":  # merge with the last observation: no two user turns in a row
                msgs[-1] = Message("user", msgs[-1].content + "\n\n" + force)
            else:
                msgs.append(Message("user", force))
            fparams = GenParams(temperature=self.temperature, max_tokens=self.step_max_tokens,
                                seed=params.seed)
            comp = episode.call(msgs, fparams, kind="forced_finish", log_prompt=True)
            final_text, parsed = comp.text, parse_for(tables, comp.text)
            if self.force_answer and parsed.value is None and parsed.error == NO_ANSWER:
                # an answer that is there but invalid (out of range) is not asked again, as in Health-LLM's CoT
                ask = [*msgs, Message("assistant", comp.text), Message("user", prompts.FORCE_ANSWER_MISSING)]
                forced = episode.call(ask, GenParams(temperature=self.temperature, seed=params.seed,
                                                     max_tokens=prompts.FORCED_ANSWER_MAX_TOKENS),
                                      kind="forced_answer", reason="no_answer")
                reasoning = comp.text  # the forced finish's text stays the rationale
                final_text, parsed = forced.text, parse_for(tables, forced.text)
        rationale = _TAGS.sub("", reasoning if reasoning is not None else parsed.rationale).strip() if parsed else ""
        return build_record(system=self.name, cot=self.cot, sample=sample, tables=tables,
                            backend=backend, episode=episode, options=options,
                            raw_answer=final_text, parsed=parsed, rationale=rationale, error=error)


def _sandbox_options(mech: dict, required: tuple) -> dict:
    """What the record says about the sandbox that ran (or refused) its code; nothing when no worker reported."""
    if not mech:
        return {}
    out = {"sandbox_mechanisms": list(mech["applied"]), "sandbox_degraded": bool(mech["degraded"])}
    if mech["degraded"]:
        out["sandbox_missing"] = [m for m in mech["missing"] if m in required]
    return out


def _obs_meta(obs) -> dict:
    """Extra observation fields the sandbox reports (timings, truncation...), JSON-able only."""
    out = {}
    for k in ("duration_s", "truncated", "exit_code", "wall_s", "cpu_s", "fresh_process"):
        v = getattr(obs, k, None)
        if isinstance(v, (int, float, str, bool)) or v is None:
            if v is not None:
                out[k] = v
    return out
