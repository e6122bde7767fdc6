"""The sensor test's prompt options (issue 39) on real PMData: the mood-only prompt has no sensor line, the no-mood
prompt no mood line, the neutral format example names no value; the defaults leave every prompt and option as it
was (the committed cells keep their keys)."""

from __future__ import annotations

import pytest

from agent_fakes import HashEmbedder
from balms.agents.registry import make_agent
from balms.data.agent_input import SENSOR_HEADER
from balms.data.samples import target_day_split

SENSOR_LABELS = ("[Steps]", "[Calories]", "[Resting Heart Rate]", "[Sleep", "Sensor signals")


@pytest.fixture(scope="module", autouse=True)
def _cheap_embedder(tmp_path_factory):
    from balms.agents import embeddings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BALMS_CACHE_DIR", str(tmp_path_factory.mktemp("sensor-cache")))
        mp.setattr(embeddings, "load_embedder", lambda name=embeddings.DEFAULT_EMBEDDER: HashEmbedder())
        yield


@pytest.fixture(scope="module")
def sample(pmdata_tables):
    return target_day_split(pmdata_tables, seed=0)[2][7]


def prompt(system, tables, sample, **opts) -> str:
    return make_agent(system, **opts).first_prompt(sample, tables)[-1].content


def test_defaults_record_no_new_option():
    for system in ("healthllm", "rag", "personal_baseline"):
        opts = make_agent(system).options()
        assert not {"data_transform", "sensors", "format_example"} & set(opts), system


@pytest.mark.parametrize("system", ["healthllm", "rag"])
def test_mood_only_has_no_sensor_line_and_no_mood_has_no_mood_line(pmdata_tables, sample, system):
    real = prompt(system, pmdata_tables, sample)
    mood_only = prompt(system, pmdata_tables, sample, sensors=False)
    no_mood = prompt(system, pmdata_tables, sample, context=False)
    assert SENSOR_HEADER in real or "Sensor signals" in real
    assert "[Mood]" in real and "[Mood]" in mood_only and "[Mood]" not in no_mood
    assert not [x for x in SENSOR_LABELS if x in mood_only], mood_only
    assert [x for x in SENSOR_LABELS if x in no_mood]  # the sensors stay when only the mood goes
    assert "User profile." in mood_only
    if system == "rag":  # no sensor line, nothing retrieved: the very prompt Health-LLM sends (one cached call)
        assert mood_only == prompt("healthllm", pmdata_tables, sample, sensors=False)
    assert make_agent(system, sensors=False).options()["sensors"] is False


def test_personal_baseline_without_sensors_keeps_anchor_and_profile(pmdata_tables, sample):
    real = prompt("personal_baseline", pmdata_tables, sample)
    anchor_only = prompt("personal_baseline", pmdata_tables, sample, sensors=False)
    assert "Daily data" in real and "Daily data" not in anchor_only and "deviations [" not in anchor_only
    assert "own baseline" in anchor_only


def test_neutral_format_example(pmdata_tables, sample):
    paper = prompt("healthllm", pmdata_tables, sample)
    neutral = prompt("healthllm", pmdata_tables, sample, format_example="neutral")
    assert paper.endswith("Answer: 1") and neutral.endswith("Answer: <integer>")
    assert paper.rsplit("\n", 1)[0] == neutral.rsplit("\n", 1)[0]  # nothing else changes
    with pytest.raises(ValueError, match="paper style"):
        make_agent("healthllm", style="corrected", format_example="neutral")
    with pytest.raises(ValueError, match="format_example"):
        make_agent("personal_baseline", format_example="neutral")
