"""Deterministic fact-check of a rationale's numeric claims against its window (no LLM).

Why: an LLM judge can be fooled by confident numbers; here every number a rationale ties to a channel
is looked up in the window the agent saw. A *claim* is one statement about one channel: a value, a
list of values (paired with a list of days: "on days 3, 10, and 11 ... (139, 224, and NaN
respectively)"), a range ("254-334 seconds on days 11-13", "between X and Y"), an average, a relative
change ("by 20%", unverifiable), or a from->to statement ("decreased from 1.79 on day 3 to 0.85 on day
14"). Day references: "day 3", "the 3rd day", "days 11-13", "days 1 to 5", "days 3 and 10", "last/first
3 days", "first/second/last week", "yesterday", weekdays and ISO dates (with the window's dates).
Channel words map to window channels by their labels and an alias table (sleep -> sleep minutes,
screen time -> screen unlock duration, physical activity -> steps, ...), with the unit written after
a number (%, minutes, hours, seconds, steps...) used to pick or convert (hours -> minutes).

Each value is matched "within the rounding shown": it agrees with the displayed window value at the
coarser of the two precisions, or equals the window value truncated to the claim's precision (models
both round and truncate); then it is checked on the cited day(s).

Claim status, worst first: unverifiable (no channel, or a day reference that cannot be resolved),
value_not_found, wrong_day (the value exists, but on other days: `found_days` says which),
wrong_direction (a from->to whose stated direction contradicts its end points), supported.
`n_trends` counts multi-day trends (end points two or more days apart: the paper's "multi-day trend
cited"); other from->to statements (a day-to-day change) are `n_changes`.
Day numbering as in `balms.data.render`: day 1 is the oldest day of the window, day n the newest.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
from pydantic import BaseModel, Field

Status = Literal["supported", "wrong_day", "value_not_found", "wrong_direction", "unverifiable"]
_SEVERITY = {"supported": 0, "wrong_direction": 1, "wrong_day": 2, "value_not_found": 3, "unverifiable": 4}


# ---------------------------------------------------------------- report models


class ValueCheck(BaseModel):
    value: float | None  # None = the claim says the value is missing (NaN)
    text: str
    cited_days: list[int] = Field(default_factory=list)  # empty = no day cited
    found_days: list[int] = Field(default_factory=list)  # days of the channel where the value is shown
    status: Status = "supported"
    role: str = "value"  # value | low | high | from | to | aggregate
    other_channels: dict[str, list[int]] = Field(default_factory=dict)  # value_not_found: where it IS shown


class ClaimCheck(BaseModel):
    text: str  # the clause the claim was read from
    kind: Literal["value", "list", "range", "trend", "aggregate", "relative"]
    channel: str | None  # window channel label the claim was matched to
    mention: str = ""  # the words that named the channel
    values: list[ValueCheck] = Field(default_factory=list)
    status: Status = "supported"
    day_cited: bool = False
    direction: Literal["increase", "decrease"] | None = None  # trends: the stated direction
    trend_days: tuple[int, int] | None = None  # trends: resolved (start, end) days
    multiday: bool = False  # trends spanning more than two consecutive days
    note: str = ""


class GroundingReport(BaseModel):
    n_claims: int = 0
    supported: int = 0
    wrong_day: int = 0
    value_not_found: int = 0
    wrong_direction: int = 0
    unverifiable: int = 0
    n_day_cited: int = 0  # claims that cite a day
    correct_day: int = 0  # claims that cite a day and are supported
    value_match: int = 0  # claims whose values all exist in the channel (any day)
    wrong_channel: int = 0  # value_not_found claims whose missing values are all shown in another channel
    n_trends: int = 0  # multi-day trends: from->to end points more than one day apart (the paper's count)
    n_changes: int = 0  # other from->to statements (day-to-day changes, or end days unresolved)
    claims: list[ClaimCheck] = Field(default_factory=list)

    def summary(self) -> dict:
        return self.model_dump(exclude={"claims"})


# ---------------------------------------------------------------- window adapter


@dataclass
class _Chan:
    label: str
    unit: str
    shown: list[str]  # the value of each day as displayed ("NaN" = missing)
    aliases: set[str] = field(default_factory=set)


def _shown_from_json(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "NaN"
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return repr(float(v))  # the number as printed in the case file (402.0 keeps one decimal)


def _numbered(window):
    """A memory agent's days view (`Window.shown["kind"] == "days"`: retrieved days + the query day) on the
    look-back window's calendar, NaN on the days its prompt did not hold: "day 14" then means the day the
    agent's "Day 14" label named, and a claim about a day it never saw finds no value. Retrieved days before
    the window (memory="history") have no number on that calendar and are left out."""
    import dataclasses

    if (window.shown or {}).get("kind") != "days":
        return window
    s = window.sample
    idx = pd.date_range(pd.Timestamp(s.window_start), pd.Timestamp(s.window_end), freq="D")
    return dataclasses.replace(window, daily=window.daily.reindex(idx))


def _channels_of(window) -> tuple[list[_Chan], list[dt.date] | None]:
    from balms.data.render import channel_values, format_value
    from balms.data.schema import Window

    if isinstance(window, Window):
        window = _numbered(window)
        chans = [
            _Chan(c.label, c.unit, [format_value(v, c.decimals) for v in channel_values(window, c)],
                  {c.label.lower(), c.name.replace("_", " ").lower()})
            for c in window.channels
        ]
        return chans, [pd.Timestamp(d).date() for d in window.daily.index]
    if isinstance(window, Mapping):
        chans = []
        for label, spec in window.items():
            if not isinstance(spec, Mapping) or "values" not in spec:
                raise ValueError(f"window channel {label!r}: expected {{'unit': ..., 'values': [...]}}, "
                                 f"got {spec!r:.80}")
            chans.append(_Chan(str(label), str(spec.get("unit") or ""), [_shown_from_json(v) for v in spec["values"]],
                               {str(label).lower()}))
        return chans, None
    raise TypeError(f"window must be a Window or a {{label: {{unit, values}}}} dict, not {type(window).__name__}")


# Channel concepts: free-text aliases -> predicate on a channel's (label + unit) text.
_CONCEPTS: list[tuple[tuple[str, ...], Callable[[str], bool]]] = [
    (("sleep efficiency", "efficiency"), lambda s: "sleep" in s and "efficien" in s),
    (("sleep duration", "sleep minutes", "sleep time", "minutes asleep", "minutes of sleep", "time asleep",
      "total sleep", "sleep length", "sleep hours", "hours of sleep", "slept", "sleeping", "sleep"),
     lambda s: "sleep" in s and any(w in s for w in ("minute", "duration", "asleep", "hour", "time"))
     and "bed" not in s and "score" not in s and "efficien" not in s),
    (("time in bed", "in bed"), lambda s: "bed" in s),
    (("sleep score",), lambda s: "sleep" in s and "score" in s),
    (("screen unlock duration", "screen time", "screen unlock", "screen use", "screen usage", "screen",
      "phone use", "phone usage", "unlock duration", "unlocks"), lambda s: "screen" in s or "unlock" in s),
    (("steps", "step count", "step counts", "physical activity", "activity level", "walking", "step"),
     lambda s: "step" in s),
    (("location entropy", "entropy", "mobility", "location diversity", "movement"), lambda s: "entropy" in s),
    (("outgoing calls", "phone calls", "calls", "call"), lambda s: "call" in s),
    (("unique bt devices", "bluetooth devices", "bt devices", "bluetooth", "nearby devices", "devices"),
     lambda s: "bluetooth" in s or re.search(r"\bbt\b", s) is not None),
    (("wifi scans", "wifi", "wi-fi"), lambda s: "wifi" in s or "wi-fi" in s),
    (("resting heart rate", "heart rate", "resting hr", "rhr", "hr"), lambda s: "heart" in s),
    (("calories", "calorie", "kcal", "energy expenditure"), lambda s: "calor" in s),
    (("sedentary minutes", "sedentary time", "sedentary"), lambda s: "sedentary" in s),
    (("very active minutes", "very active"), lambda s: "very active" in s),
    (("moderately active minutes", "moderately active"), lambda s: "moderately active" in s),
    (("lightly active minutes", "lightly active", "light activity"), lambda s: "lightly active" in s),
]


def _alias_table(chans: list[_Chan]) -> dict[str, list[int]]:
    """alias -> candidate channel indices; exact labels win over concept aliases."""
    table: dict[str, list[int]] = {}
    for i, c in enumerate(chans):
        for a in c.aliases:
            table.setdefault(a, [])
            if i not in table[a]:
                table[a].append(i)
    for aliases, pred in _CONCEPTS:
        idx = [i for i, c in enumerate(chans) if pred(f"{c.label} {c.unit}".lower())]
        if not idx:
            continue
        for a in aliases:
            if a not in table:
                table[a] = list(idx)
    return table


# ---------------------------------------------------------------- units and matching

_UNIT_WORDS = {
    "%": "%", "percent": "%", "pct": "%",
    "minutes": "min", "minute": "min", "mins": "min", "min": "min",
    "hours": "h", "hour": "h", "hrs": "h", "hr": "h", "h": "h",
    "seconds": "s", "second": "s", "secs": "s", "sec": "s", "s": "s",
    "steps": "steps", "step": "steps", "bpm": "bpm", "beats": "bpm", "calls": "calls", "call": "calls",
    "devices": "devices", "device": "devices", "kcal": "kcal", "calories": "kcal", "cal": "kcal",
}
_TO_SECONDS = {"s": 1, "min": 60, "h": 3600}


def _norm_unit(u: str) -> str:
    u = (u or "").strip().lower()
    return _UNIT_WORDS.get(u, u)


def _unit_factor(claim_unit: str | None, chan_unit: str) -> float | None:
    """Multiplier turning a claim in `claim_unit` into the channel's unit; None if incompatible."""
    if not claim_unit:
        return 1.0
    cu, hu = _norm_unit(claim_unit), _norm_unit(chan_unit)
    if cu == hu or not hu:
        return 1.0 if cu == hu or cu not in ("%",) else None
    if cu in _TO_SECONDS and hu in _TO_SECONDS:
        return _TO_SECONDS[cu] / _TO_SECONDS[hu]
    return None


