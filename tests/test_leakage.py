"""Leakage, property-based over random samples of real PMData/GLOBEM and synthetic cohorts.

Sentinels are planted in a copy of the tables: every sensing value after the window end, every value
of every OTHER user, every label row, every same-day self-report of a day other than the target day,
and the sample's own label. Then each agent runs (echoing fake model, hashing embedder, so the test
exercises the harness, not a model) and nothing any model call received, no retrieved memory, no
transcript entry and no PHIA DataFrame may contain a sentinel, a label column, or a date after the
window end (the target date itself is only named in the task line).
"""

from __future__ import annotations

import ast
import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_fakes import EchoBackend, HashEmbedder, samples_of
from balms.agents.registry import PAPER_SYSTEMS, make_agent

FUTURE = 987654.0  # sensing after window_end
OTHER_USER = 765432.0  # sensing of other users
CONTEXT_OTHER_DAY = 876543.0  # self-reports of days other than the target day
LABEL_BASE = 7300000  # label rows: 7300000 + row number
SAMPLE_LABEL = 5550555  # the sample's own label
SENTINEL_RE = re.compile(r"987654|765432|876543|5550555|(?<![\d.])73\d{5}(?!\d)")
DATE_RE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")

SOURCES = [("real", "pmdata"), ("real", "globem"), ("synthetic", "pmdata"), ("synthetic", "globem"),
           ("synthetic", "diversityone")]


@pytest.fixture(scope="module", autouse=True)
def _cheap_embedder_and_private_cache(tmp_path_factory):
    from balms.agents import embeddings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BALMS_CACHE_DIR", str(tmp_path_factory.mktemp("leak-cache")))
        mp.setattr(embeddings, "load_embedder", lambda name=embeddings.DEFAULT_EMBEDDER: HashEmbedder())
        yield


def available():
    out = []
    for kind, name in SOURCES:
        tables, samples = samples_of(kind, name)
        if tables is not None and samples:
            out.append((kind, name))
    return out


def planted(tables, sample):
    """A copy of `tables` with sentinels everywhere the agent must not look."""
    end = pd.Timestamp(sample.window_end)
    daily = tables.daily.copy()
    users = daily.index.get_level_values("user")
    dates = pd.DatetimeIndex(daily.index.get_level_values(-1))
    daily.loc[(users == sample.user) & (dates > end), :] = FUTURE
    daily.loc[users != sample.user, :] = OTHER_USER
    subday = None
    if tables.subday is not None:
        subday = tables.subday.copy()
        chans = [c.name for c in tables.subday_channels if c.name in subday.columns]
        sd_dates = pd.to_datetime(subday["date"])
        subday.loc[(subday["user"] == sample.user) & (sd_dates > end), chans] = FUTURE
        subday.loc[subday["user"] != sample.user, chans] = OTHER_USER
    labels = tables.labels.copy()
    labels["label"] = LABEL_BASE + np.arange(len(labels))
    context = tables.context.copy()
    if len(context):
        key = (sample.user, pd.Timestamp(sample.target_date))
        mask = np.array([ix != key for ix in context.index])
        num = context.select_dtypes("number").columns
        context.loc[mask, num] = CONTEXT_OTHER_DAY
    t2 = dataclasses.replace(tables, daily=daily, subday=subday, labels=labels, context=context)
    return t2, dataclasses.replace(sample, label=SAMPLE_LABEL)


def check_text(text: str, sample, where: str):
    m = SENTINEL_RE.search(text)
    assert m is None, f"{where}: leaked sentinel {m.group(0)!r} in ...{text[max(0, m.start()-120):m.end()+40]}"
    allowed = {sample.target_date.isoformat()}
    for d in DATE_RE.findall(text):
        assert d <= sample.window_end.isoformat() or d in allowed, f"{where}: date {d} after window end"


