"""A run that errors says so: a cell whose every sample failed stops the notebook with the first error's message,
and a grid with any error record stops it once every cell has run, unless the configuration allows errors
(`allow_errors`). Either way `make paper` exits non-zero and the next run retries the errors (`retry_errors`).

Each grid ends with one line (`grid_line`) that puts its error count beside its model-call count;
`bench/time_paper.py` reads it back (`grid_errors`) and refuses to time a run with errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from balms.records import PredictionRecord


class RunErrors(RuntimeError):
    """Samples failed with errors (no prediction) where the configuration does not allow them."""


_FIX = ("the next run retries them (retry_errors); to go on with errors in the tables, allow them: "
        "make paper P=\"-p allow_errors true\"")


def _first_error(errors: Sequence[str]) -> str:
    msg = errors[0].strip()
    return msg if len(msg) <= 600 else msg[:600] + " ..."


def check_cell(allow_errors: bool, cell: str, records: Sequence[PredictionRecord]) -> None:
    """Stop when every sample of a cell failed with an error: nothing was predicted, the cause is the same."""
    errors = [r.error for r in records if r.status == "error"]
    if records and len(errors) == len(records) and not allow_errors:
        raise RunErrors(f"cell {cell}: all {len(records)} sample(s) failed with an error, no prediction was made. "
                        f"The first error: {_first_error(errors)}\n({_FIX})")


def check_grid(allow_errors: bool, rows: Iterable[Mapping]) -> None:
    """Stop (after the whole grid ran, so every error is on disk) when any record of the grid is an error."""
    rows = list(rows)
    errors = [r for r in rows if r.get("status") == "error"]
    if errors and not allow_errors:
        cells = {r.get("cell_key") for r in errors}
        raise RunErrors(f"{len(errors)} of {len(rows)} record(s), in {len(cells)} cell(s), are errors (no "
                        f"prediction). The first, {errors[0].get('sample_id')}: "
                        f"{_first_error([str(errors[0].get('error'))])}\n({_FIX})")


def grid_line(n_cells: int, n_records: int, n_errors: int, made: int, from_cache: int, cache_mode: str) -> str:
    """The line each grid ends with: its error count beside its model-call count."""
    return (f"grid of {n_cells} cells, {n_records} records: {made} model calls made, {n_errors} error records, "
            f"{from_cache} answered from the response cache (cache mode {cache_mode}; records already on disk need "
            "neither)")


_GRID_ERRORS = re.compile(r"grid of \d+ cells, \d+ records: \d+ model calls made, (\d+) error records")


def grid_errors(log: str) -> int:
    """The error records every grid of a `make paper` log reported (`grid_line`), summed."""
    return sum(int(m.group(1)) for m in _GRID_ERRORS.finditer(log))