def _decimals(s: str) -> int:
    return len(s.split(".", 1)[1]) if "." in s else 0


def value_matches(claim: float, claim_decimals: int, shown: str, factor: float = 1.0) -> bool:
    """True when a claimed number agrees with a displayed window value within the rounding shown."""
    if shown == "NaN":
        return False
    v = float(shown)
    c = claim * factor
    d = min(claim_decimals, _decimals(shown))
    tol = max(0.5 * 10 ** (-d), 0.5 * 10 ** (-claim_decimals) * factor) + 1e-9
    if abs(c - v) <= tol:
        return True
    if factor == 1.0:  # truncation: 254 for 254.8
        scale = 10 ** claim_decimals
        return math.trunc(v * scale) / scale == claim
    return False


# ---------------------------------------------------------------- tokenising

_WORDNUM = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14}
_NUMW = r"(\d+|" + "|".join(_WORDNUM) + r")"
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_DASH = r"\s*(?:-|–|—)\s*"


@dataclass
class _Tok:
    kind: str  # "day" | "val" | "range"
    start: int
    end: int
    text: str
    days: list[int] | None = None  # day tokens: resolved days (None = unresolvable)
    day_kind: str = ""
    value: float | None = None  # val: the number, None for NaN
    decimals: int = 0
    hi: float | None = None  # range: upper end
    hi_decimals: int = 0
    unit: str | None = None
    aggregate: bool = False
    relative: bool = False


