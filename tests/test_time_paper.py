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


def test_a_run_with_errors_is_not_timed(tmp_path):
    from balms.experiments.errors import grid_line

    log, out = tmp_path / "make.log", tmp_path / "timing.json"
    log.write_text(LOG.replace("[01_prediction] done", "[01_prediction] " + grid_line(4, 20, 3, 17, 0, "rw")
                               + "\n[01_prediction] done"))
    with pytest.raises(SystemExit, match=r"3 error record\(s\).*refusing to record its timing"):
        time_paper.main(["--mode", "cold", "--from-log", str(log), "--out", str(out)])
    assert not out.exists()
    log.write_text(LOG.replace("[01_prediction] done", "[01_prediction] " + grid_line(4, 20, 0, 20, 0, "rw")
                               + "\n[01_prediction] done"))
    time_paper.main(["--mode", "cold", "--from-log", str(log), "--out", str(out)])  # no error: recorded
    assert json.loads(out.read_text())["demo"]["cold"]["total_s"] == 432.5


def test_cold_cache_on_a_fresh_clone_never_links_a_missing_models_folder(tmp_path, monkeypatch):
    """A fresh clone has no `<cache>/models` until a model is first assembled: the cold run's link must not dangle
    (it did: every sample then failed with FileExistsError)."""
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "fresh"))
    cold = tmp_path / "cold"
    assert time_paper.prepare_cold_cache(cold, "smoke") == ["smollm2-135m"]  # one file, read from its wheel
    assert not (cold / "models").is_symlink() and cold.is_dir()
    # a profile with chunked models: assembled first (stand-in: an empty file each), then the folder is linked
    from balms.models import gguf_assets

    monkeypatch.setattr(gguf_assets, "gguf_path", lambda key: (gguf_assets.models_dir() / key).touch())
    cold2 = tmp_path / "cold2"
    assets = time_paper.prepare_cold_cache(cold2, "demo")
    assert {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= set(assets)
    assert (cold2 / "models").is_symlink() and sorted(p.name for p in (cold2 / "models").iterdir()) == sorted(assets)