def check_frames(frames: dict, tables, sample):
    forbidden = {"label", tables.target.name, *(c.name for c in tables.context_channels)}
    for name, df in frames.items():
        assert not forbidden & set(map(str, df.columns)), f"frame {name} has label/context columns"
        if "date" in df.columns and len(df):
            assert pd.to_datetime(df["date"]).max() <= pd.Timestamp(sample.window_end), name
        num = df.select_dtypes("number")
        assert not num.isin([FUTURE, OTHER_USER, CONTEXT_OTHER_DAY]).to_numpy().any(), name
        assert not ((num >= LABEL_BASE) & (num < LABEL_BASE + 10**6)).to_numpy().any(), name
        check_text(df.to_string(max_rows=None), sample, f"frame {name}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_agent_sees_labels_future_or_other_users(data):
    srcs = available()
    if not srcs:
        pytest.skip("no data")
    kind, name = data.draw(st.sampled_from(srcs), label="source")
    tables, samples = samples_of(kind, name)
    sample = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]
    # the paper's systems see no label at all; ours (personal_baseline) reads TRAINING labels by design, so every
    # planted label row would be its input: tests/test_personal_baseline.py holds its own leakage test
    system = data.draw(st.sampled_from(PAPER_SYSTEMS), label="system")
    devices = {c.device for c in tables.channels}
    channels = data.draw(st.sampled_from([None, "all", *sorted(devices)]), label="channels")
    opts = dict(channels=channels, context=data.draw(st.booleans(), label="context"))
    if system == "phia":
        opts.update(executor=data.draw(st.sampled_from(["faithful", "improved"])), max_iters=1)
    if system in ("rag", "raptor"):
        opts.update(memory=data.draw(st.sampled_from(["history", "lookback"])),
                    context_window=data.draw(st.booleans(), label="context_window"))
    if system != "phia":
        opts.update(style=data.draw(st.sampled_from(["paper", "corrected"]), label="style"))
    agent = make_agent(system, cot=data.draw(st.booleans(), label="cot"), **opts)
    t2, s2 = planted(tables, sample)

    if system == "phia":
        _, frames, msgs = agent._setup(s2, t2)
        check_frames(frames, t2, s2)
        for m in msgs:
            check_text(m.content, s2, "phia prompt")
        return  # the episode itself is exercised by test_phia_episode_sees_only_frames below

    be = EchoBackend()
    rec = agent.predict(s2, t2, be)
    assert be.calls, "the agent made no model call"
    for msgs, _ in be.calls:
        for m in msgs:
            check_text(m.content, s2, f"{system} model input")
    for step in rec.transcript:
        check_text(step.content, s2, f"{system} transcript {step.kind}")
        check_text(str(step.meta), s2, f"{system} transcript meta {step.kind}")


def test_phia_episode_sees_only_frames(pmdata_dir):
    """A real sandbox episode over planted tables: code that dumps everything it can see observes
    no sentinel and no date after the window end."""
    tables, samples = samples_of("real", "pmdata")
    sample = [s for s in samples if s.user == "p03"][10]
    t2, s2 = planted(tables, sample)
    # The block inspects every DataFrame it can reach and prints only counts (the sentinels are
    # written as sums so the code itself carries none).
    dump = ("[Act]\n```python\nimport pandas as pd\nbad = [987653.0 + 1, 765431.0 + 1, 876542.0 + 1]\n"
            "found = []\nfor k, v in list(globals().items()):\n    if isinstance(v, pd.DataFrame):\n"
            "        num = v.select_dtypes('number')\n"
            "        found.append([k, len(v), str(pd.to_datetime(v['date']).max().date()),\n"
            "                      int(num.isin(bad).to_numpy().sum()), int((num >= 7299999 + 1).to_numpy().sum())])\n"
            "print(found)\n```")
    be = EchoBackend()
    be.generate = _script(be, [dump, "Answer: 3"])
    rec = make_agent("phia", executor="improved", max_iters=2).predict(s2, t2, be)
    obs = [st for st in rec.transcript if st.kind == "observation"]
    assert obs and obs[0].meta["status"] == "ok", obs
    found = ast.literal_eval(obs[0].content.strip())
    assert {f[0] for f in found} >= {"daily_df", "subday_df"}
    for name, n_rows, max_date, n_sentinel, n_label in found:
        assert n_rows > 0 and max_date <= s2.window_end.isoformat(), (name, max_date)
        assert n_sentinel == 0 and n_label == 0, name
    for st_ in rec.transcript:
        if st_.kind != "code":
            check_text(st_.content, s2, f"phia {st_.kind}")


def _script(be, replies):
    from balms.models.base import Completion

    replies = list(replies)

    def gen(messages, params):
        be.calls.append((list(messages), params))
        return Completion(text=replies.pop(0), model_id="fake", prompt_tokens=1, completion_tokens=1)

    return gen


