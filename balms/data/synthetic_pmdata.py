"""Synthetic PMData cohort written in the ORIGINAL PMData layout (pNN/pmsys, pNN/fitbit, overview xlsx).

Every file mirrors the real release's structure (key names, key order, date formats, string-typed
Fitbit minute values, the two-row header of participant-overview.xlsx), so `load_pmdata` reads it
with the very same code as the real data.

Planted relation (see `PLANTED`): stress on day t rises with the sleep deficit against the user's own
baseline and with raised resting heart rate, both averaged over the three nights/days before t.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

PLANTED = (
    "PMData (synthetic): each participant has their own sleep baseline (mean minutes asleep) and "
    "resting-heart-rate baseline. Daily stress (1-5) = the participant's usual stress level "
    "+ 0.65 x (sleep deficit over the 3 nights before the target day, in units of the participant's "
    "own sleep variability) + 0.55 x (resting HR above the participant's baseline over the 3 days "
    "before, in units of their own HR variability) + noise (sd 0.3), rounded and clipped to 1-5. "
    "Sleeping less than usual and a raised resting heart rate in the last 3 days therefore mean more "
    "stress; same-day mood is lower when stress is higher. Steps and active minutes follow a weekly "
    "rhythm but carry no planted signal."
)

START = dt.date(2019, 11, 1)
ACTIVITIES = [  # (name, typeId, has steps, step rate per min, kcal per min)
    ("Walk", 90013, True, 105, 5.5),
    ("Run", 90009, True, 160, 11.0),
    ("Treadmill", 90019, True, 140, 9.0),
    ("Outdoor Bike", 90001, False, 0, 8.0),
    ("Weights", 2030, False, 0, 5.0),
]
HR_ZONES = [("Out of Range", 30, 86), ("Fat Burn", 86, 121), ("Cardio", 121, 147), ("Peak", 147, 220)]


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """Unit-variance AR(1) noise: day-to-day persistence like real sleep and heart rate."""
    e = rng.normal(size=n)
    x = np.empty(n)
    x[0] = e[0]
    s = np.sqrt(1 - phi**2)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + s * e[i]
    return x


def _missing_runs(rng: np.random.Generator, n: int, p_day: float, n_runs: int, run_len=(3, 9)) -> np.ndarray:
    """Boolean 'present' mask: random missing days plus a few runs of consecutive missing days."""
    present = rng.random(n) >= p_day
    for _ in range(n_runs):
        length = int(rng.integers(*run_len))
        start = int(rng.integers(0, max(1, n - length)))
        present[start : start + length] = False
    return present


def _dump_json(path: Path, obj) -> None:
    # Same separators as the Fitbit export (", " and ": "), no trailing newline.
    path.write_text(json.dumps(obj), encoding="utf-8")


def _sleep_levels(rng, start: dt.datetime, asleep_min: int, awake_min: int) -> tuple[list, list, dict]:
    """A stage timeline (30-s grid) whose wake/sleep totals equal the summary minutes."""
    n_wake = int(rng.integers(12, 28))
    n_sleep = n_wake + 1
    sleep_parts = rng.dirichlet(np.ones(n_sleep) * 2) * asleep_min * 60
    wake_parts = rng.dirichlet(np.ones(n_wake) * 2) * awake_min * 60
    sleep_s = np.maximum(30, np.round(sleep_parts / 30) * 30).astype(int)
    wake_s = np.maximum(30, np.round(wake_parts / 30) * 30).astype(int)
    sleep_s[-1] += asleep_min * 60 - sleep_s.sum()
    wake_s[-1] += awake_min * 60 - wake_s.sum()
    if sleep_s[-1] < 30 or wake_s[-1] < 30:  # rounding pushed the last piece negative: flat split
        sleep_s = np.full(n_sleep, asleep_min * 60 // n_sleep // 30 * 30)
        sleep_s[-1] += asleep_min * 60 - sleep_s.sum()
        wake_s = np.full(n_wake, awake_min * 60 // n_wake // 30 * 30)
        wake_s[-1] += awake_min * 60 - wake_s.sum()
    stages = rng.choice(["light", "deep", "rem"], size=n_sleep, p=[0.58, 0.2, 0.22])
    data, t = [], start
    counts = {"deep": 0, "wake": 0, "light": 0, "rem": 0}
    minutes = {k: 0 for k in counts}
    for i in range(n_sleep):
        for level, secs in ((stages[i], int(sleep_s[i])), ("wake", int(wake_s[i]) if i < n_wake else 0)):
            if secs <= 0:
                continue
            data.append({"dateTime": t.strftime("%Y-%m-%dT%H:%M:%S.000"), "level": str(level), "seconds": secs})
            counts[str(level)] += 1
            minutes[str(level)] += secs // 60
            t += dt.timedelta(seconds=secs)
    short = []
    for j in sorted(rng.choice(len(data), size=min(4, len(data)), replace=False)):
        short.append({"dateTime": data[j]["dateTime"], "level": "wake", "seconds": int(rng.choice([30, 60, 90, 150]))})
    summary = {
        k: {"count": counts[k], "minutes": minutes[k], "thirtyDayAvgMinutes": int(minutes[k] + rng.integers(-15, 16))}
        for k in ("deep", "wake", "light", "rem")
    }
    return data, short, summary


def _exercise(rng, log_id: int, start: dt.datetime, name: str, type_id: int, has_steps: bool, rate, kcal_rate, hr_base):
    minutes = int(rng.integers(15, 70))
    dur = minutes * 60_000 + int(rng.integers(0, 60)) * 1000
    avg_hr = int(hr_base + rng.integers(35, 75))
    very = int(minutes * rng.uniform(0.2, 0.7))
    fairly = int((minutes - very) * rng.uniform(0.3, 0.8))
    light = max(0, minutes - very - fairly - 1)
    zone_min = rng.multinomial(minutes, [0.1, 0.6, 0.25, 0.05])
    rec = {
        "logId": log_id,
        "activityName": name,
        "activityTypeId": type_id,
        "activityLevel": [
            {"minutes": minutes - very - fairly - light, "name": "sedentary"},
            {"minutes": light, "name": "lightly"},
            {"minutes": fairly, "name": "fairly"},
            {"minutes": very, "name": "very"},
        ],
        "averageHeartRate": avg_hr,
        "calories": int(minutes * kcal_rate * rng.uniform(0.8, 1.2)),
        "duration": dur,
        "activeDuration": dur,
    }
    steps = int(minutes * rate * rng.uniform(0.8, 1.15)) if has_steps else 0
    if has_steps:
        rec["steps"] = steps
    end = start + dt.timedelta(milliseconds=dur)
    rec.update(
        {
            "logType": "auto_detected",
            "manualValuesSpecified": {"calories": False, "distance": False, "steps": False},
            "heartRateZones": [
                {"name": z, "min": lo, "max": hi, "minutes": int(m)}
                for (z, lo, hi), m in zip(HR_ZONES, zone_min, strict=True)
            ],
            "lastModified": (end + dt.timedelta(minutes=int(rng.integers(5, 90)))).strftime("%m/%d/%y %H:%M:%S"),
            "startTime": start.strftime("%Y-%m-%d %H:%M:%S"),
            "originalStartTime": start.strftime("%m/%d/%y %H:%M:%S"),
            "originalDuration": dur,
            "elevationGain": round(float(rng.uniform(0, 40)), 3),
            "hasGps": False,
            "shouldFetchDetails": False,
        }
    )
    return rec, steps


def write_pmdata(out_dir: Path, rng: np.random.Generator, n_users: int, n_days: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    dates = [START + dt.timedelta(days=i) for i in range(n_days)]
    weekday = np.array([d.weekday() for d in dates])
    overview = []
    minute_step_users = set(range(n_users)[1::4])  # every 4th participant (p02, p06, ...) has steps.json
    no_rhr_users = {n_users - 2} if n_users >= 6 else set()  # like p12/p13: no resting HR / lightly file
    log_id = 26_000_000_000
    for u in range(n_users):
        pid = f"p{u + 1:02d}"
        fit, pm = out_dir / pid / "fitbit", out_dir / pid / "pmsys"
        fit.mkdir(parents=True, exist_ok=True)
        pm.mkdir(parents=True, exist_ok=True)
        age = int(rng.integers(23, 61))
        gender = "female" if rng.random() < 0.25 else "male"
        max_hr = int(np.clip(208 - 0.7 * age + rng.normal(0, 8), 150, 205))
        overview.append((pid, age, int(rng.normal(180 if gender == "male" else 167, 6)), gender,
                         "A" if rng.random() < 0.6 else "B", max_hr))
        # Person-level baselines: between-person differences.
        mu_sleep, sd_sleep = rng.normal(425, 30), rng.uniform(30, 50)
        mu_rhr, sd_rhr = rng.normal(57, 6), rng.uniform(1.2, 2.2)
        mu_steps = rng.lognormal(np.log(9000), 0.3)
        base_stress = rng.normal(2.85, 0.2)
        base_mood = rng.normal(3.3, 0.3)
        # Daily behaviour with weekly rhythm: longer sleep on weekend mornings, fewer steps on Sundays.
        z_sleep = _ar1(rng, n_days, 0.25)
        z_rhr = _ar1(rng, n_days, 0.3)
        sleep = mu_sleep + sd_sleep * z_sleep + np.where(np.isin(weekday, [5, 6]), 35, 0)
        sleep = np.clip(sleep, 180, 660).round().astype(int)
        rhr = mu_rhr + sd_rhr * z_rhr
        steps_total = (mu_steps * np.where(weekday == 6, 0.75, 1.0) * rng.lognormal(0, 0.3, n_days)).astype(int)
        worn = _missing_runs(rng, n_days, 0.04, int(rng.integers(0, 3)))
        reported = _missing_runs(rng, n_days, rng.uniform(0.05, 0.3), int(rng.integers(0, 3)), (3, 8))
        # Planted relation: 3-day sleep deficit and raised RHR before day t (missing days skipped).
        def_z = np.where(worn, (mu_sleep + 17.5 - sleep) / sd_sleep, np.nan)  # 17.5 = mean weekend bonus
        rhr_z = np.where(worn, (rhr - mu_rhr) / sd_rhr, np.nan)
        stress, mood_v = np.full(n_days, np.nan), np.full(n_days, np.nan)
        for t in range(n_days):
            lo = max(0, t - 3)
            d3 = np.nanmean(def_z[lo:t]) if t > 0 and np.isfinite(def_z[lo:t]).any() else 0.0
            h3 = np.nanmean(rhr_z[lo:t]) if t > 0 and np.isfinite(rhr_z[lo:t]).any() else 0.0
            cont = base_stress + 0.65 * d3 + 0.55 * h3 + rng.normal(0, 0.3)
            stress[t] = np.clip(np.round(cont), 1, 5)
            mood_v[t] = np.clip(np.round(base_mood - 0.5 * (cont - base_stress) + rng.normal(0, 0.45)), 1, 5)

        # --- pmsys/wellness.csv ---
        rows = []
        for t, d in enumerate(dates):
            if not reported[t]:
                continue
            n_rep = 2 if rng.random() < 0.01 else 1  # rare duplicate report, as in the real release
            for k in range(n_rep):
                ts = dt.datetime.combine(d, dt.time(6)) + dt.timedelta(
                    seconds=int(rng.integers(0, 4 * 3600)) + 5 * 3600 * k)
                s = int(stress[t]) if rng.random() > 0.003 else 0  # rare out-of-range 0, as in the release
                rows.append({
                    "effective_time_frame": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(rng.integers(0, 1000)):03d}Z",
                    "fatigue": int(np.clip(np.round(3 - 0.4 * def_z[t - 1] if t and np.isfinite(def_z[t - 1]) else 3)
                                           + rng.integers(-1, 2), 1, 5)),
                    "mood": int(mood_v[t]),
                    "readiness": int(np.clip(np.round(7 - 0.8 * (stress[t] - 3) + rng.normal(0, 1.2)), 0, 10)),
                    "sleep_duration_h": int(np.clip(np.round(sleep[t] / 60 + rng.normal(0, 0.5)), 3, 11)),
                    "sleep_quality": int(np.clip(np.round(3 - 0.5 * (def_z[t] if np.isfinite(def_z[t]) else 0)
                                                          + rng.normal(0, 0.5)), 1, 5)),
                    "soreness": int(np.clip(np.round(rng.normal(2.6, 0.7)), 1, 5)),
                    "soreness_area": "[]" if rng.random() < 0.8
                    else f"[{int(rng.choice([12921003, 5849001, 41505006]))}]",
                    "stress": s,
                })
        pd.DataFrame(rows).to_csv(pm / "wellness.csv", index=False)

        # --- fitbit daily files ---
        rhr_rec, mins = [], {k: [] for k in ("very", "moderately", "lightly", "sedentary")}
        sleep_rec, score_rows, ex_rec = [], [], []
        minute_steps = []
        for t, d in enumerate(dates):
            day = d.strftime("%Y-%m-%d 00:00:00")
            if worn[t]:
                if rng.random() < 0.03:  # Fitbit's 'no estimate' day: value 0 (= missing)
                    rhr_rec.append({"dateTime": day, "value": {"date": None, "value": 0.0, "error": 0.0}})
                else:
                    rhr_rec.append({"dateTime": day, "value": {"date": d.strftime("%m/%d/%y"), "value": float(rhr[t]),
                                                               "error": float(6.78 + rng.uniform(0, 0.02))}})
                very = int(np.clip(steps_total[t] / 9000 * 35 * rng.uniform(0.5, 1.5), 0, 240))
                mod = int(np.clip(steps_total[t] / 9000 * 25 * rng.uniform(0.5, 1.5), 0, 200))
                light = int(np.clip(steps_total[t] / 9000 * 210 * rng.uniform(0.7, 1.3), 20, 500))
                sed = int(1440 - sleep[t] - very - mod - light)
            else:
                very = mod = light = 0
                sed = 1440
            for k, v in zip(mins, (very, mod, light, sed), strict=True):
                mins[k].append({"dateTime": day, "value": str(v)})
            if not worn[t]:
                continue
            # Main sleep ending on the morning of d (dateOfSleep = d).
            in_bed_extra = int(rng.integers(20, 70))
            bed = dt.datetime.combine(d, dt.time(0)) - dt.timedelta(minutes=int(rng.normal(45, 40)))
            bed = bed.replace(second=30 * int(rng.integers(0, 2)), microsecond=0)
            in_bed = int(sleep[t] + in_bed_extra)
            data, short, summary = _sleep_levels(rng, bed, int(sleep[t]), in_bed_extra)
            end = bed + dt.timedelta(minutes=in_bed)
            log_id += int(rng.integers(1_000, 9_000_000))
            sleep_rec.append({
                "logId": log_id, "dateOfSleep": d.isoformat(), "startTime": bed.strftime("%Y-%m-%d %H:%M:%S"),
                "endTime": end.strftime("%Y-%m-%dT%H:%M:%S.000"), "duration": in_bed * 60_000,
                "minutesToFallAsleep": 0, "minutesAsleep": int(sleep[t]), "minutesAwake": in_bed_extra,
                "minutesAfterWakeup": 0, "timeInBed": in_bed,
                "efficiency": int(np.clip(round(100 - in_bed_extra / 4 + rng.normal(0, 1)), 80, 100)),
                "type": "stages", "infoCode": 0,
                "levels": {"summary": summary, "data": data, "shortData": short}, "mainSleep": True,
            })
            score_rows.append({
                "timestamp": end.strftime("%Y-%m-%dT%H:%M:%SZ"), "sleep_log_entry_id": log_id,
                "overall_score": int(np.clip(round(78 + (sleep[t] - mu_sleep) / 6 + rng.normal(0, 3)), 40, 97)),
                "composition_score": int(rng.integers(14, 23)), "revitalization_score": int(rng.integers(13, 23)),
                "duration_score": int(np.clip(round(35 + (sleep[t] - 420) / 20), 10, 50)),
                "deep_sleep_in_minutes": summary["deep"]["minutes"], "resting_heart_rate": int(round(rhr[t])),
                "restlessness": float(rng.uniform(0.04, 0.12)),
            })
            if rng.random() < 0.04:  # an afternoon nap: classic, not main sleep
                nap_start = dt.datetime.combine(d, dt.time(14, int(rng.integers(0, 59))))
                nap_min = int(rng.integers(20, 75))
                log_id += 17
                sleep_rec.append({
                    "logId": log_id, "dateOfSleep": d.isoformat(), "startTime": nap_start.strftime("%Y-%m-%d %H:%M:%S"),
                    "endTime": (nap_start + dt.timedelta(minutes=nap_min)).strftime("%Y-%m-%dT%H:%M:%S.000"),
                    "duration": nap_min * 60_000, "minutesToFallAsleep": 0, "minutesAsleep": nap_min - 3,
                    "minutesAwake": 3, "minutesAfterWakeup": 0, "timeInBed": nap_min, "efficiency": 95,
                    "type": "classic", "infoCode": 0,
                    "levels": {"summary": {"restless": {"count": 1, "minutes": 2}, "awake": {"count": 1, "minutes": 1},
                                           "asleep": {"count": 0, "minutes": nap_min - 3}},
                               "data": [{"dateTime": nap_start.strftime("%Y-%m-%dT%H:%M:%S.000"), "level": "asleep",
                                         "seconds": (nap_min - 3) * 60},
                                        {"dateTime": (nap_start + dt.timedelta(minutes=nap_min - 3)).strftime(
                                            "%Y-%m-%dT%H:%M:%S.000"), "level": "restless", "seconds": 180}]},
                    "mainSleep": False,
                })
            # Exercise sessions (Health-LLM takes steps/calories from these).
            n_ex = int(rng.choice([0, 1, 1, 2, 2, 3]))
            day_ex_steps = 0
            for start_h in sorted(rng.choice(np.arange(7, 21), size=n_ex, replace=False)):
                pick = int(rng.choice(len(ACTIVITIES), p=[0.55, 0.2, 0.1, 0.08, 0.07]))
                name, tid, has_steps, rate, kcal = ACTIVITIES[pick]
                start = dt.datetime.combine(d, dt.time(int(start_h), int(rng.integers(0, 60)),
                                                       int(rng.integers(0, 60))))
                log_id += int(rng.integers(1_000, 90_000))
                rec, st = _exercise(rng, log_id, start, name, tid, has_steps, rate, kcal, mu_rhr)
                ex_rec.append(rec)
                day_ex_steps += st
            if u in minute_step_users:
                total = max(int(steps_total[t]), day_ex_steps)
                wake_from = (end.hour * 60 + end.minute) if end.date() == d else 420
                minutes = np.arange(wake_from, 23 * 60 + int(rng.integers(0, 59)))
                recorded = minutes[rng.random(minutes.size) < 0.6]
                weights = rng.gamma(0.3, 1.0, recorded.size)
                counts = rng.multinomial(total, weights / weights.sum()) if recorded.size else []
                stamps = np.datetime64(d.isoformat(), "m") + recorded.astype("timedelta64[m]")
                minute_steps.append((stamps, np.asarray(counts, dtype=int)))
        _dump_json(fit / "exercise.json", ex_rec)
        _dump_json(fit / "sleep.json", sleep_rec)
        pd.DataFrame(score_rows).to_csv(fit / "sleep_score.csv", index=False)
        if u not in no_rhr_users:
            _dump_json(fit / "resting_heart_rate.json", rhr_rec)
            _dump_json(fit / "lightly_active_minutes.json", mins["lightly"])
        _dump_json(fit / "very_active_minutes.json", mins["very"])
        _dump_json(fit / "moderately_active_minutes.json", mins["moderately"])
        _dump_json(fit / "sedentary_minutes.json", mins["sedentary"])
        if u in minute_step_users:
            _write_minute_steps(fit / "steps.json", minute_steps)
    _write_overview(out_dir / "participant-overview.xlsx", overview, rng)


def _write_minute_steps(path: Path, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """steps.json as the Fitbit export writes it (string values), built vectorised: ~10^5 records."""
    if parts:
        stamps = np.char.replace(np.datetime_as_string(np.concatenate([p[0] for p in parts]), unit="s"), "T", " ")
        counts = np.concatenate([p[1] for p in parts]).astype(str)
        body = ", ".join(f'{{"dateTime": "{t}", "value": "{c}"}}'
                         for t, c in zip(stamps.tolist(), counts.tolist(), strict=True))
    else:
        body = ""
    path.write_text(f"[{body}]", encoding="utf-8")


def _write_overview(path: Path, rows, rng) -> None:
    """participant-overview.xlsx with the real two-row header (group titles on row 1, names on row 2)."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws.append([None, None, None, None, None, None, "1st 5km run", None, None, "Stride length from fitbit", None])
    ws.append(["Participant ID", "Age", "Height", "Gender", "A or B person", "Max heart rate", "Date", "Minutes",
               "Seconds", "Stride walk", "Stride run"])
    for pid, age, height, gender, ab, max_hr in rows:
        run_day = dt.datetime(2019, 11, 15) + dt.timedelta(days=int(rng.integers(0, 50)))
        ws.append([pid, age, height, gender, ab, max_hr, run_day, int(rng.integers(18, 40)), int(rng.integers(0, 60)),
                   f"{rng.uniform(66, 81):.1f}", f"{rng.uniform(88, 125):.1f}"])
    fixed = dt.datetime(2020, 1, 1)
    wb.properties.created = fixed
    wb.properties.modified = fixed
    wb.save(path)
    normalise_zip(path)


def normalise_zip(path: Path) -> None:
    """Rewrite an xlsx (a zip) with fixed entry timestamps and core.xml dates, so same seed = same bytes."""
    import re
    import zipfile

    with zipfile.ZipFile(path) as zin:
        entries = [(i.filename, zin.read(i.filename)) for i in zin.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in entries:
            if name == "docProps/core.xml":
                data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b"2020-01-01T00:00:00Z", data)
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, data)
