"""The paper's reported numbers (our transcription, packaged with balms), for every table that shows them
beside ours. A foundation module: the data layer (Table 5) and the report both read it."""

from __future__ import annotations

import pandas as pd

from balms import paths


def paper_table(name: str) -> pd.DataFrame:
    """e.g. paper_table('table3_zero_shot_mae'); an unknown name lists the known ones."""
    p = paths.PAPER_TABLES_DIR / f"{name}.csv"
    if not p.exists():
        known = sorted(x.stem for x in paths.PAPER_TABLES_DIR.glob("*.csv"))
        raise FileNotFoundError(f"{p}: no such paper table; known: {known}")
    return pd.read_csv(p)
