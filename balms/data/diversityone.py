"""DiversityOne reader: evening mood from the time diaries, daily and 30-minute phone-sensor channels.

DiversityOne (Busso et al. 2025) is released only under a signed licence, so no real file was available
to us. Everything below is OUR READING OF THE PUBLISHED LAYOUT; every name the reader depends on is a
constant in this block, so adapting to the licensed files means editing this block only.

    <root>/Site_<City>_<CC>/                      e.g. Site_Ulaanbaatar_MN (the paper's Mongolia site)
      Diachronic-Interactions/timediaries.parquet one row per time-diary prompt:
          userid             participant id (string)
          instancetimestamp  when the prompt was issued (local time; datetime or ISO string)
          answertimestamp    when it was answered (null = not answered)
          tag                questionnaire identifier (e.g. "timediary"); kept, not filtered on
          A3                 "What are you doing?"   (activity, text)
          A4                 "Where are you?"        (location, text)
          A6a                "How is your mood?"     1 = very good ... 5 = very bad (REVERSE-coded)
      Sensors/<sensor>/*30min.csv                 thirty-minute aggregates, one row per user and slot:
          userid, timestamp (slot start "YYYY-MM-DD HH:MM:SS", on :00 or :30), then the value
          columns listed in SENSOR_COLUMNS (e.g. screen: screen_on_min, n_unlocks).

Target: the daily EVENING mood, recoded as 6 - A6a so that higher is better (1 = very bad, 5 = very
good). Evening = prompts issued from EVENING_FROM_HOUR to midnight. Rule for several evening answers on
one day: the LAST answered one (latest answertimestamp) is the label; the others are counted in
`dropped["evening_mood_extra_answers"]`. Unanswered prompts and A6a outside 1-5 are counted too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from balms.data.schema import Channel, DataError, DatasetTables, Target

DEFAULT_SITE = "Site_Ulaanbaatar_MN"
TIMEDIARIES = Path("Diachronic-Interactions") / "timediaries.parquet"
DIARY_USER, DIARY_INSTANCE, DIARY_ANSWER, DIARY_TAG = "userid", "instancetimestamp", "answertimestamp", "tag"
DIARY_ACTIVITY, DIARY_LOCATION, DIARY_MOOD = "A3", "A4", "A6a"
DIARY_COLUMNS = (DIARY_USER, DIARY_INSTANCE, DIARY_ANSWER, DIARY_TAG, DIARY_ACTIVITY, DIARY_LOCATION, DIARY_MOOD)
EVENING_FROM_HOUR = 18
SENSORS_DIR = "Sensors"
SENSOR_FILE_GLOB = "*30min.csv"
SLOT_USER, SLOT_TIME = "userid", "timestamp"
# Timestamps are read as local wall-clock time. Time-zone-aware values are converted to the site's zone
# (chosen by the folder's country code) before the zone is dropped, so "evening" means local evening.
SITE_TZ = {"MN": "Asia/Ulaanbaatar", "IT": "Europe/Rome", "DK": "Europe/Copenhagen", "UK": "Europe/London",
           "GB": "Europe/London", "MX": "America/Mexico_City", "PY": "America/Asuncion", "IN": "Asia/Kolkata",
           "CN": "Asia/Shanghai"}
NIGHT_SLOTS = range(0, 12)  # 00:00-05:30 slot starts


@dataclass(frozen=True)
class SensorColumn:
    """One value column of one 30-minute sensor file and how it becomes a daily channel."""

    sensor: str
    column: str
    channel: str
    label: str
    unit: str
    agg: str  # "sum" or "mean" over the day's recorded slots
    decimals: int = 0
    night_only: bool = False  # aggregate only the 00:00-05:30 slots (a sleep-disruption proxy)
    description: str = ""


SENSOR_COLUMNS: tuple[SensorColumn, ...] = (
    SensorColumn("accelerometer", "moving_min", "active_min", "Active minutes (phone accelerometer)", "minutes",
                 "sum", description="minutes with movement detected, summed over recorded slots"),
    SensorColumn("gyroscope", "rotation_mean", "rotation", "Mean phone rotation rate", "rad/s", "mean", 2),
    SensorColumn("wifi", "n_networks", "wifi_networks", "Wi-Fi networks seen per slot", "networks", "mean", 1),
    SensorColumn("bluetooth", "n_devices", "bt_devices", "Bluetooth devices seen per slot", "devices", "mean", 1),
    SensorColumn("location", "distance_m", "distance_m", "Distance travelled", "m", "sum"),
    SensorColumn("screen", "screen_on_min", "screen_min", "Screen-on time", "minutes", "sum"),
    SensorColumn("screen", "n_unlocks", "unlocks", "Phone unlocks", "unlocks", "sum"),
    SensorColumn("screen", "screen_on_min", "night_screen_min", "Screen-on time 00:00-06:00", "minutes", "sum",
                 night_only=True, description="screen use after midnight, a proxy for a poor night"),
    SensorColumn("notifications", "n_notifications", "notifications", "Notifications received", "notifications",
                 "sum"),
    SensorColumn("battery", "battery_mean", "battery", "Mean battery level", "%", "mean"),
)
SENSORS = tuple(dict.fromkeys(c.sensor for c in SENSOR_COLUMNS))

TARGET = Target(
    name="mood",
    label="evening mood",
    scale_min=1,
    scale_max=5,
    description="1 = very bad, 5 = very good. Recoded as 6 - A6a: the source item A6a is reverse-coded "
    "(1 = very good, 5 = very bad). Daily label = the last answered evening (18:00-24:00) time-diary mood.",
    higher_is="better mood",
)


def _site_dir(raw_dir: Path, site: str | None) -> Path:
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise DataError(raw_dir, "DiversityOne raw folder not found")
    if raw_dir.name.startswith("Site_"):
        return raw_dir
    sites = sorted(p for p in raw_dir.glob("Site_*") if p.is_dir())
    if site is not None:
        for p in sites:
            if p.name == site or p.name.split("_")[1].lower() == site.lower():
                return p
        raise DataError(raw_dir, f"site {site!r} not found; sites present: {[p.name for p in sites]}")
    if len(sites) == 1:
        return sites[0]
    if (raw_dir / DEFAULT_SITE).is_dir():
        return raw_dir / DEFAULT_SITE
    raise DataError(raw_dir, f"expected one Site_<City>_<CC> folder (or {DEFAULT_SITE}); "
                             f"found {[p.name for p in sites]}")


def _require(df: pd.DataFrame, path: Path, cols) -> None:
    for c in cols:
        if c not in df.columns:
            raise DataError(path, f"missing column; columns present: {list(df.columns)}", field=c)


def _site_tz(path: Path) -> str:
    for part in Path(path).parts[::-1]:
        if part.startswith("Site_"):
            return SITE_TZ.get(part.rsplit("_", 1)[-1].upper(), "UTC")
    return "UTC"


def _timestamps(s: pd.Series, path: Path, field: str, *, allow_null: bool) -> pd.Series:
    if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s) and s.notna().any():
        raise DataError(path, "expected a timestamp (datetime or ISO text), got numbers such as "
                              f"{s.dropna().iloc[0]!r}", field=field)
    if pd.api.types.is_datetime64_any_dtype(s):
        out = s
    else:
        out = pd.to_datetime(s, errors="coerce")
        bad = out.isna() & s.notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(path, f"expected a timestamp, got {s.iloc[i]!r}", field=field, row=i)
    if getattr(out.dt, "tz", None) is not None:
        out = out.dt.tz_convert(_site_tz(path)).dt.tz_localize(None)
    if not allow_null and out.isna().any():
        raise DataError(path, "missing timestamp", field=field, row=int(np.flatnonzero(out.isna().to_numpy())[0]))
    return out


def _numeric(s: pd.Series, path: Path, field: str) -> pd.Series:
    out = pd.to_numeric(s, errors="coerce")
    bad = out.isna() & s.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(path, f"expected a number, got {s.iloc[i]!r}", field=field, row=i)
    return out.astype(float)


def read_timediaries(site_dir: Path, dropped: dict[str, int]) -> pd.DataFrame:
    """Daily evening-mood labels (user, date, label on the recoded 1-5 scale)."""
    path = site_dir / TIMEDIARIES
    if not path.is_file():
        raise DataError(path, "time-diary file not found")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - any parquet failure is a malformed-file error
        raise DataError(path, f"unreadable parquet file ({e.__class__.__name__}: {e})") from e
    _require(df, path, DIARY_COLUMNS)
    df = df.reset_index(drop=True)
    inst = _timestamps(df[DIARY_INSTANCE], path, DIARY_INSTANCE, allow_null=False)
    ans = _timestamps(df[DIARY_ANSWER], path, DIARY_ANSWER, allow_null=True)
    mood = _numeric(df[DIARY_MOOD], path, DIARY_MOOD)
    user = df[DIARY_USER].astype(str)
    dup = pd.DataFrame({"u": user, "t": inst}).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(path, f"duplicate prompt for user {user.iloc[i]} at {inst.iloc[i]}", field=DIARY_INSTANCE,
                        row=i)
    d = pd.DataFrame({"user": user, "inst": inst, "ans": ans, "mood": mood})
    unanswered = d["ans"].isna() | d["mood"].isna()
    dropped["diary_prompts_unanswered"] = int(unanswered.sum())
    d = d[~unanswered]
    out_of_range = ~d["mood"].isin([1, 2, 3, 4, 5])
    dropped["diary_mood_out_of_range"] = int(out_of_range.sum())
    d = d[~out_of_range]
    evening = d[d["inst"].dt.hour >= EVENING_FROM_HOUR].copy()
    dropped["diary_answers_not_evening"] = int(len(d) - len(evening))
    evening["date"] = evening["inst"].dt.normalize()
    evening = evening.sort_values(["user", "date", "ans", "inst"], kind="stable")
    last = evening.groupby(["user", "date"], sort=True).tail(1)
    dropped["evening_mood_extra_answers"] = int(len(evening) - len(last))
    labels = pd.DataFrame({"user": last["user"].to_numpy(), "date": last["date"].to_numpy(),
                           "label": 6.0 - last["mood"].to_numpy()})
    return labels.sort_values(["user", "date"]).reset_index(drop=True)


def read_sensors(site_dir: Path, notes: list[str]) -> pd.DataFrame:
    """All 30-minute sensor rows merged on (user, slot start): columns user, ts, <sensor>:<column>."""
    root = site_dir / SENSORS_DIR
    if not root.is_dir():
        raise DataError(root, "sensor folder not found")
    merged = None
    for sensor in SENSORS:
        cols = sorted({c.column for c in SENSOR_COLUMNS if c.sensor == sensor})
        folder = root / sensor
        if not folder.is_dir():
            notes.append(f"sensor '{sensor}' absent ({folder}); its channels are all missing")
            continue
        files = sorted(folder.glob(SENSOR_FILE_GLOB))
        if not files:
            raise DataError(folder / SENSOR_FILE_GLOB, "no thirty-minute file in the sensor folder")
        parts = []
        for path in files:
            try:
                df = pd.read_csv(path)
            except Exception as e:  # noqa: BLE001
                raise DataError(path, f"unreadable CSV ({e.__class__.__name__}: {e})") from e
            _require(df, path, (SLOT_USER, SLOT_TIME, *cols))
            ts = _timestamps(df[SLOT_TIME], path, SLOT_TIME, allow_null=False)
            off = (ts.dt.minute % 30 != 0) | (ts.dt.second != 0)
            if off.any():
                i = int(np.flatnonzero(off.to_numpy())[0])
                raise DataError(path, f"expected a slot start on :00 or :30, got {df[SLOT_TIME].iloc[i]!r}",
                                field=SLOT_TIME, row=i)
            part = pd.DataFrame({"user": df[SLOT_USER].astype(str), "ts": ts})
            for c in cols:
                part[f"{sensor}:{c}"] = _numeric(df[c], path, c).to_numpy()
            dup = part.duplicated(["user", "ts"])
            if dup.any():
                i = int(np.flatnonzero(dup.to_numpy())[0])
                raise DataError(path, f"duplicate slot for user {part['user'].iloc[i]} at {part['ts'].iloc[i]}",
                                field=SLOT_TIME, row=i)
            parts.append(part)
        s = pd.concat(parts, ignore_index=True)
        if s.duplicated(["user", "ts"]).any():
            raise DataError(folder, "the same slot appears in two files", field=SLOT_TIME)
        merged = s if merged is None else merged.merge(s, on=["user", "ts"], how="outer")
    if merged is None:
        raise DataError(root, f"none of the expected sensors {list(SENSORS)} present")
    for c in SENSOR_COLUMNS:
        key = f"{c.sensor}:{c.column}"
        if key not in merged:
            merged[key] = np.nan
    return merged.sort_values(["user", "ts"]).reset_index(drop=True)


def load_diversityone(raw_dir: Path, *, site: str | None = None, source: str = "real") -> DatasetTables:
    """Read one DiversityOne site into DatasetTables (daily phone channels, 30-min slots, evening mood)."""
    site_dir = _site_dir(Path(raw_dir), site)
    dropped: dict[str, int] = {}
    notes: list[str] = [f"site: {site_dir.name}", "A6a recoded as 6 - A6a (higher = better mood)"]
    labels = read_timediaries(site_dir, dropped)
    slots = read_sensors(site_dir, notes)
    slots["date"] = slots["ts"].dt.normalize()
    slots["slot_index"] = slots["ts"].dt.hour * 2 + slots["ts"].dt.minute // 30
    slots["slot"] = slots["ts"].dt.strftime("%H:%M")

    daily_parts = {}
    g_all = slots.groupby(["user", "date"])
    night = slots[slots["slot_index"].isin(NIGHT_SLOTS)].groupby(["user", "date"])
    for c in SENSOR_COLUMNS:
        key = f"{c.sensor}:{c.column}"
        g = night if c.night_only else g_all
        s = g[key].sum(min_count=1) if c.agg == "sum" else g[key].mean()
        if c.night_only:  # recorded-but-no-night-slot days: the sensor saw no night use
            s = s.reindex(g_all[key].count().index)
            has_day = g_all[key].count() > 0
            s = s.where(s.notna() | ~has_day, 0.0)
        daily_parts[c.channel] = s
    daily = pd.DataFrame(daily_parts)
    # Full calendar per user (first to last observed day), missing days explicit NaN rows.
    users = sorted(set(daily.index.get_level_values(0)) | set(labels["user"]))
    idx = []
    for u in users:
        days = list(daily.loc[u].index) if u in daily.index.get_level_values(0) else []
        days += list(labels.loc[labels["user"] == u, "date"])
        for d in pd.date_range(min(days), max(days), freq="D"):
            idx.append((u, d))
    daily = daily.reindex(pd.MultiIndex.from_tuples(idx, names=["user", "date"])).astype(float)

    channels = [Channel(c.channel, c.label, c.unit, "phone", c.description, c.decimals) for c in SENSOR_COLUMNS]
    sub_cols = [c for c in SENSOR_COLUMNS if not c.night_only]
    subday = slots[["user", "date", "slot", "slot_index"]].copy()
    for c in sub_cols:
        subday[c.channel] = slots[f"{c.sensor}:{c.column}"].astype(float)
    subday = subday.sort_values(["user", "date", "slot_index"]).reset_index(drop=True)
    subday_channels = [Channel(c.channel, c.label.replace(" per slot", ""), c.unit, "phone", c.description,
                               c.decimals) for c in sub_cols]
    n_label_days = len(labels)
    notes.append(f"{n_label_days} user-days with an evening mood label")
    return DatasetTables(
        name="diversityone",
        source=source,  # type: ignore[arg-type]
        target=TARGET,
        daily=daily,
        labels=labels,
        channels=channels,
        subday=subday,
        subday_channels=subday_channels,
        subday_unit="thirty-minute slot",
        dropped=dropped,
        raw_dir=str(site_dir),
        notes=notes,
    )
