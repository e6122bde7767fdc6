"""Synthetic GLOBEM cohort written in the ORIGINAL GLOBEM layout (one INS-W_1-style cohort folder).

FeatureData/<sensor>.csv holds `pid,date` and RAPIDS-style columns `f_<sensor>:<feature>[_dis|_norm]:<segment>`
in the real column order (segments alphabetical; per segment the raw features, then `_dis`, then `_norm`).
Only a representative subset of features is written (those the paper's case study prompts show, plus a
few neighbours); sleep features, as in the real files, are filled for `allday` only.

Planted relation (see `PLANTED`): weekly `feel_anxious` (0-3) rises with short sleep, long screen-unlock
time and low location entropy over the 7 days before the survey, each relative to the person's baseline.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

PLANTED = (
    "GLOBEM (synthetic): each participant has baselines for sleep, screen time and location entropy. "
    "The weekly PHQ-4 anxiety item feel_anxious (0-3) = the participant's usual level "
    "+ 0.6 x (sleep shortfall over the 7 days before the survey, in their own standard deviations) "
    "+ 0.5 x (screen-unlock time above their baseline over those 7 days) "
    "+ 0.45 x (location entropy below their baseline over those 7 days) + noise (sd 0.25), rounded and "
    "clipped to 0-3. Short sleep, long screen time and staying in few places raise anxiety. Steps, calls, "
    "Bluetooth and Wi-Fi follow weekly rhythms but carry no planted signal."
)

START = dt.date(2018, 4, 2)
SEGMENTS = ["14dhist", "7dhist", "afternoon", "allday", "evening", "morning", "night", "weekday", "weekend"]
DAY_SEGMENTS = ["morning", "afternoon", "evening", "night"]  # RAPIDS: 6-12, 12-18, 18-24, 0-6
PREFIX = {"steps": "f_steps", "sleep": "f_slp", "screen": "f_screen", "location": "f_loc", "call": "f_call",
          "bluetooth": "f_blue", "wifi": "f_wifi"}
# sensor -> features written, in the real files' column order. Kind: "sum" = additive over segments,
# "mean" = intensity-like (allday is a weighted mean), "allday" = only the allday segment is filled.
FEATURES: dict[str, list[tuple[str, str]]] = {
    "steps": [("fitbit_steps_summary_rapids_maxsumsteps", "allday"), ("fitbit_steps_intraday_rapids_sumsteps", "sum"),
              ("fitbit_steps_intraday_rapids_maxsteps", "max")],
    "sleep": [("fitbit_sleep_summary_rapids_sumdurationasleepmain", "allday"),
              ("fitbit_sleep_summary_rapids_sumdurationinbedmain", "allday"),
              ("fitbit_sleep_summary_rapids_avgefficiencymain", "allday")],
    "screen": [("phone_screen_rapids_countepisodeunlock", "sum"), ("phone_screen_rapids_sumdurationunlock", "sum")],
    "location": [("phone_locations_doryab_locationentropy", "mean"), ("phone_locations_doryab_timeathome", "sum")],
    "call": [("phone_calls_rapids_incoming_count", "sum"), ("phone_calls_rapids_outgoing_count", "sum")],
    "bluetooth": [("phone_bluetooth_rapids_countscans", "sum"), ("phone_bluetooth_rapids_uniquedevices", "max")],
    "wifi": [("phone_wifi_connected_rapids_countscans", "sum"), ("phone_wifi_connected_rapids_uniquedevices", "max")],
}
SEG_SHARE = {"morning": 0.25, "afternoon": 0.35, "evening": 0.32, "night": 0.08}


def _ar1(rng, n, phi):
    e = rng.normal(size=n)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = phi * x[i - 1] + np.sqrt(1 - phi**2) * e[i]
    return x


def write_globem(out_dir: Path, rng: np.random.Generator, n_users: int, n_days: int) -> None:
    cohort = out_dir / "INS-W-synth_1"
    for sub in ("FeatureData", "SurveyData", "ParticipantsInfoData"):
        (cohort / sub).mkdir(parents=True, exist_ok=True)
    pids = [f"INS-W_{901 + u}" for u in range(n_users)]
    dates = pd.date_range(START, periods=n_days, freq="D")
    weekday = dates.day_of_week.to_numpy()
    weekend = weekday >= 5
    raw: dict[str, list[pd.DataFrame]] = {s: [] for s in FEATURES}
    weekly, endterm, ema, platform = [], [], [], []
    for pid in pids:
        ios = rng.random() < 0.5
        platform.append({"pid": pid, "platform": "ios" if ios else "android"})
        # Person baselines (between-person differences) and daily AR(1) deviations.
        mu_sleep, sd_sleep = rng.normal(420, 35), rng.uniform(35, 60)
        mu_screen, sd_screen = rng.lognormal(np.log(230), 0.35), None
        mu_ent, sd_ent = rng.uniform(0.5, 1.3), rng.uniform(0.15, 0.3)
        mu_steps = rng.lognormal(np.log(8500), 0.35)
        base_anx = rng.normal(1.3, 0.35)
        z_sleep, z_screen, z_ent = _ar1(rng, n_days, 0.4), _ar1(rng, n_days, 0.4), _ar1(rng, n_days, 0.4)
        sd_screen = 0.3 * mu_screen
        sleep = np.clip(mu_sleep + sd_sleep * z_sleep + np.where(weekend, 30, 0), 150, 720)
        screen = np.clip(mu_screen + sd_screen * z_screen, 10, None)
        ent = np.clip(mu_ent + sd_ent * z_ent - np.where(weekend, 0.1, 0), 0, 2.5)
        steps = mu_steps * np.where(weekday == 6, 0.7, 1.0) * rng.lognormal(0, 0.35, n_days)
        # Missingness: phone and Fitbit each lose random days and runs of days.
        phone_ok = rng.random(n_days) > 0.06
        fit_ok = rng.random(n_days) > 0.1
        for _ in range(int(rng.integers(0, 3))):
            s, ln = int(rng.integers(0, n_days - 5)), int(rng.integers(3, 9))
            (phone_ok if rng.random() < 0.5 else fit_ok)[s : s + ln] = False
        sleep_ok = fit_ok & (rng.random(n_days) > 0.12)  # tracker not worn at night some days
        # --- daily values per segment ---
        seg_rows = {s: {} for s in FEATURES}
        n = n_days

        def split(total, jitter=0.25, n=n):  # called in this iteration only
            shares = np.array([SEG_SHARE[s] for s in DAY_SEGMENTS])[:, None] * rng.lognormal(0, jitter, (4, n))
            shares /= shares.sum(0, keepdims=True)
            return {s: total * shares[i] for i, s in enumerate(DAY_SEGMENTS)}

        st = split(steps)
        seg_rows["steps"]["fitbit_steps_intraday_rapids_sumsteps"] = {**{k: np.round(v) for k, v in st.items()},
                                                                      "allday": np.round(steps)}
        seg_rows["steps"]["fitbit_steps_intraday_rapids_maxsteps"] = {
            **{k: np.round(np.minimum(180, v / 25 + 20)) for k, v in st.items()},
            "allday": np.round(np.minimum(190, steps / 80 + 40))}
        seg_rows["steps"]["fitbit_steps_summary_rapids_maxsumsteps"] = {"allday": np.round(steps)}
        seg_rows["sleep"]["fitbit_sleep_summary_rapids_sumdurationasleepmain"] = {"allday": np.round(sleep)}
        eff = np.clip(np.round(94 - 0.02 * (mu_sleep - sleep) + rng.normal(0, 2, n)), 80, 99)
        seg_rows["sleep"]["fitbit_sleep_summary_rapids_avgefficiencymain"] = {"allday": eff}
        seg_rows["sleep"]["fitbit_sleep_summary_rapids_sumdurationinbedmain"] = {"allday": np.round(sleep * 100 / eff)}
        sc = split(screen, 0.4)
        seg_rows["screen"]["phone_screen_rapids_sumdurationunlock"] = {**{k: v.round(3) for k, v in sc.items()},
                                                                      "allday": screen.round(3)}
        unl = {k: np.round(v / rng.uniform(2.5, 4.0)) for k, v in sc.items()}
        seg_rows["screen"]["phone_screen_rapids_countepisodeunlock"] = {**unl, "allday": sum(unl.values())}
        ent_seg = {k: np.clip(ent * f + rng.normal(0, 0.1, n), 0, None).round(6)
                   for k, f in zip(DAY_SEGMENTS, (0.7, 0.9, 0.8, 0.1), strict=True)}
        seg_rows["location"]["phone_locations_doryab_locationentropy"] = {**ent_seg, "allday": ent.round(6)}
        home = np.clip(1440 - 600 * ent / 1.3 + rng.normal(0, 60, n), 0, 1440)
        seg_rows["location"]["phone_locations_doryab_timeathome"] = {
            **{k: np.clip(v, 0, 360).round(3) for k, v in split(home, 0.2).items()}, "allday": home.round(3)}
        for kind, lam in (("incoming", 1.2), ("outgoing", 1.6)):
            per = {k: rng.poisson(lam * SEG_SHARE[k], n).astype(float) for k in DAY_SEGMENTS}
            seg_rows["call"][f"phone_calls_rapids_{kind}_count"] = {**per, "allday": sum(per.values())}
        bt = {k: rng.poisson(rng.uniform(3, 25) * SEG_SHARE[k] * 3, n).astype(float) + 1 for k in DAY_SEGMENTS}
        seg_rows["bluetooth"]["phone_bluetooth_rapids_uniquedevices"] = {**bt,
                                                                        "allday": np.round(sum(bt.values()) * 0.8)}
        seg_rows["bluetooth"]["phone_bluetooth_rapids_countscans"] = {k: v * 9 for k, v in
                                                                     {**bt, "allday": sum(bt.values())}.items()}
        wf = {k: rng.poisson(180 * SEG_SHARE[k] * 4, n).astype(float) for k in DAY_SEGMENTS}
        seg_rows["wifi"]["phone_wifi_connected_rapids_countscans"] = {**wf, "allday": sum(wf.values())}
        seg_rows["wifi"]["phone_wifi_connected_rapids_uniquedevices"] = {
            **{k: np.round(np.sqrt(v) / 2) + 1 for k, v in wf.items()},
            "allday": np.round(np.sqrt(sum(wf.values()))) + 1}

        masks = {"steps": fit_ok, "sleep": sleep_ok, "screen": phone_ok, "location": phone_ok & (rng.random(n) > 0.05),
                 "call": phone_ok & (rng.random(n) > 0.45), "bluetooth": phone_ok & (rng.random(n) > 0.1),
                 "wifi": phone_ok & (np.zeros(n, bool) if ios else rng.random(n) > 0.1)}  # iOS: no Wi-Fi scans
        for sensor, feats in seg_rows.items():
            df = pd.DataFrame({"pid": pid, "date": dates.strftime("%Y-%m-%d")})
            for feat, _kind in FEATURES[sensor]:
                by_seg = feats[feat]
                for seg in SEGMENTS:
                    col = f"{PREFIX[sensor]}:{feat}:{seg}"
                    if seg in by_seg:
                        v = np.where(masks[sensor], by_seg[seg], np.nan)
                    elif seg in ("14dhist", "7dhist") and "allday" in by_seg:
                        d = pd.Series(np.where(masks[sensor], by_seg["allday"], np.nan))
                        v = d.rolling(int(seg[:-5]), min_periods=1).sum().round(3).to_numpy()
                    elif seg in ("weekday", "weekend") and "allday" in by_seg:
                        on_days = masks[sensor] & (weekend == (seg == "weekend"))
                        d = pd.Series(np.where(on_days, by_seg["allday"], np.nan))
                        v = d.rolling(7, min_periods=1).mean().ffill().round(3).to_numpy()
                    else:
                        v = np.full(n, np.nan)
                    df[col] = v
            raw[sensor].append(df)
        # --- planted label: weekly feel_anxious from the 7 days before the survey ---
        d_sleep = np.where(sleep_ok, (mu_sleep + 8.6 - sleep) / sd_sleep, np.nan)  # 8.6 = mean weekend bonus
        d_screen = np.where(phone_ok, (screen - mu_screen) / sd_screen, np.nan)
        d_ent = np.where(phone_ok, (mu_ent - 0.03 - ent) / sd_ent, np.nan)
        first = int(rng.integers(14, 21))
        survey_days = list(range(first, n_days - 2, 7))
        for t in survey_days:
            t = min(n_days - 1, t + int(rng.integers(-1, 2)))
            w = slice(t - 7, t)

            def m(a, w=w):  # called in this iteration only
                a = a[w]
                return float(np.nanmean(a)) if np.isfinite(a).any() else 0.0

            cont = base_anx + 0.6 * m(d_sleep) + 0.5 * m(d_screen) + 0.45 * m(d_ent) + rng.normal(0, 0.25)
            if rng.random() < 0.08:  # skipped survey: row present, item missing (as in the release)
                anx = dep_item = np.nan
            else:
                anx = float(np.clip(np.round(cont), 0, 3))
                dep_item = float(np.clip(np.round(0.6 * cont + rng.normal(0, 0.6)), 0, 3))
            weekly.append({"pid": pid, "date": dates[t].strftime("%Y-%m-%d"), "feel_anxious": anx,
                           "feel_depressed": dep_item, "BDI2": np.nan, "dep": bool(cont > 1.8)})
            ema.append({"pid": pid, "date": dates[t].strftime("%Y-%m-%d"),
                        "negative_affect_EMA": float(np.clip(np.round(3 * cont + rng.normal(0, 2)), 0, 20))})
        bdi = float(np.clip(np.round(8 * base_anx + rng.normal(0, 4)), 0, 63))
        end_date = dates[-1].strftime("%Y-%m-%d")
        weekly.append({"pid": pid, "date": end_date, "feel_anxious": np.nan, "feel_depressed": np.nan, "BDI2": bdi,
                       "dep": bool(bdi >= 14)})
        endterm.append({"pid": pid, "date": end_date, "BDI2": bdi, "dep": bool(bdi >= 14)})

    for sensor, frames in raw.items():
        df = pd.concat(frames, ignore_index=True)
        feats = [f for f, _ in FEATURES[sensor]]
        raw_cols = [f"{PREFIX[sensor]}:{f}:{seg}" for seg in SEGMENTS for f in feats]
        g = df.groupby("pid", sort=False)[raw_cols]

        def per_row(q, g=g, df=df):  # the per-person quantile, broadcast back to the rows
            return g.quantile(q).reindex(df["pid"]).set_axis(df.index)

        med, q1, q3, t1, t2 = (per_row(q) for q in (0.5, 0.25, 0.75, 1 / 3, 2 / 3))
        vals = df[raw_cols]
        iqr = (q3 - q1).where(lambda x: x > 0, 1.0)
        norm = ((vals - med) / iqr / 2).round(6)
        dis = pd.DataFrame(np.where(vals.isna(), None, np.where(vals <= t1, "l", np.where(vals <= t2, "m", "h"))),
                           columns=raw_cols, index=df.index)
        out = {"pid": df["pid"], "date": df["date"]}
        for seg in SEGMENTS:  # real order: per segment raw features, then _dis, then _norm
            for f in feats:
                out[f"{PREFIX[sensor]}:{f}:{seg}"] = vals[f"{PREFIX[sensor]}:{f}:{seg}"]
            for f in feats:
                out[f"{PREFIX[sensor]}:{f}_dis:{seg}"] = dis[f"{PREFIX[sensor]}:{f}:{seg}"]
            for f in feats:
                out[f"{PREFIX[sensor]}:{f}_norm:{seg}"] = norm[f"{PREFIX[sensor]}:{f}:{seg}"]
        pd.DataFrame(out).to_csv(cohort / "FeatureData" / f"{sensor}.csv", index=False)
    pd.DataFrame(weekly).sort_values(["pid", "date"], kind="stable").to_csv(
        cohort / "SurveyData" / "dep_weekly.csv", index=False)
    pd.DataFrame(endterm).to_csv(cohort / "SurveyData" / "dep_endterm.csv", index=False)
    pd.DataFrame(ema).to_csv(cohort / "SurveyData" / "ema.csv", index=False)
    pd.DataFrame(platform).to_csv(cohort / "ParticipantsInfoData" / "platform.csv", index=False)
