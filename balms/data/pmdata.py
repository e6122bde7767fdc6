"""PMData loader: the original release layout (pNN/fitbit, pNN/pmsys, participant-overview.xlsx).

Target: daily stress (1-5) from pNN/pmsys/wellness.csv. Every JSON file is parsed once. Decisions,
so that anyone can check them against the raw files:

- Report date = the calendar date of `effective_time_frame` as written (UTC). Several reports on one
  date: the LAST one (latest timestamp, i.e. the user's correction) is kept; the others are counted
  in `dropped["duplicate_report"]`.
- `steps` / `calories` (the Health-LLM recipe): summed over the exercise.json sessions that START on
  that date. A date with no session is NaN (Fitbit only logs sessions of ``>=10 min``; no session is not
  evidence of zero steps). A date whose sessions carry no `steps` field at all (e.g. yoga, weights) is
  NaN for steps, but its calories are still summed.
- `steps_total`: daily sum of the minute-level steps.json where that file exists.
- `resting_hr`: resting_heart_rate.json `value.value`; 0 means "not computed" and becomes NaN.
- `sleep_minutes`, `time_in_bed`, `sleep_efficiency`: the main sleep (`mainSleep` true; among several,
  the longest time in bed) per `dateOfSleep`. `sleep_minutes` is the corrected recipe (minutes asleep of
  the night that ended on that date).
- `sleep_minutes_paper`: the paper's (Health-LLM's) recipe, kept as printed in its p01 example: sleep.json
  `duration` (time in bed, ms -> minutes) SUMMED over every log whose `startTime` falls on that date, a
  log listed twice counted twice; no log start that date -> NaN. It mixes nights (a log started after
  midnight counts for the night it ends, one started before midnight for the previous date) and adds naps
  and duplicates, which is why the corrected recipe exists; both are kept so neither is silently swapped.
- `steps` and `calories` are the same in both recipes: the paper's printed example is reproduced by the
  per-day session sums above. Undetermined by the paper: a day whose sessions all lack `steps` (NaN here).
- `sleep_score`: sleep_score.csv `overall_score` on the date of its timestamp (the wake-up time);
  several on one date: the last one (counted as `duplicate_sleep_score`).
- Half-hour slots (RAPTOR's leaves, PHIA's sub-day frame): minute steps (steps.json, summed), sleep-stage minutes
  (sleep.json levels.data, all logs, split at half-hour boundaries), and, where the release's files are present,
  heart rate (heart_rate.json, `{"dateTime", "value": {"bpm", "confidence"}}` samples, mean bpm of the half hour)
  and calories (calories.json, `{"dateTime", "value"}` per minute, summed); the slot's date is its calendar date.
  A user without one of the minute files is counted (`users_without_<file>`) and named in `notes`; the heart rate
  and calories channels exist only when some user has the file (a copy without them keeps its earlier leaves).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from balms.data.schema import Channel, DataError, DatasetTables, Target

TARGET = Target(
    name="stress",
    label="stress level",
    scale_min=1,
    scale_max=5,
    description="PMData daily wellness report: 1 = very low stress ... 5 = very high stress",
    higher_is="more stressed",
)

CHANNELS = [
    Channel("steps", "Steps", "steps", "wearable", "sum of steps over Fitbit exercise sessions that day", 0),
    Channel("calories", "Calories burned", "kcal", "wearable", "sum of calories over Fitbit exercise sessions that day",
            0),
    Channel("resting_hr", "Resting heart rate", "bpm", "wearable", "Fitbit daily resting heart rate", 1),
    Channel("sleep_minutes", "Sleep minutes", "minutes", "wearable",
            "minutes asleep in the main sleep ending that date", 0, recipe="corrected"),
    Channel("sleep_minutes_paper", "Sleep minutes (paper recipe)", "minutes", "wearable",
            "sum of sleep.json duration (time in bed) over logs starting that date, duplicates included "
            "(the paper's Health-LLM recipe)", 0, recipe="paper"),
    Channel("time_in_bed", "Time in bed", "minutes", "wearable", "time in bed of the main sleep ending that date", 0),
    Channel("sleep_efficiency", "Sleep efficiency", "%", "wearable", "Fitbit efficiency of the main sleep", 0),
    Channel("sleep_score", "Sleep score", "out of 100", "wearable", "Fitbit overall sleep score", 0),
    Channel("steps_total", "Total daily steps", "steps", "wearable", "daily sum of minute-level steps (steps.json)", 0),
    Channel("very_active_minutes", "Very active minutes", "minutes", "wearable", "", 0),
    Channel("moderately_active_minutes", "Moderately active minutes", "minutes", "wearable", "", 0),
    Channel("lightly_active_minutes", "Lightly active minutes", "minutes", "wearable", "", 0),
    Channel("sedentary_minutes", "Sedentary minutes", "minutes", "wearable", "", 0),
]
# The four channels of the Health-LLM PMData prompt (plus same-day mood as context), per recipe.
HEALTH_LLM_CHANNELS = ["steps", "calories", "resting_hr", "sleep_minutes"]
HEALTH_LLM_CHANNELS_PAPER = ["steps", "calories", "resting_hr", "sleep_minutes_paper"]

CONTEXT_CHANNELS = [
    Channel("mood", "Mood", "out of 5", "self_report", "same-day wellness report, 1 = very bad, 5 = very good", 0),
    Channel("fatigue", "Fatigue", "out of 5", "self_report", "same-day wellness report, 1 = very tired, 5 = very fresh",
            0),
    Channel("readiness", "Readiness", "out of 10", "self_report", "same-day readiness to train, 0-10", 0),
    Channel("sleep_quality", "Sleep quality", "out of 5", "self_report", "same-day report on last night, 1-5", 0),
]

SUBDAY_CHANNELS = [
    Channel("steps", "Steps", "steps", "wearable", "steps in the half hour (steps.json)", 0),
    Channel("asleep_minutes", "Minutes asleep", "minutes", "wearable", "sleep-stage minutes other than wake", 1),
    Channel("deep_minutes", "Deep sleep", "minutes", "wearable", "", 1),
    Channel("rem_minutes", "REM sleep", "minutes", "wearable", "", 1),
    Channel("awake_minutes", "Minutes awake in bed", "minutes", "wearable", "wake/awake/restless stage minutes", 1),
]
# sub-day channels from the release's minute files, present only when some user has the file
MINUTE_SUBDAY_CHANNELS = [
    Channel("heart_rate", "Heart rate", "bpm", "wearable", "mean of the heart_rate.json samples in the half hour", 1),
    Channel("calories_slot", "Calories burned", "kcal", "wearable", "calories.json minutes summed over the half hour",
            1),
]
# file -> (sub-day channel, how its samples make a half hour, how a sample's value is read)
MINUTE_FILES = {
    "steps.json": ("steps", "sum", None),
    "heart_rate.json": ("heart_rate", "mean", "bpm"),
    "calories.json": ("calories_slot", "sum", None),
}

WELLNESS_COLUMNS = [
    "effective_time_frame", "fatigue", "mood", "readiness", "sleep_duration_h",
    "sleep_quality", "soreness", "soreness_area", "stress",
]
WELLNESS_NUMERIC = ["fatigue", "mood", "readiness", "sleep_duration_h", "sleep_quality", "soreness", "stress"]
ACTIVITY_FILES = {
    "very_active_minutes": "very_active_minutes.json",
    "moderately_active_minutes": "moderately_active_minutes.json",
    "lightly_active_minutes": "lightly_active_minutes.json",
    "sedentary_minutes": "sedentary_minutes.json",
}
REQUIRED_FILES = ("pmsys/wellness.csv", "fitbit/exercise.json", "fitbit/sleep.json")
ASLEEP_LEVELS = {"light", "deep", "rem", "asleep"}
AWAKE_LEVELS = {"wake", "awake", "restless"}


# ----------------------------------------------------------------------------------------- io
def _read_json(path: Path) -> list:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if not text.strip():
            raise DataError(path, "empty file: expected a JSON list of records ([] when there are none)")
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid or truncated JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") \
            from exc
    except OSError as exc:
        raise DataError(path, f"cannot read file ({exc.strerror})") from exc
    if not isinstance(data, list):
        raise DataError(path, f"expected a JSON list of records, got {type(data).__name__}")
    return data


def _read_csv(path: Path, header: list[str]) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError(path, f"empty file: expected a header row with {header} (then one row per record)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot parse CSV ({exc})") from exc


def _numeric(values: pd.Series, path: Path, field: str, *, offset: int = 0) -> pd.Series:
    """Numbers or NaN; any non-empty non-numeric entry is a DataError naming the row."""
    s = values.astype("object")
    s = s.where(~s.map(lambda v: isinstance(v, str) and not v.strip()), None)
    out = pd.to_numeric(s, errors="coerce")
    bad = out.isna() & s.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(path, f"expected a number, got {s.iloc[i]!r}", field=field, row=i + offset)
    return out.astype(float)


def _dates(values: pd.Series, path: Path, field: str, fmt: str | None = None, *, offset: int = 0) -> pd.Series:
    s = values.astype("object")
    if fmt:
        out = pd.to_datetime(s, errors="coerce", format=fmt)
    else:
        out = pd.to_datetime(s, errors="coerce", format="mixed", utc=True)
    bad = out.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(path, f"expected a date/time, got {s.iloc[i]!r}", field=field, row=i + offset)
    if getattr(out.dt, "tz", None) is not None:
        out = out.dt.tz_localize(None)
    return out


def _require_keys(records: list, path: Path, keys: tuple[str, ...]) -> None:
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise DataError(path, f"expected a JSON object, got {type(r).__name__}", row=i)
        for k in keys:
            if k not in r:
                raise DataError(path, "missing key", field=k, row=i)


def _daily_series(path: Path, *, value_key=("value",), date_key="dateTime") -> pd.Series:
    """A Fitbit daily file [{dateTime, value}] -> float Series indexed by date; duplicates are errors."""
    rec = _read_json(path)
    _require_keys(rec, path, (date_key, value_key[0]))
    vals = []
    for r in rec:
        v = r
        for k in value_key:
            v = v.get(k) if isinstance(v, dict) else None
        vals.append(v)
    dates = _dates(pd.Series([r[date_key] for r in rec]), path, date_key).dt.normalize()
    out = pd.Series(_numeric(pd.Series(vals), path, ".".join(value_key)).to_numpy(), index=dates)
    dup = out.index.duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise DataError(path, f"duplicate date {out.index[i].date()} (one value per day expected)", field=date_key,
                        row=i)
    return out


def _read_wellness(path: Path) -> pd.DataFrame:
    df = _read_csv(path, WELLNESS_COLUMNS)
    missing = [c for c in WELLNESS_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(path, f"missing column (expected {WELLNESS_COLUMNS})", field=missing[0])
    extra = [c for c in df.columns if c not in WELLNESS_COLUMNS]
    if extra:
        raise DataError(path, f"unexpected column (expected exactly {WELLNESS_COLUMNS})", field=extra[0])
    out = pd.DataFrame({"time": _dates(df["effective_time_frame"], path, "effective_time_frame", offset=2)})
    for c in WELLNESS_NUMERIC:
        out[c] = _numeric(df[c], path, c, offset=2)  # row numbers as in a spreadsheet (header = row 1)
    out["date"] = out["time"].dt.normalize()
    return out


def _read_profiles(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(path, "required file missing (participant demographics)")
    try:
        raw = pd.read_excel(path, header=None, dtype=object)
    except Exception as exc:  # openpyxl raises many types for a corrupt file
        raise DataError(path, f"unreadable xlsx ({type(exc).__name__}: {exc})") from exc
    # The header row is the one whose first cell is "Participant ID" (row 2 in the release).
    first = raw.iloc[:, 0].astype(str).str.strip().str.lower()
    hits = np.flatnonzero(first.to_numpy() == "participant id")
    if not len(hits):
        raise DataError(path, "no header row starting with 'Participant ID'", field="Participant ID")
    h = int(hits[0])
    header = [str(c).strip().lower() for c in raw.iloc[h]]
    body = raw.iloc[h + 1:].reset_index(drop=True)
    body.columns = header
    wanted = {"age": "age", "height": "height_cm", "gender": "gender", "max heart rate": "max_hr"}
    for col in wanted:
        if col not in header:
            raise DataError(path, f"missing column (expected {list(wanted)})", field=col)
    body = body[body["participant id"].astype(str).str.strip().str.match(r"^p\d+$")]
    prof = pd.DataFrame(index=body["participant id"].astype(str).str.strip().rename("user"))
    for col, name in wanted.items():
        s = body[col].reset_index(drop=True)
        if name == "gender":
            prof[name] = s.astype(str).str.strip().str.lower().replace({"nan": None}).to_numpy()
        else:
            prof[name] = _numeric(s, path, col, offset=h + 2).to_numpy()
    return prof


# ---------------------------------------------------------------------------------- per user
def _exercise(path: Path) -> pd.DataFrame:
    rec = _read_json(path)
    _require_keys(rec, path, ("startTime", "calories"))
    start = _dates(pd.Series([r["startTime"] for r in rec], dtype=object), path, "startTime")
    df = pd.DataFrame({
        "date": start.dt.normalize(),
        "steps": _numeric(pd.Series([r.get("steps") for r in rec], dtype=object), path, "steps"),
        "calories": _numeric(pd.Series([r["calories"] for r in rec], dtype=object), path, "calories"),
    })
    g = df.groupby("date")
    # min_count=1: a day whose sessions have no steps field stays NaN instead of becoming 0.
    return pd.DataFrame({"steps": g["steps"].sum(min_count=1), "calories": g["calories"].sum(min_count=1)})


def _sleep(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    rec = _read_json(path)
    if not rec:  # a file of no logs: no sleep channel that day, no stage (counted by _load_user)
        cols = ["sleep_minutes", "time_in_bed", "sleep_efficiency", "sleep_minutes_paper"]
        return (pd.DataFrame(columns=cols, index=pd.DatetimeIndex([], name="date"), dtype=float),
                pd.DataFrame({"start": pd.Series([], dtype="datetime64[ns]"), "seconds": pd.Series([], dtype=float),
                              "level": pd.Series([], dtype=object)}))
    _require_keys(rec, path, ("dateOfSleep", "minutesAsleep", "timeInBed", "startTime", "duration"))
    df = pd.DataFrame({
        "date": _dates(pd.Series([r["dateOfSleep"] for r in rec], dtype=object), path, "dateOfSleep").dt.normalize(),
        "main": [bool(r.get("mainSleep", True)) for r in rec],
        "sleep_minutes": _numeric(pd.Series([r["minutesAsleep"] for r in rec], dtype=object), path, "minutesAsleep"),
        "time_in_bed": _numeric(pd.Series([r["timeInBed"] for r in rec], dtype=object), path, "timeInBed"),
        "sleep_efficiency": _numeric(pd.Series([r.get("efficiency") for r in rec], dtype=object), path, "efficiency"),
    })
    main = df[df["main"]].sort_values(["date", "time_in_bed"]).groupby("date").last()
    daily = main[["sleep_minutes", "time_in_bed", "sleep_efficiency"]]
    # The paper's recipe: every log (duplicates and naps included) by the calendar date of its start.
    started = _dates(pd.Series([r["startTime"] for r in rec], dtype=object), path, "startTime").dt.normalize()
    in_bed = _numeric(pd.Series([r["duration"] for r in rec], dtype=object), path, "duration") / 60_000
    paper = pd.Series(in_bed.to_numpy(), index=pd.DatetimeIndex(started, name="date")).groupby(level=0).sum(min_count=1)
    daily = daily.join(paper.rename("sleep_minutes_paper"), how="outer")
    # Stage timelines -> per-segment rows (start, seconds, level); split into half hours later.
    starts, secs, levels = [], [], []
    for r in rec:
        data = (r.get("levels") or {}).get("data") or []
        for seg in data:
            starts.append(seg.get("dateTime"))
            secs.append(seg.get("seconds"))
            levels.append(seg.get("level"))
    stages = pd.DataFrame({
        "start": _dates(pd.Series(starts, dtype=object), path, "levels.data.dateTime") if starts
        else pd.Series([], dtype="datetime64[ns]"),
        "seconds": _numeric(pd.Series(secs, dtype=object), path, "levels.data.seconds") if secs
        else pd.Series([], dtype=float),
        "level": pd.Series(levels, dtype=object).astype(str),
    })
    return daily, stages


def _stage_slots(stages: pd.DataFrame) -> pd.DataFrame:
    """Sleep-stage minutes per half-hour slot, splitting segments at slot boundaries (``30 s`` ticks)."""
    if stages.empty:
        return pd.DataFrame(columns=["slot_start", "asleep_minutes", "deep_minutes", "rem_minutes", "awake_minutes"])
    ticks = np.maximum((stages["seconds"].fillna(0).to_numpy() // 30).astype(np.int64), 0)
    start_ns = stages["start"].to_numpy().astype("datetime64[s]").astype(np.int64)
    rep_start = np.repeat(start_ns, ticks)
    offs = np.arange(ticks.sum()) - np.repeat(np.cumsum(ticks) - ticks, ticks)
    t = rep_start + offs * 30
    level = np.repeat(stages["level"].to_numpy(), ticks)
    # Overlapping logs (a nap inside a main sleep) would count a moment twice: keep its first record.
    t, first = np.unique(t, return_index=True)
    level = level[first]
    slot = (t // 1800) * 1800
    df = pd.DataFrame({"slot": slot, "level": level})
    half = 0.5  # one tick = half a minute
    out = pd.DataFrame({
        "asleep_minutes": df["level"].isin(ASLEEP_LEVELS) * half,
        "deep_minutes": (df["level"] == "deep") * half,
        "rem_minutes": (df["level"] == "rem") * half,
        "awake_minutes": df["level"].isin(AWAKE_LEVELS) * half,
        "slot": slot,
    }).groupby("slot").sum()
    out.index = pd.to_datetime(out.index, unit="s")
    return out.rename_axis("slot_start").reset_index()


def _minute_samples(path: Path, inner: str | None = None) -> tuple[pd.DataFrame, int]:
    """A release minute file as (t, v) rows: `value` itself, or its `inner` field (heart_rate.json's `bpm`).
    Identical repeated rows are dropped and counted; conflicting values for one timestamp are an error."""
    rec = _read_json(path)
    _require_keys(rec, path, ("dateTime", "value"))
    t = _dates(pd.Series([r["dateTime"] for r in rec], dtype=object), path, "dateTime", "%Y-%m-%d %H:%M:%S")
    if inner is None:
        raw = [r["value"] for r in rec]
    else:
        bad = next((i for i, r in enumerate(rec) if not isinstance(r["value"], dict) or inner not in r["value"]), None)
        if bad is not None:
            raise DataError(path, f"expected an object with {inner!r} as value", field="value", row=bad)
        raw = [r["value"][inner] for r in rec]
    v = _numeric(pd.Series(raw, dtype=object), path, "value" if inner is None else f"value.{inner}")
    df = pd.DataFrame({"t": t, "v": v})
    exact = df.duplicated()
    n_exact = int(exact.sum())
    df = df[~exact]
    dup = df["t"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(path, f"duplicate time {df['t'].iloc[i]} with conflicting values", field="dateTime", row=i)
    return df, n_exact


def _half_hours(df: pd.DataFrame, name: str, how: str) -> pd.DataFrame:
    """(t, v) samples aggregated to half-hour slots: one row per slot_start with column `name`."""
    return (df.groupby(df["t"].dt.floor("30min"))["v"].agg(how).rename(name).rename_axis("slot_start")
            .reset_index())


def _minute_steps(path: Path) -> tuple[pd.Series, pd.DataFrame, int]:
    """steps.json: the day's total, the half-hour slots and how many verbatim repeated minutes were dropped (the
    release repeats some, p13: 217; conflicting values for one minute are an error: `_minute_samples`)."""
    df, n_exact = _minute_samples(path)
    return df.groupby(df["t"].dt.normalize())["v"].sum(), _half_hours(df, "steps", "sum"), n_exact


def _no_rows(path: Path, rows, notes: list[str], missing: dict[str, int]) -> None:
    """A file present but holding no rows (`[]`, a CSV of its header alone): said and counted, never silent."""
    if len(rows) == 0:
        key = f"users_with_empty_{path.name}"
        missing[key] = missing.get(key, 0) + 1
        notes.append(f"{path.parent.parent.name}: {path.parent.name}/{path.name} holds no records; nothing of "
                     f"it for this user")


def _load_user(udir: Path, notes: list[str], missing: dict[str, int]):
    user = udir.name
    for rel in REQUIRED_FILES:
        if not (udir / rel).exists():
            raise DataError(udir / rel, "required file missing")
    fit = udir / "fitbit"
    cols: dict[str, pd.Series] = {}
    ex = _exercise(fit / "exercise.json")
    _no_rows(fit / "exercise.json", ex, notes, missing)
    cols["steps"], cols["calories"] = ex["steps"], ex["calories"]
    sleep_daily, stages = _sleep(fit / "sleep.json")
    _no_rows(fit / "sleep.json", sleep_daily, notes, missing)
    for c in sleep_daily.columns:
        cols[c] = sleep_daily[c]

    def optional(fname: str) -> Path | None:
        p = fit / fname
        if p.exists():
            return p
        missing[fname] = missing.get(fname, 0) + 1
        notes.append(f"{user}: {fname} absent; its channel is missing for this user")
        return None

    if p := optional("resting_heart_rate.json"):
        rhr = _daily_series(p, value_key=("value", "value"))
        _no_rows(p, rhr, notes, missing)
        cols["resting_hr"] = rhr.where(rhr > 0)  # 0 = Fitbit could not compute it
    for name, fname in ACTIVITY_FILES.items():
        if p := optional(fname):
            cols[name] = _daily_series(p)
            _no_rows(p, cols[name], notes, missing)
    if p := optional("sleep_score.csv"):
        cols["sleep_score"], n_dup = _sleep_score(p)
        _no_rows(p, cols["sleep_score"], notes, missing)
        missing["duplicate_sleep_score"] = missing.get("duplicate_sleep_score", 0) + n_dup
    step_slots = None
    if (fit / "steps.json").exists():  # minute-level steps only for some participants
        cols["steps_total"], step_slots, n_rep = _minute_steps(fit / "steps.json")
        _no_rows(fit / "steps.json", cols["steps_total"], notes, missing)
        missing["repeated_minute_steps"] = missing.get("repeated_minute_steps", 0) + n_rep
    minute_slots = []
    for fname, (name, how, inner) in MINUTE_FILES.items():
        p = fit / fname
        if not p.exists():
            missing[f"minute:{fname}"] = missing.get(f"minute:{fname}", 0) + 1
            notes.append(f"{user}: {fname} absent; no {name} leaves for this user")
        elif fname != "steps.json":  # steps: read above (they also give steps_total)
            samples, n_rep = _minute_samples(p, inner)
            missing[f"repeated_{fname}"] = missing.get(f"repeated_{fname}", 0) + n_rep
            minute_slots.append(_half_hours(samples, name, how))
    daily = pd.DataFrame(cols)
    daily = daily.reindex(columns=[c.name for c in CHANNELS])
    daily.index.name = "date"
    # sub-day
    parts = [_stage_slots(stages)]
    if step_slots is not None:
        parts.append(step_slots)
    parts += minute_slots
    nonempty = [p.set_index("slot_start") for p in parts if len(p)]
    sub = pd.concat(nonempty, axis=1, sort=True) if nonempty else None
    if sub is not None:
        sub = sub.groupby(level=0).sum(min_count=1).reset_index()
        sub.insert(0, "user", user)
    return daily, sub


def _sleep_score(path: Path) -> tuple[pd.Series, int]:
    df = _read_csv(path, ["timestamp", "overall_score"])
    for c in ("timestamp", "overall_score"):
        if c not in df.columns:
            raise DataError(path, "missing column", field=c)
    t = _dates(df["timestamp"], path, "timestamp", offset=2)
    s = pd.Series(_numeric(df["overall_score"], path, "overall_score", offset=2).to_numpy(), index=t)
    s = s.sort_index()
    d = s.index.normalize()
    n_dup = int(d.duplicated().sum())
    s = s.groupby(d).last()
    return s, n_dup


# ------------------------------------------------------------------------------------ public
def load_pmdata(raw_dir: Path, *, source: str = "real") -> DatasetTables:
    """Read the PMData release at `raw_dir` (folders pNN/ and participant-overview.xlsx)."""
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise DataError(raw_dir, "PMData folder not found")
    udirs = sorted(p for p in raw_dir.iterdir() if p.is_dir() and p.name[:1] == "p" and p.name[1:].isdigit())
    if not udirs:
        raise DataError(raw_dir, "no participant folders pNN/ found")
    notes: list[str] = [
        "steps/calories: sum over exercise.json sessions starting that date; NaN when no session "
        "(or, for steps, no session with a steps field)",
        "wellness report date = calendar date of effective_time_frame (UTC); duplicates: last report kept",
        "sleep: sleep_minutes = minutes asleep of the main sleep by dateOfSleep (corrected); "
        "sleep_minutes_paper = summed time in bed of every log starting that date, duplicates included "
        "(the paper's recipe)",
    ]
    dropped: dict[str, int] = {}
    profiles = _read_profiles(raw_dir / "participant-overview.xlsx")
    daily_parts, sub_parts, label_parts, ctx_parts = [], [], [], []
    for udir in udirs:
        user = udir.name
        daily, sub = _load_user(udir, notes, dropped)
        daily_parts.append(daily.assign(user=user).reset_index())
        if sub is not None:
            sub_parts.append(sub)
        w = _read_wellness(udir / "pmsys" / "wellness.csv").sort_values("time", kind="stable")
        _no_rows(udir / "pmsys" / "wellness.csv", w, notes, dropped)  # no report: no label, no sample
        dup = w["date"].duplicated(keep="last")
        dropped["duplicate_report"] = dropped.get("duplicate_report", 0) + int(dup.sum())
        w = w[~dup]
        label_parts.append(pd.DataFrame({"user": user, "date": w["date"].to_numpy(), "label": w["stress"].to_numpy()}))
        ctx_parts.append(w[["date", *[c.name for c in CONTEXT_CHANNELS]]].assign(user=user))
    missing_files = {k: v for k, v in dropped.items() if k.endswith((".json", ".csv")) and ":" not in k
                     and not k.startswith(("repeated_", "users_"))}
    dropped = {k: v for k, v in dropped.items() if k not in missing_files}
    for k, v in missing_files.items():
        dropped[f"users_without_{k}"] = v
    # the minute files (sub-day leaves): counted in the notes and subday_leaf_files, not as dropped samples
    minute_missing = {k.split(":", 1)[1]: dropped.pop(k) for k in [k for k in dropped if k.startswith("minute:")]}
    for k in [k for k in dropped if k.startswith("repeated_") and k != "repeated_minute_steps" and not dropped[k]]:
        dropped.pop(k)
    daily = pd.concat(daily_parts, ignore_index=True).set_index(["user", "date"]).sort_index()
    daily = daily.dropna(how="all")
    labels = pd.concat(label_parts, ignore_index=True).sort_values(["user", "date"]).reset_index(drop=True)
    context = pd.concat(ctx_parts, ignore_index=True).set_index(["user", "date"]).sort_index()
    n_users = len(udirs)
    subday_channels = list(SUBDAY_CHANNELS) + [
        c for c in MINUTE_SUBDAY_CHANNELS
        if minute_missing.get(next(f for f, spec in MINUTE_FILES.items() if spec[0] == c.name), 0) < n_users]
    subday = None
    if sub_parts:
        sd = pd.concat(sub_parts, ignore_index=True)
        sd["date"] = sd["slot_start"].dt.normalize()
        sd["slot"] = sd["slot_start"].dt.strftime("%H:%M")
        sd["slot_index"] = (sd["slot_start"].dt.hour * 2 + sd["slot_start"].dt.minute // 30).astype(int)
        names = [c.name for c in subday_channels]
        sd = sd.reindex(columns=["user", "date", "slot", "slot_index", *names])
        subday = sd.sort_values(["user", "date", "slot_index"]).reset_index(drop=True)
    users_known = set(profiles.index)
    for u in daily.index.get_level_values("user").unique():
        if u not in users_known:
            notes.append(f"{u}: no row in participant-overview.xlsx")
    return DatasetTables(
        name="pmdata",
        source=source,  # type: ignore[arg-type]
        target=TARGET,
        daily=daily,
        labels=labels,
        channels=list(CHANNELS),
        profiles=profiles,
        context=context,
        context_channels=list(CONTEXT_CHANNELS),
        subday=subday,
        subday_channels=subday_channels,
        subday_unit="half-hour slot",
        dropped=dropped,
        raw_dir=str(raw_dir),
        notes=notes,
    )


def subday_leaf_table(tables: DatasetTables) -> pd.DataFrame:
    """RAPTOR's leaves per user (half-hour slots with any value) and per sub-day channel (slots with a value of
    it), every channel the release
    can give (a channel absent from this copy counts 0), and the release's minute files each user's folder lacks
    (read from `tables.raw_dir`), so a copy without them says so."""
    chans = [*SUBDAY_CHANNELS, *MINUTE_SUBDAY_CHANNELS]
    sd = tables.subday if tables.subday is not None else pd.DataFrame(columns=["user"])
    users = sorted(set(tables.daily.index.get_level_values("user")) | set(sd["user"]))
    rows = []
    for u in users:
        mine = sd[sd["user"] == u]
        have = [c.name for c in chans if c.name in mine]
        row = {"user": u, "leaves": int(mine[have].notna().any(axis=1).sum()) if have else 0,
               **{c.name: int(mine[c.name].notna().sum()) if c.name in mine else 0 for c in chans}}
        fit = Path(tables.raw_dir) / u / "fitbit"
        row["minute files absent"] = ", ".join(f for f in MINUTE_FILES if not (fit / f).exists()) or "-"
        rows.append(row)
    return pd.DataFrame(rows)
