"""Each notebook is declared once, in its py:percent source; the paired .ipynb that papermill and JupyterLab open
must hold the same cells. `make` refreshes the .ipynb only when the .py is newer, and a git checkout gives both
files the checkout time, so a stale committed .ipynb would run silently in a fresh clone (it did: notebook 08's
.ipynb lacked its size-check cell, and `make paper PROFILE=cpu-study` skipped the 1.5B cells)."""

from __future__ import annotations

import jupytext
import pytest

from balms import paths

SOURCES = sorted((paths.PROJECT_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def test_every_notebook_source_has_its_pair():
    assert SOURCES
    missing = [p.name for p in SOURCES if not p.with_suffix(".ipynb").exists()]
    assert not missing, f"no .ipynb beside {missing}: run jupytext --update --to ipynb"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_the_ipynb_holds_the_sources_cells(src):
    py, ipynb = jupytext.read(src), jupytext.read(src.with_suffix(".ipynb"))
    cells = [(c.cell_type, c.source) for c in py.cells]
    assert [(c.cell_type, c.source) for c in ipynb.cells] == cells, \
        f"{src.with_suffix('.ipynb').name} differs from {src.name}: run " \
        f"jupytext --update --to ipynb --output notebooks/{src.stem}.ipynb notebooks/{src.name}"
