"""balms: runnable companion to the BALMS benchmark paper.

Data flows one way: raw files -> daily/sub-day tables (`balms.data`) -> samples -> agents
(`balms.agents`) over model backends (`balms.models`) -> prediction records (`balms.runner`) ->
judges and metrics (`balms.judges`, `balms.metrics`) -> tables and figures (`balms.report`).
"""

import os as _os

# llama.cpp's OpenMP threads busy-wait by default, which slows generation ~10x on a loaded 2-core machine.
# It must be set before anything imports llama_cpp, so it lives at the package root.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
