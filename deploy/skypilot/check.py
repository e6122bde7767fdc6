"""Parse SkyPilot task files with SkyPilot's own objects (`sky.Task.from_yaml`, its schema, `Resources`,
`SkyServiceSpec`) and print what SkyPilot understood, as JSON, one object per file. No cloud account is used:
parsing validates, nothing is launched. Runs in the venv that has `skypilot` (`make install-sky` -> .venv-sky):

    .venv-sky/bin/python deploy/skypilot/check.py deploy/skypilot/*.yaml deploy/skypilot/judge/*.yaml

tests/test_skypilot.py runs it and compares the output with balms' model registry and the paper profile.
A file SkyPilot refuses gets {"path", "error"} instead, and the exit status is 1."""

from __future__ import annotations

import json
import sys

import sky
from sky.serve import SkyServiceSpec


def summary(path: str) -> dict:
    task = sky.Task.from_yaml(path)
    spec = task.service
    if not isinstance(spec, SkyServiceSpec):
        raise ValueError(f"{path}: no service section")
    res = list(task.resources)
    return {
        "path": path,
        "name": task.name,
        "envs": dict(task.envs),
        "secrets": sorted(task.secrets),
        "run": task.run,
        "setup": task.setup,
        "accelerators": sorted([a, n] for r in res for a, n in (r.accelerators or {}).items()),
        "ports": sorted({p for r in res for p in (r.ports or [])}),
        "readiness_path": spec.readiness_path,
        "replicas": [spec.min_replicas, spec.max_replicas],
    }


def main(paths: list[str]) -> int:
    out = {"skypilot": sky.__version__, "tasks": []}
    for p in paths:
        try:
            out["tasks"].append(summary(p))
        except Exception as exc:  # noqa: BLE001 - any refusal is reported with the file's name
            out["tasks"].append({"path": p, "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(out, indent=2))
    return 1 if any("error" in t for t in out["tasks"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
