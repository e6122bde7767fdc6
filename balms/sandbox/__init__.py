"""PHIA's code sandbox: runs LLM-written Python over a user's DataFrames in an isolated child process.

Self-contained: it imports nothing from balms.agents or balms.experiments (the agents import it).
"""

from balms.sandbox.executor import (
                                    ALLOW_DEGRADED_ENV,
                                    MECHANISMS,
                                    NO_OUTPUT,
                                    REQUIRED,
                                    STATUSES,
                                    Observation,
                                    Sandbox,
                                    SandboxError,
                                    SandboxLimits,
                                    SandboxUnavailable,
)
from balms.sandbox.schema import schema_card

__all__ = ["ALLOW_DEGRADED_ENV", "MECHANISMS", "NO_OUTPUT", "REQUIRED", "STATUSES", "Observation", "Sandbox",
           "SandboxError", "SandboxLimits", "SandboxUnavailable", "schema_card"]
