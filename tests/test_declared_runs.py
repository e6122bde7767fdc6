"""After `make test-notebooks` (the smoke profile run into a fresh runs folder, BALMS_NB_RUNS): the cell keys the
notebooks executed are exactly the keys `balms plan --profile smoke --json` prices. `make test-notebooks` runs this
file with BALMS_NB_RUNS set; elsewhere there is nothing to compare and it is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNS = os.environ.get("BALMS_NB_RUNS")


@pytest.mark.skipif(not RUNS, reason="run by make test-notebooks (BALMS_NB_RUNS: the smoke run's runs folder)")
def test_smoke_notebooks_ran_exactly_the_planned_cells():
    from balms.experiments.runfiles import key_of, run_files

    ran = {key_of(p) for p in run_files(Path(RUNS) / "smoke")}
    out = subprocess.run([sys.executable, "-m", "balms.cli", "plan", "--profile", "smoke", "--json"],
                         capture_output=True, text=True, check=True).stdout
    planned = {c["key"] for c in json.loads(out)["cells"] if c["system"] != "judge"}
    assert ran, f"no run files under {RUNS}/smoke"
    assert ran == planned, (f"run but not planned: {sorted(ran - planned)}; planned but not run: "
                            f"{sorted(planned - ran)}")
