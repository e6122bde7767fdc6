"""GLOBEM loader: one cohort folder (FeatureData/, SurveyData/, ParticipantsInfoData/) or a folder of them.

Every FeatureData column `f_<sensor>:<feature>[_norm|_dis]:<segment>` is parsed into `catalogue`
(one row per column: sensor, feature, variant raw/norm/dis, segment, device, column, file). The
daily table holds the allday-segment raw variant of a compact default set (the paper's case-study
names); `channels=[...]` adds any other allday raw feature by name. `_dis` columns are l/m/h
categories and are never read as numbers. Sub-day: the morning/afternoon/evening/night segments of
the same features are the four slots.

Labels:
- `feel_anxious` (SurveyData/dep_weekly.csv, INS-W_1 style): the PHQ-4 anxiety item as stored, 0-3.
- `phq4_anxiety_EMA` (SurveyData/ema.csv, INS-W_2..4): the PHQ-4 anxiety subscale as stored, the sum
  of the two anxiety items (each 0-3), so 0-6.
- `label="auto"` picks feel_anxious when dep_weekly.csv has that column, else phq4_anxiety_EMA. With
  a folder of cohorts one label (one scale) is used for all: the first of the two that any cohort
  has; cohorts without it contribute sensing only (noted, counted as cohort_without_<label>).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from balms.data.schema import Channel, DataError, DatasetTables, Target

COLUMN_RE = re.compile(r"^f_(?P<sensor>[a-z0-9]+):(?P<feature>.+?)(?P<variant>_norm|_dis)?:(?P<segment>[a-z0-9]+)$")
SEGMENTS = ("allday", "morning", "afternoon", "evening", "night", "7dhist", "14dhist", "weekday", "weekend")
SUBDAY_SEGMENTS = ("morning", "afternoon", "evening", "night")
WEARABLE_SENSORS = {"steps", "slp"}  # Fitbit; everything else is the phone

# name, feature (allday, raw variant), label, unit, decimals. Chosen to match the paper's case study.
DEFAULT_CHANNELS = [
    ("steps", "fitbit_steps_intraday_rapids_sumsteps", "Steps", "steps", 0),
    ("sleep_minutes", "fitbit_sleep_summary_rapids_sumdurationasleepmain", "Sleep Minutes", "minutes", 0),
    ("sleep_efficiency", "fitbit_sleep_summary_rapids_avgefficiencymain", "Sleep Efficiency", "%", 0),
    # RAPIDS screen durations are in minutes (the paper's case study prints the values with "s").
    ("screen_unlock_duration", "phone_screen_rapids_sumdurationunlock", "Screen Unlock Duration", "minutes", 1),
    ("outgoing_calls", "phone_calls_rapids_outgoing_count", "Outgoing Calls", "calls", 0),
    ("location_entropy", "phone_locations_doryab_locationentropy", "Location Entropy", "", 2),
    ("unique_bt_devices", "phone_bluetooth_rapids_uniquedevices", "Unique BT Devices", "devices", 0),
    ("wifi_scans", "phone_wifi_connected_rapids_countscans", "Wifi Scans", "scans", 0),
]

TARGETS = {
    "feel_anxious": Target("phq4_anxiety", "PHQ-4 anxiety score", 0, 3,
                           "GLOBEM dep_weekly feel_anxious (PHQ-4 anxiety item): "
                           "0 = not at all ... 3 = nearly every day",
                           "more anxious"),
    "phq4_anxiety_EMA": Target("phq4_anxiety", "PHQ-4 anxiety subscale", 0, 6,
                               "GLOBEM ema phq4_anxiety_EMA: sum of the two PHQ-4 anxiety items (0-3 each), 0-6",
                               "more anxious"),
}
LABEL_FILES = {"feel_anxious": "dep_weekly.csv", "phq4_anxiety_EMA": "ema.csv"}


def _read_csv(path: Path, usecols=None, empty: list | None = None) -> pd.DataFrame:
    """A GLOBEM CSV as strings; one of a header and no row is added to `empty` (the loader says and counts it)."""
    if not path.exists():
        raise DataError(path, "required file missing")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, usecols=usecols)
        if df.empty and empty is not None:
            empty.append(path)
        return df
    except ValueError as exc:  # usecols not found
        raise DataError(path, f"cannot read columns ({exc})") from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot parse CSV ({exc})") from exc


def _numeric(s: pd.Series, path: Path, field: str) -> pd.Series:
    blank = s.str.strip().isin(["", "nan", "NaN", "NA"])
    out = pd.to_numeric(s.where(~blank), errors="coerce")
    bad = out.isna() & ~blank
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(path, f"expected a number, got {s.iloc[i]!r}", field=field, row=i + 2)
    return out.astype(float)


def _dates(s: pd.Series, path: Path, field: str = "date") -> pd.Series:
    out = pd.to_datetime(s, errors="coerce", format="%Y-%m-%d")
    bad = out.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(path, f"expected a date YYYY-MM-DD, got {s.iloc[i]!r}", field=field, row=i + 2)
    return out


def parse_catalogue(cohort: Path) -> pd.DataFrame:
    """One row per FeatureData column; a column outside the naming scheme is a DataError."""
    fd = cohort / "FeatureData"
    files = sorted(fd.glob("*.csv"))
    if not files:
        raise DataError(fd, "no FeatureData/*.csv files")
    rows = []
    for f in files:
        try:
            header = pd.read_csv(f, nrows=0).columns.tolist()
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DataError(f, f"cannot parse CSV header ({exc})") from exc
        for key in ("pid", "date"):
            if key not in header:
                raise DataError(f, "missing column", field=key)
        for col in header:
            if col in ("pid", "date"):
                continue
            m = COLUMN_RE.match(col)
            if not m or m["segment"] not in SEGMENTS:
                raise DataError(f, f"unexpected column: expected f_<sensor>:<feature>[_norm|_dis]:<segment> "
                                   f"with segment in {list(SEGMENTS)}", field=col)
            rows.append(dict(column=col, file=f.name, sensor=m["sensor"], feature=m["feature"],
                             variant=(m["variant"] or "_raw")[1:], segment=m["segment"],
                             device="wearable" if m["sensor"] in WEARABLE_SENSORS else "phone"))
    return pd.DataFrame(rows)


def _cohorts(raw_dir: Path) -> list[Path]:
    raw_dir = Path(raw_dir)
    if (raw_dir / "FeatureData").is_dir():
        return [raw_dir]
    if not raw_dir.is_dir():
        raise DataError(raw_dir, "GLOBEM folder not found")
    found = sorted(p for p in raw_dir.iterdir() if (p / "FeatureData").is_dir())
    if not found:
        raise DataError(raw_dir, "neither a cohort folder (FeatureData/) nor a folder of cohorts")
    return found


def _pick_label(cohort: Path, label: str) -> str:
    if label != "auto":
        if label not in TARGETS:
            raise ValueError(f"label must be auto or one of {list(TARGETS)}, got {label!r}")
        return label
    sd = cohort / "SurveyData"
    for lab in LABEL_FILES:
        if _has_label(cohort, lab):
            return lab
    raise DataError(sd, f"no label found: neither {LABEL_FILES['feel_anxious']} with feel_anxious nor "
                        f"{LABEL_FILES['phq4_anxiety_EMA']} with phq4_anxiety_EMA", field="feel_anxious")


def _has_label(cohort: Path, lab: str) -> bool:
    p = cohort / "SurveyData" / LABEL_FILES[lab]
    try:
        return p.exists() and lab in pd.read_csv(p, nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(p, f"cannot parse CSV header ({exc})") from exc


def _feature_name(feature: str) -> str:
    return re.sub(r"^(fitbit|phone)_", "", feature)


def load_globem(raw_dir: Path, *, label: str = "auto", source: str = "real",
                channels: list[str] | None = None) -> DatasetTables:
    """Load one cohort or every cohort under `raw_dir`. `channels`: extra allday raw features by
    RAPIDS feature name (e.g. "phone_screen_rapids_countepisodeunlock") or "all" entries."""
    cohorts = _cohorts(raw_dir)
    empty: list[Path] = []
    defaults = {feat: (name, lab, unit, dec) for name, feat, lab, unit, dec in DEFAULT_CHANNELS}
    daily_parts, sub_parts, label_parts, prof_parts, cats = [], [], [], [], []
    if len(cohorts) == 1:
        lab_name = _pick_label(cohorts[0], label)
    elif label != "auto":
        lab_name = _pick_label(cohorts[0], label)
    else:  # the paper's label where any cohort has it, else the EMA subscale
        lab_name = next((lb for lb in LABEL_FILES if any(_has_label(c, lb) for c in cohorts)), None)
        if lab_name is None:
            raise DataError(raw_dir, "no cohort has feel_anxious (dep_weekly.csv) or phq4_anxiety_EMA (ema.csv)",
                            field="feel_anxious")
    dropped: dict[str, int] = {}
    notes = [f"labels: {k} = {v.description}" for k, v in TARGETS.items()]
    used_labels: dict[str, str] = {}
    chan_meta: dict[str, Channel] = {}
    for cohort in cohorts:
        cat = parse_catalogue(cohort)
        cat.insert(0, "cohort", cohort.name)
        cats.append(cat)
        raw_all = cat[(cat["variant"] == "raw") & (cat["segment"] == "allday")]
        wanted = list(defaults) + [c for c in (channels or []) if c not in defaults]
        if channels == ["all"]:
            wanted = list(defaults) + [f for f in raw_all["feature"] if f not in defaults]
        present = raw_all[raw_all["feature"].isin(wanted)]
        for feat in wanted:
            if feat not in set(present["feature"]):
                if feat in defaults:
                    notes.append(f"{cohort.name}: default channel {feat} absent from FeatureData")
                    dropped[f"absent_channel:{feat}"] = dropped.get(f"absent_channel:{feat}", 0) + 1
                else:
                    raise DataError(cohort / "FeatureData", "requested channel not in the catalogue", field=feat)
        # read the needed columns per file once
        per_file: dict[str, list[str]] = {}
        seg_cols = cat[(cat["variant"] == "raw") & cat["feature"].isin(present["feature"])
                       & cat["segment"].isin(("allday", *SUBDAY_SEGMENTS))]
        for f, g in seg_cols.groupby("file"):
            per_file[f] = g["column"].tolist()
        frames = []
        for f, cols in per_file.items():
            path = cohort / "FeatureData" / f
            df = _read_csv(path, usecols=["pid", "date", *cols], empty=empty)
            key = pd.DataFrame({"user": df["pid"].str.strip(), "date": _dates(df["date"], path)})
            dup = key.duplicated()
            if dup.any():
                i = int(np.flatnonzero(dup.to_numpy())[0])
                raise DataError(path, f"duplicate (pid, date) {key['user'].iloc[i]} {key['date'].iloc[i].date()}",
                                field="date", row=i + 2)
            vals = pd.DataFrame({c: _numeric(df[c], path, c) for c in cols})
            frames.append(pd.concat([key, vals], axis=1).set_index(["user", "date"]))
        wide = pd.concat(frames, axis=1) if frames else pd.DataFrame()
        col_of = {r.column: r for r in seg_cols.itertuples()}
        # daily (allday) and sub-day (segments)
        day = {}
        sub = {seg: {} for seg in SUBDAY_SEGMENTS}
        for col in wide.columns:
            r = col_of[col]
            name = defaults[r.feature][0] if r.feature in defaults else _feature_name(r.feature)
            if name not in chan_meta:
                if r.feature in defaults:
                    _, lab, unit, dec = defaults[r.feature]
                else:
                    lab, unit, dec = _feature_name(r.feature).replace("_", " "), "", 2
                chan_meta[name] = Channel(name, lab, unit, r.device, f"GLOBEM {r.sensor}: {r.feature}", dec)
            if r.segment == "allday":
                day[name] = wide[col]
            else:
                sub[r.segment][name] = wide[col]
        daily_parts.append(pd.DataFrame(day))
        for i, seg in enumerate(SUBDAY_SEGMENTS):
            s = pd.DataFrame(sub[seg]).reset_index()
            s["slot"], s["slot_index"] = seg, i
            sub_parts.append(s)
        # labels
        lpath = cohort / "SurveyData" / LABEL_FILES[lab_name]
        if len(cohorts) > 1 and not _has_label(cohort, lab_name):
            # several cohorts: one without this label still contributes sensing, counted and noted
            notes.append(f"{cohort.name}: no {lab_name} in {LABEL_FILES[lab_name]}; sensing only, no labels")
            dropped[f"cohort_without_{lab_name}"] = dropped.get(f"cohort_without_{lab_name}", 0) + 1
            ldf = pd.DataFrame({"pid": pd.Series([], dtype=str), "date": pd.Series([], dtype=str),
                                lab_name: pd.Series([], dtype=str)})
        else:
            ldf = _read_csv(lpath, empty=empty)
        used_labels[cohort.name] = lab_name
        for c in ("pid", "date", lab_name):
            if c not in ldf.columns:
                raise DataError(lpath, "missing column", field=c)
        lab = pd.DataFrame({"user": ldf["pid"].str.strip(), "date": _dates(ldf["date"], lpath),
                            "label": _numeric(ldf[lab_name], lpath, lab_name)})
        # rows without this label (e.g. BDI2-only rows) stay as NaN: build_samples counts them as missing_label
        dupl = lab.duplicated(["user", "date"], keep="last")
        if dupl.any():
            dropped["duplicate_report"] = dropped.get("duplicate_report", 0) + int(dupl.sum())
            lab = lab[~dupl]
        label_parts.append(lab)
        # profiles: cohort and platform
        pp = cohort / "ParticipantsInfoData" / "platform.csv"
        users = sorted(set(wide.index.get_level_values(0)) | set(lab["user"]))
        prof = pd.DataFrame({"cohort": cohort.name}, index=pd.Index(users, name="user"))
        if pp.exists():
            pl = _read_csv(pp, empty=empty)
            if "pid" in pl.columns and "platform" in pl.columns:
                prof["platform"] = pl.set_index(pl["pid"].str.strip())["platform"].reindex(prof.index)
        prof_parts.append(prof)
    profiles = pd.concat(prof_parts)
    dup_users = profiles.index.duplicated()
    if dup_users.any():
        raise DataError(raw_dir, f"participant {profiles.index[dup_users][0]} appears in two cohorts", field="pid")
    order = [d[0] for d in DEFAULT_CHANNELS] + sorted(n for n in chan_meta if n not in {d[0] for d in DEFAULT_CHANNELS})
    names = [n for n in order if n in chan_meta]
    daily = pd.concat(daily_parts).reindex(columns=names).sort_index()
    daily.index = daily.index.set_names(["user", "date"])
    subday = pd.concat(sub_parts, ignore_index=True).reindex(columns=["user", "date", "slot", "slot_index", *names])
    subday = subday.dropna(subset=names, how="all").sort_values(["user", "date", "slot_index"]).reset_index(drop=True)
    labels = pd.concat(label_parts, ignore_index=True).sort_values(["user", "date"]).reset_index(drop=True)
    catalogue = pd.concat(cats, ignore_index=True)
    notes.append(f"label per cohort: {used_labels}")
    for path in empty:  # a header and no row: loaded as no data, said and counted
        notes.append(f"{Path(path).relative_to(raw_dir) if Path(path).is_relative_to(raw_dir) else path}: "
                     "a header and no rows")
        dropped["files_with_no_rows"] = dropped.get("files_with_no_rows", 0) + 1
    chans = [chan_meta[n] for n in names]
    t = DatasetTables(
        name="globem", source=source, target=TARGETS[lab_name],  # type: ignore[arg-type]
        daily=daily, labels=labels, channels=chans, profiles=profiles,
        subday=subday, subday_channels=chans, subday_unit="time-of-day segment",
        dropped=dropped, raw_dir=str(raw_dir), notes=notes, catalogue=catalogue,
    )
    return t
