"""The personal-baseline system (ours) on real PMData and GLOBEM: no held-out label and no target-day value can
reach its prompt, and the baselines it states are the training days' numbers.

Leakage by perturbation: every held-out label is changed (within the scale, so the sample set and the split stay
the same), and every sensing and same-day value of every held-out target day outside the sample's own look-back
window (its target day among them) is changed (observed values only, so no filter changes); the prompt must stay
byte-identical. The same perturbation of one TRAINING label or training day must change it, so the test can fail.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent_fakes import EchoBackend, real_tables
from balms.agents.personal_baseline import PersonalBaselineAgent, user_baseline
from balms.agents.registry import make_agent
from balms.data.samples import build_samples, split_target_days

VARIANTS = [dict(), dict(anchor=False), dict(deviations=False), dict(causal=True), dict(cot=True)]


@pytest.fixture(scope="module", params=["pmdata", "globem"])
def real(request):
    tables = real_tables(request.param)
    if tables is None:
        pytest.skip(f"real {request.param} not found at ../shared/data")
    # the split as the cohorts define it, built here from its parts (build_samples + split_target_days)
    train, test = split_target_days(build_samples(tables).samples, seed=0)
    picked = [test[i] for i in np.linspace(0, len(test) - 1, min(len(test), 6)).astype(int)]
    return tables, train, test, picked


def _label_shift(tables, keys: set) -> pd.DataFrame:
    """Labels with every row of `keys` ((user, Timestamp)) moved to another value on the scale."""
    lab = tables.labels.copy()
    t = tables.target
    k = pd.Series(list(zip(lab["user"].astype(str), pd.to_datetime(lab["date"]).dt.normalize(), strict=True)),
                  index=lab.index).isin(keys)
    ok = k & lab["label"].between(t.scale_min, t.scale_max)
    span = t.scale_max - t.scale_min + 1
    lab.loc[ok, "label"] = t.scale_min + (lab.loc[ok, "label"] - t.scale_min + 1) % span
    return lab


def _day_shift(frame: pd.DataFrame, keys: set) -> pd.DataFrame:
    """`frame` (index (user, date)) with every observed number on the `keys` days changed."""
    if not len(frame):
        return frame
    out = frame.copy()
    ix = pd.Series([(str(u), pd.Timestamp(d).normalize()) for u, d in out.index], index=out.index).isin(keys)
    num = out.select_dtypes("number").columns
    out.loc[ix.to_numpy(), num] = out.loc[ix.to_numpy(), num] * 1.37 + 11
    return out


def perturbed(tables, test, sample):
    held = {(s.user, pd.Timestamp(s.target_date)) for s in test}
    window = {(sample.user, pd.Timestamp(d)) for d in sample.window_dates}
    days = held - window  # the sample's own target day is held out, never in its window
    assert (sample.user, pd.Timestamp(sample.target_date)) in days
    return dataclasses.replace(tables, labels=_label_shift(tables, held), daily=_day_shift(tables.daily, days),
                               context=_day_shift(tables.context, days))


def prompt(agent, sample, tables) -> str:
    return "\n".join(m.content for m in agent.first_prompt(sample, tables))


def test_no_held_out_label_or_target_day_value_reaches_the_prompt(real):
    tables, train, test, picked = real
    agents = [make_agent("personal_baseline", **opts) for opts in VARIANTS]
    for s in picked:
        other = perturbed(tables, test, s)
        for agent, opts in zip(agents, VARIANTS, strict=True):
            assert prompt(agent, s, other) == prompt(agent, s, tables), (s.sample_id, opts)


def test_the_perturbation_would_be_seen_on_training_days(real):
    """The same perturbation on a training label / a training day's sensing changes the prompt."""
    tables, train, test, picked = real
    agent = make_agent("personal_baseline")
    s = picked[0]
    mine = [t for t in train if t.user == s.user]
    lab = dataclasses.replace(tables, labels=_label_shift(tables, {(s.user, pd.Timestamp(mine[0].target_date))}))
    days = {(s.user, pd.Timestamp(d)) for t in mine for d in (*t.window_dates, t.target_date)}
    days -= {(s.user, pd.Timestamp(d)) for d in s.window_dates} | {(u.user, pd.Timestamp(u.target_date)) for u in test}
    assert days, "no training day outside the sample's window"
    day = dataclasses.replace(tables, daily=_day_shift(tables.daily, days))
    base = prompt(agent, s, tables)
    assert prompt(agent, s, lab) != base
    assert prompt(agent, s, day) != base