def _num(s: str) -> tuple[float, int]:
    s = s.replace(",", "")
    return float(s), _decimals(s)


def _to_int(w: str) -> int:
    return int(w) if w.isdigit() else _WORDNUM[w.lower()]


def _day_tokens(text: str, n: int, dates: list[dt.date] | None) -> list[_Tok]:
    toks: list[_Tok] = []
    taken: list[tuple[int, int]] = []

    def add(m, days, kind):
        if any(m.start() < e and s < m.end() for s, e in taken):
            return
        taken.append((m.start(), m.end()))
        toks.append(_Tok("day", m.start(), m.end(), m.group(0), days=days, day_kind=kind))

    low = text.lower()
    # ranges: "days 11-13", "day 11 - day 13", "days 1 to 5", "day 1 to day 5"
    for m in re.finditer(r"\bdays?\s+(\d+)" + _DASH + r"(?:day\s+)?(\d+)(?!\.?\d)", low):
        a, b = int(m.group(1)), int(m.group(2))
        add(m, list(range(a, b + 1)) if a <= b else None, "range")
    for m in re.finditer(r"\b(?:days\s+(\d+)\s+(?:to|through|until)\s+(?:day\s+)?(\d+)"
                         r"|day\s+(\d+)\s+(?:to|through|until)\s+day\s+(\d+))(?!\.?\d)", low):
        a, b = (int(x) for x in (m.group(1, 2) if m.group(1) else m.group(3, 4)))
        add(m, list(range(a, b + 1)) if a <= b else None, "range")
    # lists: "days 3, 10, and 11", "days 3 and 10"
    for m in re.finditer(r"\bdays\s+(\d+(?:\s*,\s*\d+)*(?:\s*,?\s*(?:and|&)\s*\d+))(?!\.?\d)", low):
        add(m, [int(x) for x in re.findall(r"\d+", m.group(1))], "list")
    # "last 3 days", "past three days", "first 4 days"
    for m in re.finditer(r"\b(?:the\s+)?(last|past|final|previous|recent|most recent|first|initial|opening)\s+"
                         + _NUMW + r"\s+days\b", low):
        k = _to_int(m.group(2))
        first = m.group(1) in ("first", "initial", "opening")
        add(m, list(range(1, min(k, n) + 1)) if first else list(range(max(1, n - k + 1), n + 1)), "relative")
    for m in re.finditer(r"\b(?:the\s+)?(first|second|third|last|final|past|previous)\s+week\b", low):
        w = m.group(1)
        rng = {"first": (1, 7), "second": (8, 14), "third": (15, 21)}.get(w, (max(1, n - 6), n))
        add(m, list(range(rng[0], min(rng[1], n) + 1)), "week")
    for m in re.finditer(r"\b(?:the\s+)?(?:last|final|most recent|latest)\s+day\b|\byesterday\b", low):
        add(m, [n], "relative")
    for m in re.finditer(r"\b(?:the\s+)?first\s+day\b", low):
        add(m, [1], "relative")
    for m in re.finditer(r"\b(\d+)(?:st|nd|rd|th)\s+day\b", low):
        add(m, [int(m.group(1))], "single")
    for m in re.finditer(r"\bday\s+(\d+)(?!\.?\d)", low):
        add(m, [int(m.group(1))], "single")
    for m in re.finditer(r"\b(\d{4}-\d{2}-\d{2})\b", low):
        d = dt.date.fromisoformat(m.group(1))
        add(m, ([dates.index(d) + 1] if d in dates else []) if dates else None, "date")
    for m in re.finditer(r"\b(?:on\s+)?(" + "|".join(_WEEKDAYS) + r")s?\b", low):
        wd = _WEEKDAYS.index(m.group(1))
        add(m, [i + 1 for i, d in enumerate(dates) if d.weekday() == wd] if dates else None, "weekday")
    return toks


