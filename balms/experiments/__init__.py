"""What the notebooks share, one concern per module:

- `config`: the pydantic configuration (defaults, profiles, overrides, each notebook's own parameters);
- `cohorts`: tables, samples, the seeded split and evaluation samples, the mean predictor;
- `cells`: which cells each notebook runs (`cells_for`), declared once for the notebooks, the plan and the report;
- `grid`: cells as `CellSpec`s, run cached and resumable through `balms.runner` (`run`, the one entry point);
- `errors`: a run that errors says so (a cell that all errored, a grid with errors: `RunErrors`);
- `summaries`: per-cell MAE with participant-bootstrap intervals and the paper-vs-ours table layouts;
- `judging`: the LLM judge and the grounding checker over a grid's rationales.

Notebooks use `from balms import experiments as ex` and the names below.
"""

import warnings

from balms.experiments.cells import CellDecl, adhoc_cells, cells_for, channel_sets, declared_cells
from balms.experiments.cohorts import Cohort, cohort, mean_predictor_rows, with_lookback
from balms.experiments.config import ConfigError, ExperimentConfig, from_notebook, load
from balms.experiments.errors import RunErrors
from balms.experiments.grid import (
                                    Cell,
                                    GridResult,
                                    agent_options,
                                    grid_result,
                                    make_cell,
                                    models_run,
                                    records_of,
                                    run,
)
from balms.experiments.judging import (
                                    aggregate_judgements,
                                    ground_grid,
                                    judge_case_study,
                                    judge_grid,
                                    judge_vs_grounding,
)
from balms.experiments.summaries import (
                                    CELL_KEYS,
                                    PAPER_JUDGE_DATASETS,
                                    PAPER_JUDGE_SYSTEMS,
                                    PAPER_SYSTEM_NAMES,
                                    number_caption,
                                    paper_mean_predictor,
                                    paper_points,
                                    summarize,
                                    table3_paper_vs_ours,
)

__all__ = ["Cell", "CellDecl", "adhoc_cells", "cells_for", "channel_sets", "declared_cells", "run", "records_of",
           "Cohort", "ConfigError", "RunErrors", "ExperimentConfig", "GridResult", "CELL_KEYS", "PAPER_JUDGE_DATASETS",
           "PAPER_JUDGE_SYSTEMS", "PAPER_SYSTEM_NAMES", "agent_options", "aggregate_judgements", "cohort",
           "from_notebook", "grid_result", "ground_grid", "judge_case_study", "judge_grid",
           "judge_vs_grounding", "load", "make_cell", "paper_points",
           "mean_predictor_rows", "models_run", "number_caption",
           "paper_mean_predictor", "summarize", "table3_paper_vs_ours", "with_lookback"]

# In a Jupyter kernel without ipywidgets, tqdm.auto (imported later by sentence-transformers) warns "IProgress not
# found" once per notebook and falls back to the text bar, which is the one `make paper` shows anyway: noise.
warnings.filterwarnings("ignore", message="IProgress not found")
