"""PHIA's code sandbox: runs LLM-written Python over a user's DataFrames in an isolated child process.

Self-contained: it imports nothing from balms.agents or balms.experiments (the agents import it).
"""

from balms.sandbox.executor import NO_OUTPUT, STATUSES, Observation, Sandbox, SandboxError, SandboxLimits
from balms.sandbox.schema import schema_card

__all__ = ["NO_OUTPUT", "STATUSES", "Observation", "Sandbox", "SandboxError", "SandboxLimits", "schema_card"]
