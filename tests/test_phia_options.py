"""PHIA's paper-inconsistent choices as named options (balms.agents.phia): the frames' span and the sleep recipe."""

from __future__ import annotations

import pandas as pd
import pytest

from balms.agents.phia import DAILY_FRAME, SUBDAY_FRAME, PhiaAgent
from balms.data.samples import build_samples


@pytest.fixture(scope="module")
def pm(pmdata_tables):
    return pmdata_tables, build_samples(pmdata_tables).samples


def test_lookback_span_is_appendix_ds_trace_on_globem(globem_tables):
    t = globem_tables
    s = next(x for x in build_samples(t).samples if x.lookback == 14)
    full = PhiaAgent()._setup(s, t)[1]
    lb = PhiaAgent(frame_span="lookback")._setup(s, t)[1]
    assert len(lb[DAILY_FRAME]) == 14 and pd.to_datetime(lb[DAILY_FRAME]["date"]).min() == pd.Timestamp(s.window_start)
    assert len(lb[SUBDAY_FRAME]) <= 56 and set(lb[SUBDAY_FRAME]["segment"]) <= set(full[SUBDAY_FRAME]["segment"])
    assert len(full[DAILY_FRAME]) >= len(lb[DAILY_FRAME])
    assert pd.to_datetime(full[DAILY_FRAME]["date"]).max() == pd.Timestamp(s.window_end)


def test_sleep_recipe_paper_gives_the_prompts_column_and_options_say_so(pm):
    t, samples = pm
    s = samples[40]
    cols = {r: list(PhiaAgent(sleep_recipe=r)._setup(s, t)[1][DAILY_FRAME].columns) for r in ("corrected", "paper")}
    assert "sleep_minutes" in cols["corrected"] and "sleep_minutes_paper" not in cols["corrected"]
    assert "sleep_minutes_paper" in cols["paper"] and "sleep_minutes" not in cols["paper"]
    # defaults are not recorded (records made before the options ran them); a non-default is
    assert "sleep_recipe" not in PhiaAgent().options() and "frame_span" not in PhiaAgent().options()
    opts = PhiaAgent(sleep_recipe="paper", frame_span="lookback").options()
    assert (opts["sleep_recipe"], opts["frame_span"]) == ("paper", "lookback")


def test_unknown_values_are_named():
    with pytest.raises(ValueError, match="frame_span must be one of"):
        PhiaAgent(frame_span="week")
    with pytest.raises(ValueError, match="sleep_recipe must be one of"):
        PhiaAgent(sleep_recipe="raw")
