"""Channel selection (balms.data.channels): the option round-trips through a record, so the judge and the
grounding checker rebuild exactly the window each agent was shown."""

from __future__ import annotations

import pytest

from agent_fakes import samples_of
from balms.agents.registry import SYSTEMS, make_agent
from balms.data.channels import (
    DEFAULT_PROMPT_CHANNELS,
    channels_option,
    option_channels,
    resolve_channels,
    select_subday_channels,
)
from balms.data.render import render_context, render_window
from balms.judges.llm_judge import window_for_record
from balms.records import PredictionRecord


@pytest.mark.parametrize("option", [None, "all", "wearable", ["steps"], ("steps", "calories")])
def test_option_round_trips(option):
    written = channels_option(option)
    assert option_channels(written) == (list(option) if isinstance(option, tuple) else option)


def test_resolve_defaults_devices_and_errors():
    pm, _ = samples_of("synthetic", "pmdata")
    assert [c.name for c in resolve_channels(pm, None)] == DEFAULT_PROMPT_CHANNELS["pmdata"]
    assert resolve_channels(pm, "all") is None
    gl, _ = samples_of("synthetic", "globem")
    wearable = resolve_channels(gl, "wearable")
    assert wearable and {c.device for c in wearable} == {"wearable"}
    assert {c.device for c in select_subday_channels(gl, wearable)} <= {"wearable"}
    with pytest.raises(KeyError, match="pmdata: no channel named 'nope'"):
        resolve_channels(pm, ["nope"])
    with pytest.raises(ValueError, match="no channel with device 'phone'"):
        resolve_channels(pm, "phone")


def _agent_window(agent, sample, tables):
    if agent.name == "phia":
        return agent._setup(sample, tables)[0]
    return agent.window(sample, tables)[0]


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("dataset,kwargs", [("pmdata", {}), ("pmdata", {"context": False}),
                                            ("globem", {"channels": "wearable"})])
def test_judge_rebuilds_the_window_each_agent_saw(system, dataset, kwargs):
    tables, samples = samples_of("synthetic", dataset)
    s = samples[len(samples) // 2]
    agent = make_agent(system, cot=True, **kwargs)
    seen = _agent_window(agent, s, tables)
    rec = PredictionRecord(sample_id=s.sample_id, dataset=s.dataset, user=s.user,
                           target_date=s.target_date.isoformat(), lookback=s.lookback, label=s.label,
                           source=s.source, system=system, cot=True, model="fake", model_id="fake",
                           options=agent.options())
    rebuilt = window_for_record({dataset: tables}, rec)
    assert [c.name for c in rebuilt.channels] == [c.name for c in seen.channels]
    assert render_window(rebuilt) == render_window(seen)
    assert render_context(rebuilt) == render_context(seen)
