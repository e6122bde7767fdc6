"""A small daily cohort as a balms dataset: its reader, a synthetic writer in the same layout, and its spec.

Raw layout: `participants.csv` (user, age, gender) and `daily/<user>.csv` (date, steps, sleep_minutes,
resting_hr, stress), one row per day; stress is the evening self-report on 1-5. Nothing here is read from
balms's own datasets: the spec below is all balms needs to load, sample, prompt, judge and score it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from balms.data.registry import DatasetSpec, PromptTarget
from balms.data.schema import Channel, DataError, DatasetTables, Target

TARGET = Target(name="stress", label="stress level", scale_min=1, scale_max=5,
                description="evening self-report: 1 = not at all stressed ... 5 = extremely stressed",
                higher_is="more stressed")
CHANNELS = [
    Channel("steps", "Steps", "steps", "wearable", "steps that day", 0),
    Channel("sleep_minutes", "Sleep minutes", "minutes", "wearable", "minutes asleep the night before", 0),
    Channel("resting_hr", "Resting heart rate", "bpm", "wearable", "resting heart rate that day", 1),
]
COLUMNS = ["date", *(c.name for c in CHANNELS), "stress"]
PLANTED = "stress rises by one point on days after a short night (under 6 hours asleep)"


def load_tinycohort(raw_dir: Path, *, source: str = "real") -> DatasetTables:
    """Read the cohort; a missing file or column is a DataError naming it."""
    raw_dir = Path(raw_dir)
    people = raw_dir / "participants.csv"
    if not people.is_file():
        raise DataError(people, "not found (expected columns user, age, gender)")
    profiles = pd.read_csv(people, dtype={"user": str}).set_index("user")
    daily_parts, labels = [], []
    for user in profiles.index:
        path = raw_dir / "daily" / f"{user}.csv"
        if not path.is_file():
            raise DataError(path, f"not found: participants.csv lists user {user!r}")
        df = pd.read_csv(path)
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise DataError(path, f"missing column(s) {missing}; expected {COLUMNS}", field=missing[0])
        df["date"] = pd.to_datetime(df["date"]).dt.normalize()
        daily_parts.append(df[["date", *(c.name for c in CHANNELS)]].assign(user=user))
        labels.append(pd.DataFrame({"user": user, "date": df["date"], "label": df["stress"]}).dropna())
    daily = pd.concat(daily_parts, ignore_index=True).set_index(["user", "date"]).sort_index()
    return DatasetTables(name="tinycohort", source=source, target=TARGET, daily=daily,  # type: ignore[arg-type]
                         labels=pd.concat(labels, ignore_index=True), channels=list(CHANNELS),
                         profiles=profiles, raw_dir=str(raw_dir))


def write_tinycohort(out_dir: Path, rng: np.random.Generator, n_users: int, n_days: int) -> None:
    """A synthetic cohort in the layout above (balms seeds `rng`), with PLANTED in it."""
    out_dir = Path(out_dir)
    (out_dir / "daily").mkdir(parents=True, exist_ok=True)
    users = [f"t{i:02d}" for i in range(1, n_users + 1)]
    pd.DataFrame({"user": users, "age": rng.integers(20, 60, n_users),
                  "gender": rng.choice(["female", "male"], n_users)}).to_csv(out_dir / "participants.csv", index=False)
    dates = pd.date_range("2024-03-01", periods=n_days, freq="D")
    for user in users:
        sleep = rng.normal(420, 60, n_days).round()
        short = np.r_[False, sleep[:-1] < 360]
        stress = np.clip(rng.integers(1, 4, n_days) + short, 1, 5).astype(float)
        df = pd.DataFrame({"date": dates.strftime("%Y-%m-%d"), "steps": rng.normal(8000, 2500, n_days).round(),
                           "sleep_minutes": sleep, "resting_hr": rng.normal(62, 5, n_days).round(1),
                           "stress": stress})
        df.loc[rng.random(n_days) < 0.1, "steps"] = np.nan  # missing days, as a wearable has them
        df.to_csv(out_dir / "daily" / f"{user}.csv", index=False)


DATASET = DatasetSpec(
    name="tinycohort", display_name="TinyCohort (example)", loader="balms_tiny_cohort:load_tinycohort",
    scale=(1, 5), default_lookback=7, prompt=PromptTarget("stress level", "Stress", "stress"),
    judge_target="evening stress self-report (1 = not at all, 5 = extremely)",
    synthetic="balms_tiny_cohort:write_tinycohort", synthetic_size=(6, 42))