def test_planting_is_effective():
    """The sentinels really are in the planted tables (otherwise the property test proves nothing)."""
    tables, samples = samples_of("synthetic", "pmdata")
    sample = samples[len(samples) // 2]
    t2, s2 = planted(tables, sample)
    assert (t2.daily == FUTURE).to_numpy().any()
    assert (t2.daily == OTHER_USER).to_numpy().any()
    assert t2.labels["label"].min() >= LABEL_BASE
    text = t2.daily.to_string()
    assert SENTINEL_RE.search(text)


# ----------------------------------------------------------------------------- the sensor placebo (issue 39) ---
OWN_WINDOW = 4242.0  # the target user's own window values, planted: a placebo prompt must show none of them


@pytest.mark.parametrize("mode", ["other_user", "distant"])
def test_placebo_window_holds_no_value_of_the_users_own_window(pmdata_tables, mode):
    """Real PMData: every sensor value of each sample's own look-back window is set to a sentinel; with the placebo
    no agent's window or prompt shows it (and without it, they do: the planting is effective). The donor window is
    another user's (other_user) or the same user's at least DISTANT_GAP_DAYS away (distant), of the same length,
    its values moved under the target's dates; the target's label, profile and same-day mood are kept."""
    from balms.data.placebo import DISTANT_GAP_DAYS, donor_window, placebo_tables
    from balms.data.samples import target_day_split

    tables = pmdata_tables
    _, _, test = target_day_split(tables, seed=0)
    picks = [test[i] for i in np.random.default_rng(0).choice(len(test), 6, replace=False)]
    names = ["steps", "calories", "resting_hr", "sleep_minutes_paper"]
    for s in picks:
        daily = tables.daily.copy()
        own = pd.DatetimeIndex([pd.Timestamp(d) for d in s.window_dates])
        mine = (daily.index.get_level_values("user") == s.user) & pd.DatetimeIndex(
            daily.index.get_level_values(-1)).isin(own)
        daily.loc[mine, :] = OWN_WINDOW
        t2 = dataclasses.replace(tables, daily=daily)
        donor, start = donor_window(t2, s, mode)
        if mode == "other_user":
            assert donor != s.user
        else:
            assert donor == s.user
            end = start + pd.Timedelta(days=len(own) - 1)
            assert end <= own[0] - pd.Timedelta(days=DISTANT_GAP_DAYS) or start >= own[-1] + pd.Timedelta(
                days=DISTANT_GAP_DAYS)
        placebo = placebo_tables(t2, s, mode)
        # provenance: the placebo window is the donor's window, value for value (NaN where the donor has none)
        donor_vals = t2.daily.xs(donor, level="user").reindex(pd.date_range(start, periods=len(own)))[names]
        got = placebo.daily.xs(s.user, level="user").reindex(own)[names]
        np.testing.assert_array_equal(got.to_numpy(), donor_vals.to_numpy())
        assert not (got == OWN_WINDOW).to_numpy().any()
        # outside the window, the user's days are untouched; no other user's row and no sub-day row is there at all
        assert set(placebo.daily.index.get_level_values("user")) == {s.user} and placebo.subday is None
        outside = ~pd.DatetimeIndex(placebo.daily.index.get_level_values(-1)).isin(own)
        rest = t2.daily[(t2.daily.index.get_level_values("user") == s.user) & ~mine]
        np.testing.assert_array_equal(placebo.daily[outside].to_numpy(), rest.sort_index().to_numpy())
        for system in ("healthllm", "rag", "personal_baseline"):
            real = make_agent(system)
            agent = make_agent(system, data_transform=mode)
            assert agent.options()["data_transform"] == mode and "data_transform" not in real.options()
            w_real = real.window(s, real.data_for(s, t2))[0]
            w = agent.window(s, agent.data_for(s, t2))[0]
            assert (w_real.daily == OWN_WINDOW).to_numpy().any()  # the planting reaches the real window
            assert not (w.daily == OWN_WINDOW).to_numpy().any(), f"{system}: own window value in the placebo"
            assert w.context == w_real.context and w.profile == w_real.profile and w.sample == w_real.sample
            if system != "personal_baseline":  # its prompt shows deviations, not the values themselves
                assert "4242" in real.first_prompt(s, t2)[-1].content
                assert "4242" not in agent.first_prompt(s, t2)[-1].content, f"{system}: sentinel in the prompt"


def test_placebo_is_seeded_and_refused_where_not_supported(pmdata_tables):
    from balms.data.placebo import donor_window

    _, samples = samples_of("real", "pmdata")
    s = samples[len(samples) // 2]
    assert donor_window(pmdata_tables, s, "other_user", seed=3) == donor_window(pmdata_tables, s, "other_user",
                                                                                   seed=3)
    donors = {donor_window(pmdata_tables, x, "other_user", seed=0)[0] for x in samples[::25]}
    assert len(donors) > 1  # drawn per sample, not one donor for all
    with pytest.raises(ValueError, match="data_transform"):
        make_agent("healthllm", data_transform="shuffled")
    with pytest.raises(ValueError, match="not supported"):
        make_agent("raptor", data_transform="other_user")
    tiny = dataclasses.replace(pmdata_tables, daily=pmdata_tables.daily.xs(s.user, level="user", drop_level=False))
    with pytest.raises(ValueError, match=s.sample_id):  # no other user: an error naming the sample, never skipped
        donor_window(tiny, s, "other_user")
