"""`balms sandbox selftest [--json] [--mode improved|faithful]`: run the hostile-code suite and report."""

from __future__ import annotations

import argparse
import json
import sys


def _selftest(args: argparse.Namespace) -> int:
    from balms.sandbox.executor import SandboxLimits
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

    reports = [run_suite(mode, limits=limits, cases=cases, progress=progress) for mode in
               (("improved", "faithful") if args.mode == "both" else (args.mode,))]
    report = reports[0] if len(reports) == 1 else {
        "tried": sum(r["tried"] for r in reports), "contained": sum(r["contained"] for r in reports),
        "cases": [dict(c, mode=r["mode"]) for r in reports for c in r["cases"]],
        "mechanisms": reports[0]["mechanisms"], "modes": {r["mode"]: {k: r[k] for k in ("tried", "contained")}
                                                          for r in reports}}
    if args.json:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
    else:
        m = report["mechanisms"]
        print(f"contained {report['contained']}/{report['tried']}; mechanisms: "
              + ", ".join(k for k in ("netns", "mountns", "pidns", "scratch_tmpfs", "chroot", "uid_drop",
                                      "no_new_privs") if m.get(k)))
        for w in m.get("warnings", []):
            print(f"WARNING: {w}")
    return 0 if report["contained"] == report["tried"] else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("sandbox", help="PHIA code sandbox")
    sub = p.add_subparsers(dest="sandbox_command", required=True)
    st = sub.add_parser("selftest", help="run the hostile/broken code suite; exit 1 if any case escaped")
    st.add_argument("--json", action="store_true", help='print {"tried", "contained", "cases", "mechanisms"}')
    st.add_argument("--mode", choices=("improved", "faithful", "both"), default="improved")
    st.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    st.add_argument("--wall-s", type=float, default=2.0, help="wall timeout per block")
    st.add_argument("--mem-mb", type=int, default=512, help="address space per worker beyond its baseline")
    st.set_defaults(func=_selftest)
