"""A new system in one file: examples/balms-weekly-means adds a system through the `balms.systems` entry point, with
no edit to `balms/`; installed, it appears in the plan, notebook 01's Table 3, the report and a bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "balms-weekly-means"
LABEL = "Weekly means (ours)"


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                               f"{p.stderr[-4000:]}")
    return p


def test_the_example_agent_shows_weekly_means_only(pmdata_dir):
    """Without installing: the example's agent is honest (weekly means, no single day's value)."""
    from agent_fakes import samples_of

    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        import balms_weekly_means as wm
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
    tables, samples = samples_of("real", "pmdata")
    msgs = wm.WeeklyMeansAgent().first_prompt(samples[0], tables)
    text = msgs[-1].content
    assert "week of" in text and "Answer" in text and wm.SYSTEM.paper is False
    from balms.data.channels import get_window, resolve_channels

    win = get_window(tables, samples[0], context=False, channels=resolve_channels(tables, None))
    steps = win.daily["steps"].dropna()
    weekly = wm.weekly_means(win.daily)["steps"].dropna()
    assert all(f"{v:.0f}" in text or f"{v:.1f}" in text for v in weekly)
    single = [v for v in steps if not any(abs(v - w) < 0.5 for w in weekly)]
    assert single and not any(f": {v:.0f}," in text for v in single)  # no day's own value


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_installed_plugin_appears_in_plan_table3_report_and_bundle(tmp_path, real_data):
    site = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", site,
          EXAMPLE])
    runs, out = tmp_path / "runs", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(site), "BALMS_RUNS_DIR": str(runs), "BALMS_OUTPUT_DIR": str(out),
           "BALMS_RAW_DIR": str(real_data)}
    sets = "-p systems [healthllm,weekly_means] -p datasets [pmdata]"
    balms = [sys.executable, "-m", "balms.cli"]
    # the plan prices it, with the key of the run file it will write
    plan = json.loads(_run([*balms, "plan", "--profile", "smoke", "--set", sets, "--json"], env=env, cwd=tmp_path)
                      .stdout)
    planned = {c["key"] for c in plan["cells"] if c["system"] == "weekly_means"}
    assert planned and any(c["notebook"] == "01_prediction" for c in plan["cells"] if c["key"] in planned)
    # notebook 01 runs it and Table 3 shows it, labelled as ours
    nb = tmp_path / "01.ipynb"
    _run([sys.executable, "-m", "papermill", "-k", "balms", "--cwd", ROOT / "notebooks", "--no-progress-bar",
          "-p", "profile", "smoke", "-y", "systems: [healthllm, weekly_means]\ndatasets: [pmdata]",
          ROOT / "notebooks" / "01_prediction.ipynb", nb], env=env, cwd=tmp_path)
    t3 = pd.read_csv(out / "smoke" / "tables" / "table3_zero_shot.csv")
    assert LABEL in set(t3["system"]) and "Health-LLM" in set(t3["system"])
    ran = {p.name.removesuffix(".jsonl").rsplit("__", 1)[-1] for p in (runs / "smoke").rglob("weekly_means__*.jsonl")}
    assert ran and ran <= planned
    # the report has its run page; the bundle carries its run file
    _run([sys.executable, "-m", "balms.cli", "report", "html", "--profile", "smoke", "--set", sets, "--out",
          tmp_path / "report"], env=env, cwd=tmp_path)
    assert any(p.name.startswith("pmdata__weekly_means__") for p in (tmp_path / "report" / "runs").iterdir())
    # the bundle of what ran (notebook 01; the profile's other notebooks were not run: export would refuse)
    _run([*balms, "bundle", "export", "--profile", "smoke", "--set", sets + " -p notebooks [01_prediction]", "--out",
          tmp_path / "b.tar.gz"], env=env, cwd=tmp_path)
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert any("/weekly_means__" in n and n.endswith(".jsonl") for n in tar.getnames())