_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_UNIT_RE = r"\s*(%|percent|minutes?|mins?|hours?|hrs?|seconds?|secs?|steps?|bpm|calls?|devices?|kcal|calories)\b|\s*(%)"
_AGG_BEFORE = re.compile(r"\b(?:average|avg|mean|median|typical(?:ly)?|baseline|averaging|averaged)\b[^\d.]{0,40}$",
                         re.I)
_LABEL_BEFORE = re.compile(r"(?:score|level|label|rating|answer|predict\w*|phq-?\d?|scale|estimate)"
                           r"\W*(?:of|is|at|as|=|:|to|be)?\W*$", re.I)
_REL_AFTER = re.compile(r"^\s*(?:%|percent)\s*(?:lower|higher|more|less|increase|decrease|drop|reduction|rise|decline"
                        r"|change|above|below)", re.I)


_VALUE_RE = re.compile(
    r"(?<![\w.\-])(?:(?P<lo>" + _NUMBER + r")" + _DASH + r"(?P<hi>" + _NUMBER + r")"
    r"|between\s+(?P<blo>" + _NUMBER + r")(?:\s*(?:%|[A-Za-z]+))?\s+and\s+(?P<bhi>" + _NUMBER + r")"
    r"|(?P<v>" + _NUMBER + r")|(?P<nan>NaN|nan|null))(?![\w])", re.I)


def _value_tokens(text: str, day_spans: list[tuple[int, int]],
                  mention_spans: list[tuple[int, int]] = ()) -> list[_Tok]:
    """Numbers that may be sensing values: not day references, not inside a channel name, not
    durations ("14-day"), not the label itself ("score of 2", "3/5", "PHQ-4")."""
    toks = []
    for m in _VALUE_RE.finditer(text):
        s, e = m.span()
        if any(a <= s < b for a, b in (*day_spans, *mention_spans)):
            continue
        after, before = text[e:e + 30], text[max(0, s - 30):s]
        lab = _LABEL_BEFORE.search(before)
        if lab and any(a <= max(0, s - 30) + lab.start() < b for a, b in mention_spans):
            lab = None  # "Sleep score of 80": the word belongs to a channel name
        if not m.group("nan") and (re.match(r"\s*(?:-|–)\s*(?:day|week|month|hour|point|item)s?\b", after, re.I)
                               or re.match(r"\s+(?:days|weeks|months)\b", after, re.I)):
            continue  # "14-day period", "over 14 days": durations, not values
        if re.match(r"\s*(?:/\s*\d{1,2}\b|out of\s+\d{1,2}\b)", after, re.I) or (lab and not re.match(_UNIT_RE, after)):
            continue  # the label itself ("score of 2", "3/5"), not a sensing value
        if re.fullmatch(r"[\s*#>\-]*", text[:s]) and re.match(r"[.)]\s", text[e:e + 2]):
            continue  # a list enumerator: "1. **Identify the data**"
        if re.search(r"[A-Za-z]-$|(?:\bout of|/)\s*$", before, re.I):
            continue  # "PHQ-4"; the 100 of "76 out of 100" or "76/100"
        um = re.match(_UNIT_RE, after, re.I)
        unit = (um.group(1) or um.group(2)) if um else None
        end = e + (um.end() if um else 0)
        lo_s, hi_s = m.group("lo") or m.group("blo"), m.group("hi") or m.group("bhi")
        if m.group("nan"):
            tok = _Tok("val", s, end, m.group(0), value=None)
        elif lo_s:
            lo, dlo = _num(lo_s)
            hi, dhi = _num(hi_s)
            tok = _Tok("range", s, end, text[s:end], value=lo, decimals=dlo, hi=hi, hi_decimals=dhi)
        else:
            v, d = _num(m.group("v"))
            tok = _Tok("val", s, end, text[s:end], value=v, decimals=d)
        tok.unit = unit
        tok.aggregate = bool(_AGG_BEFORE.search(before))
        tok.relative = bool(_REL_AFTER.match(after)) or (bool(re.search(r"\bby\s*$", before, re.I))
                                                         and unit in ("%", "percent"))
        toks.append(tok)
    return toks