def test_baselines_are_the_training_days_numbers(real):
    """Label anchor = the mean and SD of the user's training labels read from the raw label table; channel
    baselines = the means over days none of which is a held-out target day; the agent's split is the cohorts'."""
    tables, train, test, picked = real
    held = {(s.user, s.target_date) for s in test}
    lab = tables.labels.dropna(subset=["label"]).assign(date=lambda d: pd.to_datetime(d["date"]).dt.date)
    lab = lab.drop_duplicates(["user", "date"], keep="last").set_index(["user", "date"])["label"]
    agent = PersonalBaselineAgent()
    for s in picked:
        chans = agent.window(s, tables)[1] or list(tables.channels)
        b = user_baseline(tables, s, chans)
        mine = sorted(t.target_date for t in train if t.user == s.user)
        assert sorted(b.label_dates) == mine
        y = np.array([lab[(s.user, d)] for d in mine], float)
        assert b.label_mean == pytest.approx(y.mean())
        if len(y) > 1:
            assert b.label_sd == pytest.approx(y.std(ddof=1))
            assert f"mean {y.mean():.2f}, standard deviation {y.std(ddof=1):.2f}" in prompt(agent, s, tables)
        assert not {(s.user, d) for d in b.sensing_dates} & held, "a held-out day in the sensing baseline"
        ud = tables.daily.xs(s.user, level="user")
        ud = ud.reindex(pd.DatetimeIndex([pd.Timestamp(d) for d in b.sensing_dates]))
        for c in chans:
            v = ud[c.name].dropna()
            if len(v):
                assert b.channels[c.name].mean == pytest.approx(v.mean()), c.name
            else:
                assert c.name not in b.channels


def test_only_held_out_days_and_no_same_day_context(real):
    tables, train, test, picked = real
    with pytest.raises(ValueError, match="not a held-out target day"):
        make_agent("personal_baseline").first_prompt(train[0], tables)
    with pytest.raises(ValueError, match="context must be False"):
        make_agent("personal-baseline", context=True)
    with pytest.raises(ValueError, match="style must be"):
        make_agent("personal_baseline", style="paper")


def test_one_call_and_the_baseline_in_the_record(real):
    tables, train, test, picked = real
    be = EchoBackend()
    rec = make_agent("personal_baseline").predict(picked[0], tables, be)
    assert len(be.calls) == 1 and rec.n_steps == 1
    assert rec.system == "personal_baseline" and rec.prediction == 2
    assert rec.options["user_baseline"]["n_label_days"] == sum(t.user == picked[0].user for t in train)
    assert rec.options["anchor"] is True and rec.options["prompt_version"].startswith("pb-")


# ------------------------------------------------------------------------------- the CPU study's claims rows
def _records(samples, system, model, predict) -> pd.DataFrame:
    return pd.DataFrame([{"dataset": s.dataset, "system": system, "model": model, "sample_id": s.sample_id,
                          "user": s.user, "label": s.label, "prediction": predict(s)} for s in samples])


def test_claims_rows_of_ours_from_the_cells_present(real_data):
    """Rows are computed from whatever cells exist: the difference is the MAE difference of the records given,
    the verdict follows its interval, an absent comparison says "not run", the supervised baselines sit beside."""
    from balms.experiments import config, study
    from balms.experiments.claims import verdict
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import eval_samples

    cfg = config.load("cpu-study", raw_root=str(real_data), datasets=["pmdata"], n_samples=40,
                      systems=["healthllm", "personal_baseline"], size_backbones=["qwen2.5-coder-1.5b"])
    ev = eval_samples(cfg, "pmdata")
    co = cohort("pmdata", cfg)
    user_mean = pd.Series([s.label for s in co.train], index=[s.user for s in co.train]).groupby(level=0).mean()
    small, big = cfg.backbones[0], cfg.size_backbones[0]
    zs = pd.concat([_records(ev, "personal_baseline", small, lambda s: round(user_mean[s.user])),
                    _records(ev, "healthllm", small, lambda s: 1)], ignore_index=True)
    size = _records(ev, "healthllm", big, lambda s: 2)
    empty = pd.DataFrame(columns=zs.columns)
    table = study.claims_table(cfg, zs, empty, empty, empty.assign(executor=[]), size=size)
    row = table[table.model == small].set_index("claim")
    big_pb = table[(table.claim == "personal_baseline_mean") & (table.model == big)]
    assert list(big_pb.verdict) == [study.NOT_RUN]  # the size cells hold no personal baseline here
    y = np.array([s.label for s in ev], float)
    pb = np.abs(y - np.array([round(user_mean[s.user]) for s in ev]))
    assert row.loc["personal_baseline_healthllm", "diff"] == pytest.approx(pb.mean() - np.abs(y - 1).mean())
    assert row.loc["personal_baseline_mean", "diff"] == pytest.approx(pb.mean() - np.abs(y - co.train_mean).mean())
    for r in table[table.verdict != study.NOT_RUN].itertuples():
        v = verdict(r.diff, r.ci_low, r.ci_high)
        assert r.verdict == study.claim_verdict(None if r.expected == "none" else r.expected, r.diff, r.ci_low,
                                                r.ci_high), r.comparison
        assert (r.verdict == "cannot tell at this n") == (v in ("indistinguishable", "no interval"))
    size_rows = table[table.claim == "model_size"].set_index("system")
    assert size_rows.loc["healthllm", "diff"] == pytest.approx(np.abs(y - 2).mean() - np.abs(y - 1).mean())
    assert set(size_rows[size_rows.verdict == study.NOT_RUN].index) == {"rag", "personal_baseline"}
    mp = table[table.claim == "mean_predictor"]
    assert list(mp.system) == ["healthllm", "healthllm"] and set(mp.model) == {small, big}  # ours has its own rows
    sup = table[table.claim == "supervised"]
    assert {"per_user_mean", "last_observed_label", "ridge", "gradient_boosting"} <= set(sup.system)
    assert (sup.n == len(ev)).all()
    assert f"does the personal baseline (ours) on {small} beat the mean predictor?" in study.ours_sentence(table)
    none = study.claims_table(cfg, zs[zs.system == "healthllm"], empty, empty, empty.assign(executor=[]))
    assert (none[none.claim.str.startswith("personal_baseline")].verdict == study.NOT_RUN).all()


