"""Validate deploy/skypilot/vllm-serve.yaml with SkyPilot's own schema objects, once per balms backbone served
over HTTP (the model ids come from balms' registry). Needs `skypilot` (not a balms dependency): run it in a side
venv, `python -m venv /tmp/sky && /tmp/sky/bin/pip install skypilot && /tmp/sky/bin/python deploy/skypilot/check.py`.
No cloud account is used: Task.from_yaml and SkyServiceSpec only parse and validate."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import sky
from sky.serve import SkyServiceSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def served_models() -> list[str]:
    """The registry's OpenAI-compatible model ids, read from balms/models/registry.py without importing balms."""
    tree = ast.parse((ROOT / "balms" / "models" / "registry.py").read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ModelSpec" and len(node.args) >= 3:
            kind, mid = node.args[1], node.args[2]
            if isinstance(kind, ast.Constant) and kind.value == "openai" and isinstance(mid, ast.Constant):
                out.append(mid.value)
    return out


def main() -> int:
    models = served_models()
    if not models:
        raise SystemExit("no OpenAI-compatible model found in balms/models/registry.py")
    for mid in models:
        task = sky.Task.from_yaml(str(HERE / "vllm-serve.yaml"))
        task.update_envs({"MODEL_ID": mid})
        spec = task.service
        assert isinstance(spec, SkyServiceSpec), f"{mid}: no service section"
        assert spec.readiness_path == "/v1/models", spec.readiness_path
        assert "vllm serve" in task.run and task.envs["MODEL_ID"] == mid
        accs = {a for r in task.resources for a in (r.accelerators or {})}
        print(f"ok {mid}: replicas {spec.min_replicas}-{spec.max_replicas}, probe {spec.readiness_path}, "
              f"accelerators {sorted(accs)}, ports {sorted({p for r in task.resources for p in (r.ports or [])})}")
    print(f"skypilot {sky.__version__}: {len(models)} services valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