def _sentences(text: str) -> list[tuple[int, str]]:
    out, start = [], 0
    for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z(\"'])|\n+", text):
        out.append((start, text[start:m.start()]))
        start = m.end()
    out.append((start, text[start:]))
    return [(s, t) for s, t in out if t.strip()]


def _mentions(sent: str, table: dict[str, list[int]]) -> list[tuple[int, int, str, tuple[int, ...]]]:
    low = sent.lower()
    found = []
    for alias in sorted(table, key=len, reverse=True):
        for m in re.finditer(r"(?<![\w-])" + re.escape(alias) + r"(?![\w-])", low):
            if any(m.start() < e and s < m.end() for s, e, _, _ in found):
                continue
            found.append((m.start(), m.end(), alias, tuple(table[alias])))
    return sorted(found)


_CLAUSE_BREAK = re.compile(r"(?:[,;:(]|\band\b|\bwhile\b|\bwhereas\b|\bbut\b)", re.I)
_DECREASE = re.compile(r"\b(decreas\w*|drop\w*|declin\w*|fell|fall\w*|lower\w*|reduc\w*|down\w*|dip\w*|shrank"
                       r"|went down)\b", re.I)
_INCREASE = re.compile(r"\b(increas\w*|rose|rise\w*|rising|climb\w*|higher|grew|grow\w*|went up|up(?:ward)?|jump\w*"
                       r"|spik\w*)\b", re.I)


# ---------------------------------------------------------------- checking


def _check_value(chan: _Chan, v: float | None, dec: int, unit: str | None,
                 cited: list[int] | None) -> tuple[Status, list[int]]:
    if v is None:
        found = [i + 1 for i, s in enumerate(chan.shown) if s == "NaN"]
    else:
        f = _unit_factor(unit, chan.unit) or 1.0
        found = [i + 1 for i, s in enumerate(chan.shown) if value_matches(v, dec, s, f)]
    if not found:
        return "value_not_found", found
    if cited is None:
        return "unverifiable", found
    if cited and not set(found) & set(cited):
        return "wrong_day", found
    return "supported", found


def _check_aggregate(chan: _Chan, v: float, dec: int, unit: str | None,
                     cited: list[int] | None) -> tuple[Status, list[int]]:
    days = cited or list(range(1, len(chan.shown) + 1))
    xs = [float(chan.shown[d - 1]) for d in days if 1 <= d <= len(chan.shown) and chan.shown[d - 1] != "NaN"]
    if not xs:
        return "value_not_found", []
    mean = sum(xs) / len(xs)
    f = _unit_factor(unit, chan.unit) or 1.0
    ok = abs(v * f - mean) <= max(0.5 * 10 ** (-dec) * f, 0.02 * abs(mean)) + 1e-9
    return ("supported" if ok else "value_not_found"), days


def _pick_channel(chans: list[_Chan], cands: Sequence[int], vals: list[tuple], unit: str | None):
    """Among candidate channels, prefer unit-compatible ones, then the one that supports the values best."""
    if unit:
        compat = [i for i in cands if _unit_factor(unit, chans[i].unit) is not None and _norm_unit(chans[i].unit)]
        if not compat:
            compat = [i for i, c in enumerate(chans) if _norm_unit(c.unit) == _norm_unit(unit)]
            if len({_norm_unit(chans[i].unit) for i in compat}) == 1 and compat:
                cands = compat
        else:
            cands = compat
    if len(cands) == 1:
        return cands[0]
    best, best_score = cands[0], None
    for i in cands:
        sev = sum(_SEVERITY[_check_value(chans[i], v, d, unit, days)[0]] for v, d, days in vals)
        if best_score is None or sev < best_score:
            best, best_score = i, sev
    return best


