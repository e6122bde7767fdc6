"""Other packages add systems (`balms.systems`) and datasets (`balms.datasets`) through entry points: each loads a
spec (or a callable returning one), which its registry's `register` checks; a broken plugin is named on stderr and
skipped, never hiding the others."""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable


def register_entry_points(group: str, spec_type: type, register: Callable, kind: str) -> None:
    """Register every entry point of `group`; a spec declared with the default source gets its distribution's name."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=group):
        try:
            obj = ep.load()
            spec = obj() if callable(obj) and not isinstance(obj, spec_type) else obj
            dist = getattr(ep, "dist", None)
            if isinstance(spec, spec_type) and dist is not None and spec.source == "balms":
                spec = dataclasses.replace(spec, source=dist.name)
            register(spec)
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not hide the others
            print(f"balms: {kind} plugin {ep.name!r} ({ep.value}) not loaded: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
