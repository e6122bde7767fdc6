"""balms: runnable companion to the BALMS benchmark paper.

Data flows one way: raw files -> daily/sub-day tables (`balms.data`) -> samples -> agents
(`balms.agents`) over model backends (`balms.models`) -> prediction records (`balms.runner`) ->
judges and metrics (`balms.judges`, `balms.metrics`) -> tables and figures (`balms.report`).
"""

__version__ = "0.1.0"
