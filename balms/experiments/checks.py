"""Mechanism checks: does each part of the pipeline visibly do its job in this profile's results?

A run can exit 0 while a mechanism did nothing (an agent that wrote no code, a judge that scores every rationale
alike). Each notebook that can tell computes its checks from the run records and records them here; all land
in one table, `<tables>/demo_checks.csv` (columns check, value, goal, passed, notebook), one row per check.
"""

from __future__ import annotations

import fcntl
import math

import pandas as pd

from balms import report
from balms.paths import output_dirs

COLUMNS = ["check", "value", "goal", "passed", "notebook"]
STEM = "demo_checks"


def record_check(cfg, check: str, value: float, goal: str, passed: bool, *, notebook: str,
                 source: str = "real") -> pd.DataFrame:
    """Add or replace the row named `check`; returns the whole table. Locked: notebooks may run in parallel.

    `value` is the measured number, `goal` the threshold in words (e.g. ">= 0.8"), `passed` whether it met it.
    A NaN value never passes.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        passed = False
    tdir, _ = output_dirs(cfg.profile)
    csv = tdir / f"{STEM}.csv"
    with open(tdir / f"{STEM}.csv.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = pd.read_csv(csv) if csv.exists() else pd.DataFrame(columns=COLUMNS)
        table = table[table["check"] != check]
        row = {"check": check, "value": value, "goal": goal, "passed": bool(passed), "notebook": notebook}
        table = pd.concat([table, pd.DataFrame([row])], ignore_index=True)[COLUMNS].sort_values("check")
        report.save_table(table, STEM, artefact="Mechanism checks", notebook="several", source=source,
                          profile=cfg.profile, models=cfg.backbones, n=len(table),
                          caption="does each mechanism visibly do its job (computed from the run records)")
    return table.reset_index(drop=True)
