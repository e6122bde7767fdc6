"""`balms sandbox selftest [--json] [--mode improved|faithful|both] [--allow-degraded]`: run the hostile-code
suite and report what was contained and exactly which isolation mechanisms were applied.

Exit status: 0 when every case was contained by a sandbox with all REQUIRED mechanisms, 1 when a case escaped
or the sandbox ran degraded, 2 when the sandbox refused to run (isolation missing, degraded not allowed)."""

from __future__ import annotations

import argparse
import json
import sys


def _selftest(args: argparse.Namespace) -> int:
    from balms.sandbox.executor import REQUIRED, SandboxLimits, SandboxUnavailable
    from balms.sandbox.suite import CASES, run_suite

    cases = CASES
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        known = {c.name: c for c in CASES}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            print(f"unknown case(s) {unknown}; known: {sorted(known)}", file=sys.stderr)
            return 2
        cases = [known[w] for w in wanted]

    limits = SandboxLimits(wall_s=args.wall_s, cpu_s=max(1, int(args.wall_s)), mem_mb=args.mem_mb,
                           max_output_chars=2000)

    def progress(case: dict) -> None:
        if not args.json:
            mark = "ok  " if case["contained"] else "FAIL"
            print(f"{mark} {case['name']:<28} {case['status']:<17} {case['duration_s']:>6.2f}s "
                  f"{'; '.join(case['reasons'])}", flush=True)

    modes = ("improved", "faithful") if args.mode == "both" else (args.mode,)
    try:
        reports = [run_suite(mode, limits=limits, cases=cases, progress=progress,
                             allow_degraded=True if args.allow_degraded else None) for mode in modes]
    except SandboxUnavailable as e:
        if args.json:
            json.dump({"tried": 0, "contained": 0, "refused": str(e), "degraded": True,
                       "mechanisms_applied": e.applied, "mechanisms_missing": e.missing,
                       "mechanisms": e.mechanisms}, sys.stdout, indent=1, default=str)
            print()
        print(f"REFUSED: {e}", file=sys.stderr)
        return 2
    report = reports[0] if len(reports) == 1 else {
        "tried": sum(r["tried"] for r in reports), "contained": sum(r["contained"] for r in reports),
        "cases": [dict(c, mode=r["mode"]) for r in reports for c in r["cases"]],
        "degraded": any(r["degraded"] for r in reports),
        "mechanisms_applied": sorted(set.intersection(*(set(r["mechanisms_applied"]) for r in reports)),
                                     key=reports[0]["mechanisms_applied"].index),
        "mechanisms_missing": sorted(set().union(*(r["mechanisms_missing"] for r in reports))),
        "mechanisms": reports[0]["mechanisms"], "modes": {r["mode"]: {k: r[k] for k in ("tried", "contained")}
                                                          for r in reports}}
    if args.json:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
    else:
        applied, missing = report["mechanisms_applied"], report["mechanisms_missing"]
        print(f"contained {report['contained']}/{report['tried']}; mechanisms applied: {', '.join(applied) or 'none'}")
        req = [m for m in missing if m in REQUIRED]
        other = [m for m in missing if m not in REQUIRED]
        if req:
            print(f"DEGRADED: required mechanisms NOT applied: {', '.join(req)}")
        if other:
            print(f"not applied (not required with the mechanisms above): {', '.join(other)}")
        for w in report["mechanisms"].get("warnings", []):
            print(f"WARNING: {w}")
    ok = report["tried"] > 0 and report["contained"] == report["tried"] and not report["degraded"]
    return 0 if ok else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("sandbox", help="PHIA code sandbox")
    sub = p.add_subparsers(dest="sandbox_command", required=True)
    st = sub.add_parser("selftest", help="run the hostile/broken code suite; exit 1 if any case escaped or the "
                                         "sandbox ran degraded, 2 if it refused to run")
    st.add_argument("--json", action="store_true",
                    help='print {"tried", "contained", "degraded", "mechanisms_applied", "mechanisms_missing", '
                         '"cases", "mechanisms"}')
    st.add_argument("--mode", choices=("improved", "faithful", "both"), default="improved")
    st.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    st.add_argument("--wall-s", type=float, default=2.0, help="wall timeout per block")
    st.add_argument("--mem-mb", type=int, default=512, help="address space per worker beyond its baseline")
    st.add_argument("--allow-degraded", action="store_true",
                    help="run even where required isolation is missing (the report lists what was applied)")
    st.set_defaults(func=_selftest)