def _resolve_days(tok: _Tok | None) -> list[int] | None:
    """[] = no day cited; None = cited but unresolvable (weekday without dates)."""
    if tok is None:
        return []
    if tok.days is None:
        return None
    return tok.days


def _claim_status(values: list[ValueCheck]) -> Status:
    return max((v.status for v in values), key=lambda s: _SEVERITY[s]) if values else "unverifiable"


@dataclass
class _Segment:
    start: int
    end: int
    cands: tuple[int, ...]
    mention: str


def _segments(sent: str, ments, vals: list[_Tok]) -> list[_Segment]:
    segs: list[_Segment] = []
    for k, (ms, me, alias, cands) in enumerate(ments):
        if segs and any(t.start < ms and (t.end >= me or not sent[t.end:ms].strip()) for t in vals):
            continue  # a channel word right after a number is that number's unit ("16729 steps"), not a new claim
        start = ms
        if k == 0:
            start = 0
        else:
            prev_vals_end = max([t.end for t in vals if t.end <= ms] + [ments[k - 1][1]])
            breaks = [m.start() for m in _CLAUSE_BREAK.finditer(sent, prev_vals_end, ms)]
            if breaks:
                start = breaks[-1]
        if segs:
            segs[-1].end = start
        if segs and set(segs[-1].cands) == set(cands):
            segs[-1].end = len(sent)
            continue  # same channel named again: one segment
        segs.append(_Segment(start, len(sent), cands, alias))
    return segs


def check_rationale(rationale: str, window, *, n_days: int | None = None,
                    dates: Sequence[dt.date] | None = None) -> GroundingReport:
    """Extract and check every numeric claim of `rationale` against `window`.

    `window`: a Window (values as `render_window` shows them; an agent's view as `_numbered` says; PHIA's
    full-record view keeps its own day count, n_days = the look-back is accepted for it) or a case-study dict
    {label: {"unit": str, "values": [...]}}; `n_days` (checked against the window) resolves "last 3
    days"; `dates` (taken from a Window automatically) resolves weekdays and ISO dates.
    """
    chans, wdates = _channels_of(window)
    lengths = {len(c.shown) for c in chans}
    if len(lengths) > 1:
        raise ValueError(f"window channels have different lengths: {sorted(lengths)}")
    n = lengths.pop() if lengths else (n_days or 0)
    view = getattr(window, "shown", None) or {}
    if n_days is not None and n_days != n and not (view.get("kind") == "frames" and n_days == window.sample.lookback):
        raise ValueError(f"n_days={n_days} but the window holds {n} days")
    dates = list(dates) if dates is not None else wdates
    table = _alias_table(chans)
    report = GroundingReport()
    prev_mention = None  # the last channel named, for "It was 139 minutes on day 3."
    for _, sent in _sentences(rationale or ""):
        dtoks = _day_tokens(sent, n, dates)
        ments = _mentions(sent, table)
        if not ments and prev_mention and re.match(r"\s*(?:it|this|that|these|those|they|which)\b", sent, re.I):
            ments = [(0, 0, f"{prev_mention[2]} (previous sentence)", prev_mention[3])]
        if ments:
            prev_mention = ments[-1]
        vtoks = _value_tokens(sent, [(t.start, t.end) for t in dtoks], [(a, b) for a, b, _, _ in ments])
        if not vtoks:
            continue
        if not ments:
            for t in vtoks:
                report.claims.append(ClaimCheck(text=t.text, kind="value", channel=None, status="unverifiable",
                                                note="no channel named in the sentence"))
            continue
        for seg in _segments(sent, ments, vtoks):
            sv = [t for t in vtoks if seg.start <= t.start < seg.end]
            sd = [t for t in dtoks if seg.start <= t.start < seg.end]
            if sv:
                report.claims.extend(_claims_of_segment(sent, seg, sv, sd, chans, n))
    _other_channels(report, chans)
    for c in report.claims:
        report.n_claims += 1
        setattr(report, c.status, getattr(report, c.status) + 1)
        report.n_day_cited += c.day_cited
        report.correct_day += c.day_cited and c.status == "supported"
        report.value_match += c.status in ("supported", "wrong_day", "wrong_direction")
        report.n_trends += c.kind == "trend" and c.multiday
        report.n_changes += c.kind == "trend" and not c.multiday
    return report


