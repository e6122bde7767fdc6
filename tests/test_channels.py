"""Channel selection (balms.data.channels): the option round-trips through a record, so the judge and the
grounding checker rebuild exactly the window each agent was shown."""

from __future__ import annotations

import datetime as dt

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


def _prompt_day_labels(text: str) -> set[int]:
    import re

    return {int(k) for k in re.findall(r"^Day (-?\d+): ", text, re.M)}


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("dataset", ["pmdata", "globem"])
def test_judge_rebuilds_what_each_agent_was_given(system, dataset, monkeypatch, isolated_cache):
    """The record's options alone let the judge rebuild the agent's view: same days, channels and values
    (RAG: only the 3 retrieved days + the query day; RAPTOR: the retrieved records + the query day; PHIA:
    its frames' full-record span), never a day after window_end."""
    from agent_fakes import EchoBackend, use_hash_embedder

    use_hash_embedder(monkeypatch)
    tables, samples = samples_of("synthetic", dataset)
    s = samples[len(samples) // 2]
    agent = make_agent(system, cot=False)
    be = EchoBackend()
    rec = agent.predict(s, tables, be)
    seen = agent.seen_window(s, tables) if hasattr(agent, "seen_window") else agent.window(s, tables)[0]
    rebuilt = window_for_record({dataset: tables}, rec)
    assert list(rebuilt.daily.index) == list(seen.daily.index)
    assert [c.name for c in rebuilt.channels] == [c.name for c in seen.channels]
    assert rebuilt.shown == seen.shown
    assert render_window(rebuilt) == render_window(seen)
    assert max(rebuilt.daily.index).date() <= s.window_end
    prompt = next(st.content for st in rec.transcript if st.kind == "prompt")
    days = [d.date() for d in rebuilt.daily.index]
    if system == "rag":  # the 3 retrieved days + the query day, and exactly those appear in the prompt
        assert len(days) == 4 and days[-1] == s.window_end and rebuilt.shown["kind"] == "days"
        assert _prompt_day_labels(prompt) == {(d - s.window_start).days + 1 for d in days}
        assert "only these 4 days" in render_window(rebuilt)
    elif system == "raptor":  # the query day's values and the 3 retrieved records, verbatim in the prompt
        assert days == [s.window_end] and len(rebuilt.shown["items"]) == 3
        assert all(t in prompt for t in rebuilt.shown["items"])
        assert rec.options["leaf_unit"] == tables.subday_unit
    elif system == "phia":  # the full record up to the day before the target day
        assert days[-1] == s.window_end == s.target_date - dt.timedelta(days=1)
        assert len(days) > s.lookback and days[0].isoformat() == rec.options["frames"]["daily_df"]["start"]
        assert "full record as DataFrames" in render_window(rebuilt)
    else:
        assert len(days) == s.lookback and not rebuilt.shown


def test_old_behaviour_options_rebuild_the_whole_window(monkeypatch, isolated_cache):
    """`context_window=True` (the earlier prompt) shows the whole look-back window: RAG's view is the plain
    window again, RAPTOR's adds its retrieved records to the whole window."""
    from agent_fakes import EchoBackend, use_hash_embedder

    use_hash_embedder(monkeypatch)
    tables, samples = samples_of("synthetic", "pmdata")
    s = samples[len(samples) // 2]
    for system in ("rag", "raptor"):
        rec = make_agent(system, context_window=True).predict(s, tables, EchoBackend())
        rebuilt = window_for_record({"pmdata": tables}, rec)
        assert len(rebuilt.daily.index) == s.lookback, system
        assert bool(rebuilt.shown) == (system == "raptor")


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


def test_grounding_checks_a_days_view_on_the_agents_day_numbering():
    """On RAG's view, "day 14" is the query day (the agent's "Day 14" label) and a value of a day the prompt
    did not hold is not supported; the record's look-back as n_days is accepted for both views."""
    from balms.data.channels import days_view, get_window, record_window
    from balms.data.render import format_value
    from balms.judges.grounding import check_rationale

    tables, samples = samples_of("synthetic", "pmdata")
    s = samples[len(samples) // 2]
    win = get_window(tables, s, context=False, channels=[tables.channel("steps")])
    dates = list(win.daily.index)
    view = days_view(tables, win, [dates[2], dates[5], dates[9]], query_date=dates[-1])
    q, hidden = win.daily["steps"].iloc[-1], win.daily["steps"].iloc[7]
    assert q == q and hidden == hidden and round(q) != round(hidden)
    ok = check_rationale(f"Steps were {format_value(q, 0)} on day 14.", view, n_days=s.lookback)
    assert ok.supported == 1, ok.claims
    unseen = check_rationale(f"Steps were {format_value(hidden, 0)} on day 8.", view, n_days=s.lookback)
    assert unseen.supported == 0 and unseen.n_claims == 1, unseen.claims
    assert check_rationale(f"Steps were {format_value(hidden, 0)} on day 8.", win).supported == 1  # plain window
    full = record_window(tables, win, dates[0] - dt.timedelta(days=20))
    rep = check_rationale(f"Steps were {format_value(q, 0)} yesterday.", full, n_days=s.lookback)
    assert rep.supported == 1, rep.claims
    with pytest.raises(ValueError, match="after the window end"):
        days_view(tables, win, [s.target_date], query_date=dates[-1])
