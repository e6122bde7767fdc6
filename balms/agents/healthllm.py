"""Health-LLM: one prompt (task, profile, per-day arrays per channel, same-day context, question,
answer format), one model call, one parsed integer.

`style="paper"` (default) sends the paper's Appendix D template with the paper's PMData channel recipe
(`balms.agents.paper_prompts`); its CoT variant asks only for a reasoning paragraph before the answer.
`style="corrected"` sends our prompts (true scale, dates, our system message; the CoT variant asks for
step-by-step reasoning citing channels, values and days) with the corrected sleep recipe. The style, the
prompt version, the channels shown and their recipe are recorded in every record's options.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from balms.agents import paper_prompts, prompts
from balms.agents.common import Episode, build_record, parse_for, per_sample_seed
from balms.agents.parsing import NO_ANSWER
from balms.data import channels as styles
from balms.data.agent_input import mood_only_lines
from balms.data.channels import channels_option, get_window
from balms.data.placebo import check_transform, donor_window, placebo_tables
from balms.data.schema import DatasetTables, Sample, Window
from balms.models.base import Backend, GenParams, Message
from balms.records import PredictionRecord


@dataclass
class PromptAgentBase:
    """Options shared by the prompt-based agents (Health-LLM, RAG, RAPTOR)."""

    cot: bool = False
    channels: object = None  # None/"all", a device ("wearable"), or a list of channel names
    context: object = True  # same-day self-report: True = dataset default (PMData mood), False, or names
    max_tokens: int | None = None  # default: prompts.ZERO_SHOT_MAX_TOKENS or COT_MAX_TOKENS
    temperature: float = 0.0
    seed: int = 0
    style: str = styles.DEFAULT_STYLE  # "paper" (Appendix D template and recipe) or "corrected"
    force_answer: bool = True  # CoT cut off by max_tokens -> ask for the answer alone (see prompts.FORCE_ANSWER)
    force_missing: bool = True  # with force_answer: also a CoT reply that finished without an answer statement
    # paper style with CoT: "paper" = the paper's printed answer sentence ("The user's stress score is 3."),
    # "answer_line" = our earlier `Reasoning:` then `Answer:` (the CPU study's committed responses)
    cot_format: str = "paper"
    # the sensor test (issue 39), recorded in the options only when not the default, so other cells keep their keys:
    # `data_transform` "other_user" / "distant" = the sensor placebo (balms.data.placebo); `sensors` False = no sensor
    # line (profile and same-day self-report only); `format_example` "neutral" = the paper template's "Answer: 1"
    # example replaced by a placeholder
    data_transform: str = "none"
    sensors: bool = True
    format_example: str = "paper"
    name: str = field(default="", init=False)
    sensor_test = True  # the agent applies the three options above (RAPTOR refuses them); read by the cell grid

    def _check(self) -> None:
        styles.check_style(self.style)
        paper_prompts.check_cot_format(self.cot_format)
        check_transform(self.data_transform)
        if paper_prompts.check_format_example(self.format_example) != "paper" and self.style != "paper":
            raise ValueError(f"{type(self).__name__}: format_example {self.format_example!r} applies to the paper "
                             f"style's template only (style {self.style!r} asks for 'Answer: <int>' already)")

    @property
    def score_sentence(self) -> bool:
        """Whether this agent's prompt asked for the paper's CoT answer sentence (so the parser accepts it)."""
        return self.cot and self.style == "paper" and self.cot_format in paper_prompts.SCORE_SENTENCE_FORMATS

    @property
    def system_prompt(self) -> str:
        return prompts.system_prompt(self.style)

    @property
    def answer_max_tokens(self) -> int:
        if self.max_tokens is not None:
            return int(self.max_tokens)
        return prompts.COT_MAX_TOKENS if self.cot else prompts.ZERO_SHOT_MAX_TOKENS

    def base_options(self) -> dict:
        return {
            "channels": channels_option(self.channels),
            "context": self.context if isinstance(self.context, bool) else list(self.context),
            "max_tokens": self.answer_max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "style": self.style,
            "prompt_version": prompts.prompt_version(self.style),
            **({"force_answer": True} if self.force_answer and self.cot else {}),
            **({"force_missing": True} if self.force_answer and self.force_missing and self.cot else {}),
            **({"cot_format": self.cot_format} if self.cot and self.style == "paper" else {}),
            **({"data_transform": self.data_transform} if self.data_transform != "none" else {}),
            **({"sensors": False} if not self.sensors else {}),
            **({"format_example": self.format_example} if self.format_example != "paper" else {}),
        }

    def data_for(self, sample: Sample, tables: DatasetTables) -> DatasetTables:
        """The tables this agent's prompt reads for `sample`: the sensor placebo's (`data_transform`), else `tables`."""
        return placebo_tables(tables, sample, self.data_transform, seed=self.seed)

    def placebo_options(self, sample: Sample, tables: DatasetTables) -> dict:
        """Per record under the placebo: whose window and which days the prompt's sensor values came from."""
        if self.data_transform == "none":
            return {}
        user, start = donor_window(tables, sample, self.data_transform, seed=self.seed)
        return {"placebo_donor": {"user": user, "start": start.date().isoformat(),
                                  "days": len(sample.window_dates)}}

    @staticmethod
    def channel_options(tables: DatasetTables, chans: list | None) -> dict:
        """Per-record: the channels the prompt showed and which recipe they follow (PMData sleep)."""
        shown = chans if chans is not None else list(tables.channels)
        return {"prompt_channels": [c.name for c in shown], "channel_recipe": styles.recipe_of(chans, tables)}

    def params(self, sample: Sample, max_tokens: int, stop: tuple[str, ...] = ()) -> GenParams:
        return GenParams(temperature=self.temperature, max_tokens=max_tokens, stop=stop,
                         seed=per_sample_seed(sample, self.seed))

    def window(self, sample: Sample, tables: DatasetTables) -> tuple[Window, list | None]:
        chans = styles.prompt_channels(tables, self.channels, self.style)
        return get_window(tables, sample, context=self.context, channels=chans), chans

    def answer(self, sample: Sample, tables: DatasetTables, backend: Backend, episode: Episode,
               user_prompt: str, options: dict) -> PredictionRecord:
        """The final answering call shared by the prompt-based agents."""
        msgs = prompts.messages(self.system_prompt, user_prompt)
        comp = episode.call(msgs, self.params(sample, self.answer_max_tokens))
        parsed = parse_for(tables, comp.text, score_sentence=self.score_sentence)
        cut = comp.finish_reason == "length"
        missing = self.force_missing and parsed.error == NO_ANSWER
        if self.force_answer and self.cot and parsed.value is None and (cut or missing):
            # the reasoning ran out of budget or ended without an answer statement: keep it as the rationale, ask
            # for the answer alone (labelled in the transcript as a "forced_answer" step with its reason, and in the
            # options as force_answer). An answer that is there but invalid (out of range...) is not asked again.
            ask = prompts.FORCE_ANSWER if cut else prompts.FORCE_ANSWER_MISSING
            forced = episode.call([*msgs, Message("assistant", comp.text), Message("user", ask)],
                                  self.params(sample, prompts.FORCED_ANSWER_MAX_TOKENS), kind="forced_answer",
                                  reason="length" if cut else "no_answer")
            return build_record(system=self.name, cot=self.cot, sample=sample, tables=tables, backend=backend,
                                episode=episode, options=options, raw_answer=forced.text,
                                parsed=parse_for(tables, forced.text, score_sentence=self.score_sentence),
                                rationale=comp.text)
        return build_record(system=self.name, cot=self.cot, sample=sample, tables=tables,
                            backend=backend, episode=episode, options=options,
                            raw_answer=comp.text, parsed=parsed)


@dataclass
class HealthLLMAgent(PromptAgentBase):
    def __post_init__(self):
        self.name = "healthllm"
        self._check()

    def options(self) -> dict:
        return self.base_options()

    def _user_prompt(self, window: Window, chans: list | None) -> str:
        if self.style == "paper":
            return paper_prompts.healthllm_prompt(window, chans if chans is not None else window.channels,
                                                  cot=self.cot, cot_format=self.cot_format,
                                                  format_example=self.format_example, sensors=self.sensors)
        if not self.sensors:
            return prompts.prompt_around(window, mood_only_lines(window, {"style": self.style}), cot=self.cot)
        return prompts.healthllm_prompt(window, cot=self.cot)

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        episode = Episode(backend)
        window, chans = self.window(sample, self.data_for(sample, tables))
        user = self._user_prompt(window, chans)
        return self.answer(sample, tables, backend, episode, user,
                           {**self.options(), **self.channel_options(tables, chans),
                            **self.placebo_options(sample, tables)})

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        """The messages of the (only) model call, without calling a model (token benchmarks, `balms prompt`)."""
        window, chans = self.window(sample, self.data_for(sample, tables))
        return prompts.messages(self.system_prompt, self._user_prompt(window, chans))