# ------------------------------------------------------------------------------------- registration, profiles
def test_ours_runs_only_where_a_parameter_names_it():
    """The paper's profile and the demo declare no cell of ours (their cells do not change by its existence); a
    parameter adds it, labelled as ours; the size cells exist only with size_backbones."""
    from balms.agents.registry import PAPER_SYSTEMS, get_system, system_names
    from balms.experiments import config
    from balms.experiments.cells import declared_cells

    spec = get_system("personal-baseline")
    assert spec.name in system_names() and not spec.paper and spec.label.endswith("(ours)")
    assert spec.batchable and spec.single_call
    for profile in ("demo", "paper"):
        cfg = config.load(profile)
        assert tuple(cfg.systems) == PAPER_SYSTEMS and not cfg.size_backbones
        cells = declared_cells(cfg)
        assert cells and not [c for c in cells if c.system == spec.name
                              or (c.notebook == "08_cpu_study" and c.part != "sensor_test")], profile
    added = config.load("paper", systems=[*PAPER_SYSTEMS, spec.name], size_backbones=["qwen2.5-coder-1.5b"],
                        evaluation_rule="heldout30")
    assert {c.system for c in declared_cells(added) if c.notebook == "01_prediction"} >= {spec.name}
    # its label anchor is the user's training days: a rule that scores every day (the paper profile's) is refused
    with pytest.raises(config.ConfigError, match="needs evaluation_rule 'heldout30'"):
        config.load("paper", systems=[*PAPER_SYSTEMS, spec.name])
    with pytest.raises(config.ConfigError, match="look-back sweep"):
        config.load("demo", horizon_systems=["healthllm", spec.name])


def test_cpu_study_size_cells_are_the_single_call_zero_shot_cells_on_nested_days(real_data):
    """The study's profile as committed: the size cells are the single-call systems' zero-shot cells on the larger
    backbone, and their days the first `size_n_samples` of the study backbone's own days (so they pair)."""
    from balms.agents.registry import get_system
    from balms.experiments import config, grid
    from balms.experiments.cells import cells_for

    cfg = config.load("cpu-study", raw_root=str(real_data))
    assert "personal_baseline" in cfg.systems and cfg.size_backbones and cfg.size_n_samples
    size = [c for c in cells_for("08_cpu_study", cfg) if c.part == "size"]  # (the sensor test's cells aside)
    assert size and {c.model for c in size} == set(cfg.size_backbones) and not any(c.cot for c in size)
    assert {c.system for c in size} == {s for s in cfg.systems if get_system(s).single_call}
    assert {c.dataset for c in size} == set(cfg.datasets)
    for c in size:
        big = grid.build_cell(cfg, c, key_only=True).samples
        small = grid.eval_samples(cfg, c.dataset, system=c.system)
        want = cfg.size_n_samples.get(c.dataset)
        assert len(big) == (want if want else len(small)), c
        assert {s.sample_id for s in big} <= {s.sample_id for s in small}, c
    with pytest.raises(config.ConfigError, match="size_n_samples key 'mars'"):
        config.load("cpu-study", size_n_samples={"mars": 3})
    with pytest.raises(config.ConfigError, match=r"size_n_samples.pmdata: Input should be greater than 0"):
        config.load("cpu-study", size_n_samples={"pmdata": 0})


def test_balms_prompt_shows_ours_on_a_held_out_day_and_refuses_a_training_day(capsys):
    """The CLI's plumbing (one dataset: the prompt itself is tested on both above)."""
    from balms.cli import main

    tables = real_tables("pmdata")
    if tables is None:
        pytest.skip("real pmdata not found at ../shared/data")
    train, test = split_target_days(build_samples(tables).samples, seed=0)
    picked = test[:1]
    raw = str(Path(tables.raw_dir))
    s = picked[0]
    args = ["prompt", "--dataset", tables.name, "--raw", raw, "--system", "personal_baseline"]
    assert main([*args, "--user", s.user, "--target", s.target_date.isoformat(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "Evaluation rule you must respect" in out["messages"][1]["content"]
    assert out["messages"] == [{"role": m.role, "content": m.content}
                               for m in make_agent("personal_baseline").first_prompt(s, tables)]
    t = train[0]
    with pytest.raises(SystemExit, match="not a held-out target day"):
        main([*args, "--user", t.user, "--target", t.target_date.isoformat()])
    with pytest.raises(SystemExit, match="does not apply"):
        main([*args, "--user", s.user, "--target", s.target_date.isoformat(), "--style", "paper"])
