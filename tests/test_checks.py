"""The mechanism-check table: one row per check, replaced not duplicated, NaN never passes."""

import pandas as pd

from balms.experiments import checks, config


def test_record_check_upserts_and_nan_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("BALMS_OUTPUT_DIR", str(tmp_path))
    cfg = config.load("demo")
    checks.record_check(cfg, "phia_code_rate_faithful", 0.5, ">= 0.8", False, notebook="05")
    checks.record_check(cfg, "cot_parse_rate", float("nan"), ">= 0.7", True, notebook="02")
    table = checks.record_check(cfg, "phia_code_rate_faithful", 0.9, ">= 0.8", True, notebook="05")
    assert list(table.columns) == checks.COLUMNS
    assert sorted(table["check"]) == ["cot_parse_rate", "phia_code_rate_faithful"]
    on_disk = pd.read_csv(tmp_path / "demo" / "tables" / "demo_checks.csv").set_index("check")
    assert on_disk.loc["phia_code_rate_faithful", "value"] == 0.9
    assert not on_disk.loc["cot_parse_rate", "passed"]
