"""`balms data ...`: dataset summaries from the command line."""

from __future__ import annotations

import json

from balms.data.registry import dataset_names
from balms.data.samples import DEFAULT_RULE, SAMPLE_RULES
from balms.data.schema import DataError


def _summary(args) -> int:
    from balms.data.summary import dataset_summary

    opts = {"label": args.label} if args.dataset == "globem" and args.label else {}
    try:
        s = dataset_summary(args.dataset, args.raw, rule=args.rule, **opts)
    except DataError as exc:
        print(f"data error: {exc}")
        return 2
    if args.json:
        print(json.dumps(s, default=str))
    else:
        for k, v in s.items():
            print(f"{k:28s} {v}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="datasets: summaries, samples")
    sub = p.add_subparsers(dest="data_command", required=True)
    s = sub.add_parser("summary", help="users, samples, label counts, dropped rows, baseline MAEs")
    s.add_argument("--dataset", required=True, choices=dataset_names())
    s.add_argument("--raw", default=None, help="raw folder (GLOBEM: one cohort or a folder of cohorts)")
    s.add_argument("--label", default=None, help="GLOBEM label: auto, feel_anxious or phq4_anxiety_EMA")
    s.add_argument("--rule", default=None, choices=sorted(SAMPLE_RULES),
                   help=f"sample rule (default {DEFAULT_RULE}; README: Samples and the evaluation rule)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(func=_summary)
