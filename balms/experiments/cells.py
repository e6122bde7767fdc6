"""Which cells each notebook runs, declared once: `cells_for(notebook, cfg)`.

The notebooks run exactly these (`grid.run`), `balms plan` prices exactly these, and the report, the bundle
and `balms runs status/gc` know from them which run files are current. A cell declaration names the notebook and
the part of it (one table's grid), the cell's fields (dataset, system, model, CoT, look-back, extra options) and
the labels the notebook's table groups by (e.g. `channel_set`); `build(cfg)` turns it into a runnable cell whose
spec key names its run file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache

from balms.experiments.config import ExperimentConfig

NOTEBOOKS = ("01_prediction", "02_cot", "03_long_horizon", "04_ablations", "05_phia_failures", "06_latency",
             "07_rationale_quality", "08_cpu_study")


@dataclass(frozen=True)
class CellDecl:
    """One cell a notebook runs (frozen, hashable; options and labels as sorted JSON)."""

    notebook: str
    part: str  # the notebook's grid it belongs to ("zero_shot", "globem_channels", ...)
    dataset: str
    system: str
    model: str
    cot: bool = False
    lookback: int | None = None  # None: the configuration's (cfg.lookback, else the dataset's own)
    options: str = "{}"  # extra agent options (an ablation's channels, PHIA's executor)
    labels: str = "{}"  # columns the notebook's table groups by ({"channel_set": "fitbit"})
    sample_lookback: int | None = None  # draw target days with this much history (03: the sweep's longest)
    n_samples: int | None = None  # the first n of the dataset's nested sample order (08's size check); None: n_for

    @property
    def extra(self) -> dict:
        return json.loads(self.options)

    @property
    def label_values(self) -> dict:
        return json.loads(self.labels)


def options_json(d: dict | None) -> str:
    """Options or labels as the sorted JSON a declaration (and the plan's cells) carry."""
    return json.dumps(d or {}, sort_keys=True)


def _grid(cfg: ExperimentConfig, notebook: str, part: str, *, datasets, systems, models=None, cots=(False,),
          lookbacks=(None,), options: dict | None = None, labels: dict | None = None,
          sample_lookback: int | None = None) -> list[CellDecl]:
    """A notebook's grid in run order (dataset, look-back, model, system, CoT): a system with its own backbone
    (`system_backbones`) runs on it instead; CoT cells only for `cot_systems`."""
    out = [CellDecl(notebook, part, d, s, m2, c, L, options_json(options), options_json(labels), sample_lookback)
           for d in datasets for L in lookbacks for m in (models or cfg.backbones) for s in systems
           for m2 in cfg.models_for(s, [m]) for c in cots if cfg.runs_cot(s) or not c]
    return list(dict.fromkeys(out))


def adhoc_cells(cfg: ExperimentConfig, *, datasets=None, systems=None, models=None, cots=(False,), lookbacks=(None,),
                options: dict | None = None) -> list[CellDecl]:
    """A grid outside the notebooks' declarations (a student's own question: `ex.run(cfg, ex.adhoc_cells(cfg,
    ...))`); the notebooks run their declared cells, so the plan and the report know them."""
    return _grid(cfg, "adhoc", "adhoc", datasets=datasets or cfg.datasets, systems=systems or cfg.systems,
                 models=models, cots=cots, lookbacks=lookbacks, options=options)


@lru_cache(maxsize=16)
def _channel_sets(raw_root: str | None, seed: int) -> dict[str, list[str]]:
    """Notebook 04's channel sets, from the data present: GLOBEM's wearable channels, PMData's sleep + resting HR."""
    from balms.experiments.cohorts import cohort

    cfg = ExperimentConfig(raw_root=raw_root, seed=seed)
    gl, pm = cohort("globem", cfg).tables, cohort("pmdata", cfg).tables
    return {"globem_wearable": [c.name for c in gl.channels if c.device == "wearable"],
            "pmdata_sleep_hr": [c.name for c in pm.channels if any(k in c.name for k in ("sleep", "resting_hr"))]}


def channel_sets(cfg: ExperimentConfig) -> dict[str, list[str]]:
    return _channel_sets(cfg.raw_root, cfg.seed)


def _ablations(cfg: ExperimentConfig) -> list[CellDecl]:
    sets = channel_sets(cfg)
    nb, out = "04_ablations", []
    for cot in (False, True):
        out += _grid(cfg, nb, "globem_channels", datasets=["globem"], systems=cfg.ablation_systems, cots=(cot,),
                     labels={"channel_set": "full"})
        out += _grid(cfg, nb, "globem_channels", datasets=["globem"], systems=cfg.ablation_systems, cots=(cot,),
                     options={"channels": sets["globem_wearable"]}, labels={"channel_set": "fitbit"})
    pm = dict(cfg=cfg, notebook=nb, part="pmdata_channels", datasets=["pmdata"], systems=["healthllm"])
    out += _grid(**pm, labels={"channel_set": "all + same-day mood"})
    out += _grid(**pm, options={"context": False}, labels={"channel_set": "all, no same-day mood"})
    out += _grid(**pm, options={"channels": sets["pmdata_sleep_hr"]}, labels={"channel_set": "sleep + resting HR"})
    for style in ("paper", "corrected"):
        out += _grid(cfg, nb, "prompt_style", datasets=["pmdata"], systems=["healthllm"], options={"style": style},
                     labels={"style": style})
    return out


def cells_for(notebook: str, cfg: ExperimentConfig) -> list[CellDecl]:
    """The agent cells `notebook` runs under `cfg`, in run order (07: the CoT cells whose rationales it judges)."""
    if notebook == "01_prediction":
        return _grid(cfg, notebook, "zero_shot", datasets=cfg.datasets, systems=cfg.systems)
    if notebook == "02_cot":
        return _grid(cfg, notebook, "cot", datasets=cfg.datasets, systems=cfg.cot_systems or cfg.systems,
                     cots=(False, True))
    if notebook == "03_long_horizon":
        return _grid(cfg, notebook, "horizon", datasets=cfg.horizon_datasets,
                     systems=cfg.horizon_systems or cfg.systems, models=[cfg.horizon_model],
                     lookbacks=tuple(cfg.lookbacks), sample_lookback=max(cfg.lookbacks))
    if notebook == "04_ablations":
        return _ablations(cfg)
    if notebook == "05_phia_failures":
        return [c for e in cfg.executors
                for c in _grid(cfg, notebook, "executors", datasets=cfg.datasets, systems=["phia"],
                               options={"executor": e}, labels={"executor": e})]
    if notebook == "06_latency":
        return _grid(cfg, notebook, "latency", datasets=cfg.datasets, systems=cfg.systems, cots=(False, True))
    if notebook == "07_rationale_quality":  # the CoT cell of each judged (dataset, system, backbone)
        return list(dict.fromkeys(CellDecl(notebook, "judged", d, s, cfg.models_for(s, [m0])[0], True)
                                  for d in cfg.judged_datasets for m0 in cfg.backbones for s in cfg.judge_systems))
    if notebook == "08_cpu_study":  # besides re-reading 01/02/03/05's cells: the model-size check, the sensor test
        size = [replace(c, n_samples=cfg.size_n_samples.get(d))
                for d in cfg.datasets for c in _grid(cfg, notebook, "size", datasets=[d], systems=cfg.size_systems,
                                                     models=cfg.size_backbones)] if cfg.size_backbones else []
        return size + _sensor_test(cfg, notebook)
    return []


# notebook 08's sensor test (issue 39): variant -> the agent options of its cells. The placebo replaces the window's
# sensor values (balms.data.placebo); "mood_only" drops every sensor line; "no_mood" the same-day self-report;
# "neutral_example" the paper template's "Answer: 1" (prompt-style "paper" systems only).
SENSOR_VARIANTS = {"placebo_other_user": {"data_transform": "other_user"},
                   "placebo_distant": {"data_transform": "distant"},
                   "mood_only": {"sensors": False}, "no_mood": {"context": False},
                   "neutral_example": {"format_example": "neutral"}}


def _applies(variant: str, system: str, cfg: ExperimentConfig) -> bool:
    """Whether a variant changes `system`'s prompt: no mood line to drop where the agent never shows one (the
    personal baseline), no "Answer: 1" example outside the paper template."""
    from balms.agents.registry import get_system

    spec = get_system(system)
    if variant == "no_mood":
        return getattr(spec.agent, "context", True) is not False
    if variant == "neutral_example":
        return cfg.prompt_style == "paper" and "paper" in spec.prompt_styles
    return True


def _sensor_test(cfg: ExperimentConfig, notebook: str) -> list[CellDecl]:
    """Each variant of each sensor-test system on the study's backbones (those of `sensor_test_models`, if given), on
    the days of its real zero-shot cell (`size_backbones` on their `size_n_samples`)."""
    out = []
    for d in [d for d in cfg.sensor_test_datasets if d in cfg.datasets]:  # no real cell to compare with elsewhere
        for m in dict.fromkeys([*cfg.backbones, *cfg.size_backbones]):
            if cfg.sensor_test_models and m not in cfg.sensor_test_models:
                continue
            n = cfg.size_n_samples.get(d) if m in cfg.size_backbones and m not in cfg.backbones else None
            for variant, opts in SENSOR_VARIANTS.items():
                systems = [s for s in cfg.sensor_test_systems if _applies(variant, s, cfg)]
                out += [replace(c, n_samples=n) for c in _grid(cfg, notebook, "sensor_test", datasets=[d],
                                                                 systems=systems, models=[m], options=opts,
                                                                 labels={"variant": variant})]
    return out


def profile_notebooks(cfg: ExperimentConfig) -> list[str]:
    """The grid notebooks the profile runs (its `notebooks:`, else all of them), in order."""
    return [nb for nb in NOTEBOOKS if cfg.notebooks is None or nb in cfg.notebooks]


def declared_cells(cfg: ExperimentConfig) -> list[CellDecl]:
    """Every cell of every notebook the profile runs, in notebook order (a cell two notebooks share appears twice:
    it runs once, its records are re-read)."""
    return [c for nb in profile_notebooks(cfg) for c in cells_for(nb, cfg)]


def draw_lookbacks(cfg: ExperimentConfig) -> list[int | None]:
    """The look-backs the profile's declared cells draw their samples at: None (each dataset's default) first, then
    each other one (notebook 03's sweep draws at its longest look-back)."""
    drawn = {d.sample_lookback for d in declared_cells(cfg)} - {None}
    return [None, *sorted(drawn)]
