"""The schema card of the improved PHIA prompt: what the model is told about its DataFrames."""

from __future__ import annotations

import pandas as pd


def _datetime_column(df: pd.DataFrame) -> pd.Series | None:
    if isinstance(df.index, pd.DatetimeIndex):
        return df.index.to_series()
    for c in df.columns:
        if pd.api.types.is_datetime64_any_dtype(df[c]):
            return df[c]
    for c in df.columns:
        if str(c).lower() in ("date", "day", "datetime", "timestamp", "time", "start", "start_time"):
            parsed = pd.to_datetime(df[c], errors="coerce")
            if parsed.notna().mean() > 0.9:
                return parsed
    return None


def _fmt(x: float) -> str:
    return "nan" if pd.isna(x) else f"{x:.4g}"


def schema_card(frames: dict[str, pd.DataFrame], target_desc: str | None = None,
                units: dict[str, str] | None = None, max_columns: int = 40) -> str:
    """What the improved prompt tells the model about its data: per frame the columns, dtypes, units,
    granularity (daily vs sub-day rows per day) and the user's own baseline statistics, so thresholds can be
    derived from this user (F4) and sub-day rows are not mistaken for days (F5)."""
    units = units or {}
    lines: list[str] = []
    if target_desc:
        lines.append(f"Target: {target_desc}")
    for name, df in frames.items():
        lines.append(f"DataFrame `{name}`: {len(df)} rows x {df.shape[1]} columns")
        ts = _datetime_column(df)
        if ts is not None and ts.notna().any():
            days = ts.dt.normalize()
            n_days = int(days.nunique())
            per_day = len(ts.dropna()) / max(n_days, 1)
            gran = ("daily (one row per day)" if per_day <= 1.0001 else
                    f"sub-day (about {per_day:.1f} rows per day; aggregate per day before comparing days)")
            lines.append(f"  time span: {ts.min()} to {ts.max()} ({n_days} distinct days); granularity: {gran}")
        else:
            lines.append("  granularity: unknown (no date/time column)")
        lines.append("  columns (dtype, unit, missing; user's baseline mean / median / std / min / max):")
        for col in list(df.columns)[:max_columns]:
            s = df[col]
            unit = units.get(f"{name}.{col}", units.get(str(col)))
            miss = f"{s.isna().mean() * 100:.0f}% missing"
            desc = f"    - {col} ({s.dtype}" + (f", {unit}" if unit else "") + f", {miss})"
            if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s) and s.notna().any():
                v = s.astype(float)
                desc += (f": mean {_fmt(v.mean())}, median {_fmt(v.median())}, std {_fmt(v.std())}, "
                         f"min {_fmt(v.min())}, max {_fmt(v.max())}")
            lines.append(desc)
        if df.shape[1] > max_columns:
            lines.append(f"    ... {df.shape[1] - max_columns} more columns (see `{name}.columns`)")
    return "\n".join(lines)
