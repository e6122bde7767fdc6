"""bench/time_paper.py reads make's own per-notebook lines and `time`'s total, and refuses what it cannot time."""

from __future__ import annotations

import importlib.util
import json

import pytest

from balms import paths

spec = importlib.util.spec_from_file_location("time_paper", paths.PROJECT_ROOT / "bench" / "time_paper.py")
time_paper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(time_paper)

LOG = """[00_preprocessing] profile demo -> notebooks/executed/demo/00_preprocessing.ipynb
[00_preprocessing] done in 17 s
[01_prediction] cell 1/4: pmdata healthllm qwen2.5-coder-0.5b zs L7
healthllm/qwen2.5-coder-0.5b: 100%|##########| 5/5 [00:14<00:00,  2.94s/sample]
[01_prediction] done in 415 s
[02_cot] FAILED; executed notebook kept as x.failed

real	7m12.500s
user	9m1.000s
"""


def test_parse_log_takes_done_lines_and_the_real_total():
    per_nb, total = time_paper.parse_log(LOG)
    assert per_nb == {"00_preprocessing": 17, "01_prediction": 415}  # a failed notebook has no time
    assert total == pytest.approx(432.5)


def test_from_log_records_a_row_and_refuses_a_log_without_timings(tmp_path):
    log, out = tmp_path / "make.log", tmp_path / "timing.json"
    log.write_text(LOG)
    time_paper.main(["--mode", "cold", "--from-log", str(log), "--load-start", "0.5", "--out", str(out)])
    row = json.loads(out.read_text())["demo"]["cold"]
    assert row["total_s"] == 432.5 and row["notebooks_s"]["01_prediction"] == 415 and row["load_1m_start"] == 0.5
    assert row["profile_values"] and row["commit"]
    log.write_text("[00_preprocessing] done in 17 s\n")  # no `time` total
    with pytest.raises(SystemExit, match="not a timed make paper log"):
        time_paper.main(["--mode", "cold", "--from-log", str(log), "--out", str(out)])


def test_in_place_cold_is_refused_so_your_own_cache_is_never_emptied():
    with pytest.raises(SystemExit, match="would empty your own cache"):
        time_paper.measure("demo", "cold", in_place=True)