def _other_channels(report: GroundingReport, chans: list[_Chan]) -> None:
    """For values not found in their channel, the channels and days where they ARE shown (a value
    attributed to the wrong channel). Only distinctive numbers (|v| >= 10 or with decimals)."""
    for c in report.claims:
        if c.status != "value_not_found" or c.kind == "aggregate":
            continue
        missing = [v for v in c.values if v.status == "value_not_found" and v.value is not None]
        for v in missing:
            toks = [t for t in re.findall(_NUMBER, v.text) if float(t.replace(",", "")) == v.value]
            dec = _num(toks[0])[1] if toks else 0
            if abs(v.value) < 10 and dec == 0:
                continue
            for ch in chans:
                if ch.label == c.channel:
                    continue
                days = [i + 1 for i, x in enumerate(ch.shown) if value_matches(v.value, dec, x)]
                if days:
                    v.other_channels[ch.label] = days
        if missing and all(v.other_channels for v in missing):
            c.note = (c.note + "; " if c.note else "") + "value(s) shown in another channel"
            report.wrong_channel += 1


def _nearest_day(t: _Tok, sd: list[_Tok], used: set[int]) -> _Tok | None:
    free = [d for d in sd if id(d) not in used]
    return min(free, key=lambda d: min(abs(d.start - t.end), abs(t.start - d.end))) if free else None


def _claims_of_segment(sent, seg: _Segment, sv: list[_Tok], sd: list[_Tok], chans, n) -> list[ClaimCheck]:
    claims: list[ClaimCheck] = []
    used_vals: set[int] = set()
    used_days: set[int] = set()
    seg_text = sent[seg.start:seg.end]
    # ---- trends: "from A [on day x] to B [on day y]"
    for i, a in enumerate(sv):
        if a.kind != "val" or a.value is None or id(a) in used_vals:
            continue
        if not re.search(r"\bfrom\s*\(?\s*$", sent[max(seg.start, a.start - 12):a.start], re.I):
            continue
        b = next((t for t in sv[i + 1:] if t.kind == "val" and t.value is not None), None)
        if b is None:
            continue
        gap = sent[a.end:b.start]
        for d in sd:
            if a.end <= d.start < b.start:
                gap = gap.replace(sent[d.start:d.end], " ")
        if not re.fullmatch(r"[\s(),]*(?:on|in)?[\s(),]*(?:(?:down|up|all the way)\s+)?to\s*", gap, re.I):
            continue
        used_vals |= {id(a), id(b)}
        da = next((d for d in sd if a.end <= d.start < b.start), None)
        db = next((d for d in sd
                   if b.end <= d.start and re.fullmatch(r"[\s(,]*(?:on|in)?\s*", sent[b.end:d.start], re.I)), None)
        if db is None and da is None:  # "decreases on day 8 (from 93% to 89%)": the change happens on that day
            db = next((d for d in sd if d.end <= a.start and id(d) not in used_days), None)
        for d in (da, db):
            if d is not None:
                used_days.add(id(d))
        claims.append(_trend_claim(sent, seg, a, b, da, db, chans, n))
    # ---- the remaining values: one claim per segment (a value, a list, a range or an average)
    rest = [t for t in sv if id(t) not in used_vals]
    if not rest:
        return claims
    days = [d for d in sd if id(d) not in used_days]
    unit = next((t.unit for t in rest if t.unit), None)
    kind = "range" if any(t.kind == "range" for t in rest) else "aggregate" if any(t.aggregate for t in rest) else \
        "relative" if all(t.relative for t in rest) else "list" if len(rest) > 1 else "value"
    # day assignment per value token
    assign: list[_Tok | None]
    n_items = len(rest)
    if not days:
        assign = [None] * n_items
    elif len(days) == 1 and days[0].days and len(days[0].days) == n_items > 1 and all(t.kind == "val" for t in rest):
        assign = ["pair"] * n_items  # "days 3, 10, and 11 ... (139, 224, and NaN respectively)"
    elif len(days) == n_items:
        assign = sorted(days, key=lambda d: d.start)
    elif len(days) == 1:
        assign = [days[0]] * n_items
    else:
        assign = [_nearest_day(t, days, set()) for t in rest]
    vals_in: list[tuple] = []
    for j, t in enumerate(rest):
        if assign[j] == "pair":
            cited = [days[0].days[j]]
        else:
            cited = _resolve_days(assign[j])
        vals_in.append((t, cited))
    ci = _pick_channel(chans, seg.cands, [(t.value, t.decimals, c if c is not None else []) for t, c in vals_in
                                          if t.kind == "val"], unit)
    chan = chans[ci]
    checks: list[ValueCheck] = []
    note = ""
    if kind == "relative":
        for t, cited in vals_in:
            checks.append(ValueCheck(value=t.value, text=t.text, cited_days=cited or [], status="unverifiable",
                                     role="value"))
        note = "relative change (e.g. 'by 20%'): not checkable against shown values"
    for t, cited in ([] if kind == "relative" else vals_in):
        if cited is None:
            checks.append(ValueCheck(value=t.value, text=t.text, status="unverifiable"))
            note = "day reference cannot be resolved (no dates for this window)"
            continue
        if t.kind == "range":
            for role, v, d in (("low", t.value, t.decimals), ("high", t.hi, t.hi_decimals)):
                st, found = _check_value(chan, v, d, t.unit or unit, cited)
                checks.append(ValueCheck(value=v, text=t.text, cited_days=cited, found_days=found,
                                         status="supported" if st == "unverifiable" else st, role=role))
        elif t.aggregate and t.value is not None:
            st, found = _check_aggregate(chan, t.value, t.decimals, t.unit or unit, cited)
            checks.append(ValueCheck(value=t.value, text=t.text, cited_days=cited, found_days=found,
                                     status=st, role="aggregate"))
        else:
            st, found = _check_value(chan, t.value, t.decimals, t.unit or unit, cited)
            checks.append(ValueCheck(value=t.value, text=t.text, cited_days=cited, found_days=found,
                                     status="supported" if st == "unverifiable" else st))
    claims.append(ClaimCheck(text=seg_text.strip(), kind=kind, channel=chan.label, mention=seg.mention, values=checks,
                             status=_claim_status(checks), day_cited=any(v.cited_days for v in checks), note=note))
    return claims


