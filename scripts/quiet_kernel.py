#!/usr/bin/env python
"""Set the balms kernel's own log level to ERROR in its kernel.json (idempotent).

Why: ipykernel warns "Kernel is running over TCP without encryption" at every start; papermill passes the kernel's
stderr through (`--stderr-file -`, for the progress bars), so `make paper` printed it once per notebook. The
kernel talks to papermill over loopback only. Output of the notebooks' code (warnings, tracebacks) is unaffected.

    python scripts/quiet_kernel.py .venv/share/jupyter/kernels/balms/kernel.json
"""

import json
import sys
from pathlib import Path

FLAG = "--IPKernelApp.log_level=ERROR"


def main(path: str) -> int:
    p = Path(path)
    spec = json.loads(p.read_text(encoding="utf-8"))
    if FLAG not in spec["argv"]:
        spec["argv"].append(FLAG)
        p.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
