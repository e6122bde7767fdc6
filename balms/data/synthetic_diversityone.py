"""Synthetic DiversityOne site written in our reading of the published layout (see balms.data.diversityone).

All file and column names come from the reader's constants, so writer and reader cannot drift apart.

Planted relation (see `PLANTED`): evening mood is lower after days with less physical activity than the
person's own usual, and after nights with long screen use between 00:00 and 06:00 ("poor nights").
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from balms.data import diversityone as d1

PLANTED = (
    "DiversityOne (synthetic): each participant has a usual activity level (phone-accelerometer active "
    "minutes) and a usual mood. Evening mood (recoded 1-5, higher = better) = the participant's usual "
    "mood + 0.7 x (active minutes over the 3 days before, relative to their own usual, in their own "
    "standard deviations) - 0.5 x (number of poor nights among those 3 days; a poor night = long "
    "screen use between 00:00 and 06:00, visible as night_screen_min) + noise (sd 0.3), rounded and "
    "clipped to 1-5; the file stores it reverse-coded as A6a = 6 - mood. Low activity and a few poor "
    "nights lower mood. Other phone channels carry no planted signal."
)

START = dt.date(2020, 11, 16)  # the Ulaanbaatar collection ran 2020-11-16 .. 2020-12-11
ACTIVITIES = ["Sleeping", "Studying", "Lecture", "Eating", "Social media", "Walking", "Working", "Shopping",
              "Resting", "Sport", "Housework", "Hanging out"]
LOCATIONS = ["Home", "University", "Library", "Relatives' home", "Shop", "Workplace", "Street", "Cafe"]


def write_diversityone(out_dir: Path, rng: np.random.Generator, n_users: int, n_days: int) -> None:
    site = out_dir / d1.DEFAULT_SITE
    (site / d1.TIMEDIARIES).parent.mkdir(parents=True, exist_ok=True)
    dates = [START + dt.timedelta(days=i) for i in range(n_days)]
    weekend = np.array([d.weekday() >= 5 for d in dates])
    diaries = []
    sensor_rows: dict[str, list[dict]] = {s: [] for s in d1.SENSORS}
    no_gyro = set(rng.choice(n_users, size=min(2, n_users), replace=False).tolist())
    for u in range(n_users):
        uid = f"mn{u + 1:03d}"
        mu_act = rng.lognormal(np.log(95), 0.35)
        sd_act = 0.3 * mu_act
        p_poor = rng.uniform(0.08, 0.3)
        base_mood = rng.normal(3.6, 0.3)
        p_answer = rng.uniform(0.55, 0.9)
        z = np.empty(n_days)
        z[0] = rng.normal()
        for i in range(1, n_days):
            z[i] = 0.4 * z[i - 1] + np.sqrt(1 - 0.16) * rng.normal()
        act = np.clip(mu_act + sd_act * z - np.where(weekend, 0.15 * mu_act, 0), 5, None)
        poor = rng.random(n_days) < p_poor  # poor night = early hours of that date
        phone_day = rng.random(n_days) > 0.05
        for _ in range(int(rng.integers(0, 2))):
            s, ln = int(rng.integers(0, max(1, n_days - 4))), int(rng.integers(2, 5))
            phone_day[s : s + ln] = False
        diary_day = rng.random(n_days) > 0.1
        # Planted mood.
        act_z = np.where(phone_day, (act - mu_act * (1 - 0.15 * 2 / 7)) / sd_act, np.nan)
        poor_seen = np.where(phone_day, poor, False)
        mood = np.zeros(n_days)
        for t in range(n_days):
            lo = max(0, t - 3)
            a3 = np.nanmean(act_z[lo:t]) if t > 0 and np.isfinite(act_z[lo:t]).any() else 0.0
            n_poor = int(poor_seen[lo:t].sum())
            mood[t] = np.clip(np.round(base_mood + 0.7 * a3 - 0.5 * n_poor + rng.normal(0, 0.3)), 1, 5)
        for t, d in enumerate(dates):
            base = dt.datetime.combine(d, dt.time(0))
            # --- time diary: a prompt every 30 min from 08:00 to 23:30 ---
            for k in range(16, 48):
                inst = base + dt.timedelta(minutes=30 * k)
                answered = diary_day[t] and rng.random() < p_answer
                if answered:
                    ans = inst + dt.timedelta(seconds=int(rng.integers(20, 1200)))
                    m_good = mood[t] if k >= 2 * d1.EVENING_FROM_HOUR else np.clip(mood[t] + rng.integers(-1, 2), 1, 5)
                    if k >= 2 * d1.EVENING_FROM_HOUR and rng.random() < 0.15:
                        m_good = np.clip(m_good + rng.choice([-1, 1]), 1, 5)  # earlier evening answers may differ
                    if k == 47:
                        m_good = mood[t]
                    diaries.append({d1.DIARY_USER: uid, d1.DIARY_INSTANCE: inst, d1.DIARY_ANSWER: ans,
                                    d1.DIARY_TAG: "timediary", d1.DIARY_ACTIVITY: str(rng.choice(ACTIVITIES)),
                                    d1.DIARY_LOCATION: str(rng.choice(LOCATIONS)), d1.DIARY_MOOD: float(6 - m_good)})
                else:
                    diaries.append({d1.DIARY_USER: uid, d1.DIARY_INSTANCE: inst, d1.DIARY_ANSWER: pd.NaT,
                                    d1.DIARY_TAG: "timediary", d1.DIARY_ACTIVITY: None, d1.DIARY_LOCATION: None,
                                    d1.DIARY_MOOD: np.nan})
            if not phone_day[t]:
                continue
            # --- 30-minute sensor slots ---
            night_p = 0.9 if poor[t] else 0.12
            present = np.array([rng.random() < (night_p if k < 12 else 0.55 if k < 14 else 0.62) for k in range(48)])
            day_slots = np.flatnonzero(present & (np.arange(48) >= 14))
            w = rng.gamma(0.6, 1.0, day_slots.size)
            moving = np.minimum(30, act[t] * w / w.sum()) if day_slots.size else np.array([])
            battery = 100.0
            for k in np.flatnonzero(present):
                ts = (base + dt.timedelta(minutes=30 * int(k))).strftime("%Y-%m-%d %H:%M:%S")
                night = k < 12
                mv = float(moving[np.searchsorted(day_slots, k)]) if not night else float(rng.uniform(0, 1))
                scr = float(rng.uniform(8, 28)) if (night and poor[t]) else float(rng.uniform(0, 3) if night
                                                                                  else rng.uniform(0, 14))
                battery = max(5.0, battery - rng.uniform(1, 4))
                vals = {
                    "accelerometer": {"moving_min": round(mv, 1)},
                    "gyroscope": {"rotation_mean": round(0.05 + mv / 30 * rng.uniform(0.3, 0.8), 3)},
                    "wifi": {"n_networks": int(rng.poisson(3 if night else 9))},
                    "bluetooth": {"n_devices": int(rng.poisson(1 if night else 4))},
                    "location": {"distance_m": round(mv * rng.uniform(40, 90), 1)},
                    "screen": {"screen_on_min": round(scr, 1), "n_unlocks": int(rng.poisson(1 + scr / 3))},
                    "notifications": {"n_notifications": int(rng.poisson(1 if night else 6))},
                    "battery": {"battery_mean": round(battery, 1)},
                }
                for sensor, v in vals.items():
                    if sensor == "gyroscope" and u in no_gyro:
                        continue
                    sensor_rows[sensor].append({d1.SLOT_USER: uid, d1.SLOT_TIME: ts, **v})
    td = pd.DataFrame(diaries)
    td[d1.DIARY_INSTANCE] = pd.to_datetime(td[d1.DIARY_INSTANCE])
    td[d1.DIARY_ANSWER] = pd.to_datetime(td[d1.DIARY_ANSWER])
    td.to_parquet(site / d1.TIMEDIARIES, index=False)
    for sensor, rows in sensor_rows.items():
        folder = site / d1.SENSORS_DIR / sensor
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(folder / f"{sensor}_30min.csv", index=False)