def _trend_claim(sent, seg, a: _Tok, b: _Tok, da: _Tok | None, db: _Tok | None, chans, n) -> ClaimCheck:
    unit = a.unit or b.unit
    ca, cb = _resolve_days(da), _resolve_days(db)
    ci = _pick_channel(chans, seg.cands, [(a.value, a.decimals, ca or []), (b.value, b.decimals, cb or [])], unit)
    chan = chans[ci]
    seg_text = sent[seg.start:seg.end]
    st_b, found_b = _check_value(chan, b.value, b.decimals, unit, cb if cb is not None else [])
    end_day = (sorted(set(found_b) & set(cb))[0] if cb and set(found_b) & set(cb)
               else (found_b[-1] if found_b and not cb else None))
    if ca:
        st_a, found_a = _check_value(chan, a.value, a.decimals, unit, ca)
    else:  # no day for the start: the latest occurrence before the end day
        st_a, found_a = _check_value(chan, a.value, a.decimals, unit, [])
        if end_day is not None and found_a:
            before = [d for d in found_a if d < end_day]
            st_a = "supported" if before else "wrong_day"
    start_day = None
    if found_a:
        pool = sorted(set(found_a) & set(ca)) if ca else [d for d in found_a if end_day is None or d < end_day]
        start_day = (pool[0] if ca else pool[-1]) if pool else None
    checks = [
        ValueCheck(value=a.value, text=a.text, cited_days=ca or [], found_days=found_a,
                   status="supported" if st_a == "unverifiable" else st_a, role="from"),
        ValueCheck(value=b.value, text=b.text, cited_days=cb or [], found_days=found_b,
                   status="supported" if st_b == "unverifiable" else st_b, role="to"),
    ]
    if ca is None or cb is None:
        for c in checks:
            c.status = "unverifiable"
    # the direction words nearest the "from": in the segment text before the end point
    head = sent[seg.start:b.start]
    dec, inc = list(_DECREASE.finditer(head)), list(_INCREASE.finditer(head))
    direction = None
    if dec or inc:
        last_dec = dec[-1].start() if dec else -1
        last_inc = inc[-1].start() if inc else -1
        direction = "decrease" if last_dec > last_inc else "increase"
    status = _claim_status(checks)
    note = ""
    if direction and status == "supported":
        sign = b.value - a.value
        if (direction == "decrease" and sign >= 0) or (direction == "increase" and sign <= 0):
            status, note = "wrong_direction", f"says {direction} but goes from {a.value:g} to {b.value:g}"
    span = (start_day, end_day) if start_day is not None and end_day is not None else None
    return ClaimCheck(text=seg_text.strip(), kind="trend", channel=chan.label, mention=seg.mention, values=checks,
                      status=status, day_cited=bool(ca or cb), direction=direction, trend_days=span,
                      multiday=bool(span and span[1] - span[0] >= 2), note=note)
