"""`balms data summary|write`: a dataset's summary; `make data`'s processed samples and summary table."""

from __future__ import annotations

import json
from pathlib import Path

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


def _write(args) -> int:
    from balms import paths
    from balms.data.summary import write_all

    names = dataset_names() if args.all or not args.dataset else args.dataset
    paths.announce_data(list(names))
    write_all(names, args.raw_root)
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
    w = sub.add_parser("write", help="`make data`: each dataset's processed samples and tables/data_summary.csv")
    w.add_argument("--all", action="store_true", help="every dataset (the default when no --dataset is given)")
    w.add_argument("--dataset", action="append", choices=dataset_names())
    w.add_argument("--raw-root", type=Path, default=None, help="folder with pmdata/ globem/ diversityone/")
    w.set_defaults(func=_write)
