"""What one cell of the benchmark is: a frozen, serialisable `CellSpec`.

A cell is (dataset, system, model with its exact id, CoT or not, look-back, the agent's full options with
decoding, prompt style, the evaluation sample ids) plus two fingerprints: the data tables the prompts read and
the package code that builds prompts, runs tools and parses answers. The spec's key names the run file and is
stored in its manifest and in every record, so any change to what a cell would compute (a new prompt, a fixed
parser, a regenerated cohort) gives a new run file instead of silently reusing old records. Unchanged model
calls still come from the response cache, so a re-run after a code change costs seconds, not model time.
(The idea of HELM's RunSpec and inspect's Task.)
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PACKAGE_ROOT = Path(__file__).resolve().parent

# The code a record's content depends on, given the model's responses: data -> window -> prompt -> tools ->
# parse. Loaders are not listed: what they produce is covered by the data fingerprint. Judges, metrics and the
# report are downstream of records and do not re-run cells.
CODE_PATHS = ("agents", "sandbox", "data/render.py", "data/samples.py", "data/channels.py", "data/schema.py",
              "records.py", "models/reasoning.py", "cellspec.py")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any, n: int = 16) -> str:
    """Short sha256 of an object's canonical JSON."""
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:n]


JUDGE_CODE_PATHS = ("judges/llm_judge.py", "judges/rubric.py", "data/render.py", "data/channels.py")


def _code_files(root: Path, rels: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for rel in rels:
        p = root / rel
        if p.is_dir():
            files.extend(sorted(p.rglob("*.py")))
        elif p.is_file():
            files.append(p)
    return files


@lru_cache(maxsize=8)
def code_fingerprint(rels: tuple[str, ...] = CODE_PATHS, root: str | None = None) -> str:
    """sha256 over the source files under `rels` (default: the prompt/tool/parse path), names included."""
    base = Path(root) if root else PACKAGE_ROOT
    h = hashlib.sha256()
    for f in _code_files(base, rels):
        h.update(f.relative_to(base).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# files that belong to a run file (same stem): its manifest, the judge's verdicts, the writer's lock
RUN_COMPANIONS = (".manifest.json", ".judge.jsonl", ".jsonl.lock")


def key_of_run_file(path) -> str:
    """The cell key a run file's (or one of its companions') name ends with (`run_name`)."""
    name = Path(path).name
    for suffix in (*RUN_COMPANIONS, ".jsonl"):
        name = name.removesuffix(suffix)
    return name.rsplit("__", 1)[-1]


def run_name(system: str, model: str, cot: bool, lookback: int, key: str) -> str:
    """The run file's stem: readable cell fields, then the spec key that identifies it."""
    safe = model.replace("/", "_").replace(" ", "_")
    return f"{system}__{safe}__{'cot' if cot else 'zs'}__L{lookback}__{key}"


class CellSpec(BaseModel):
    """One cell of the benchmark. Equal specs compute equal records; the key names the run file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str
    system: str
    model: str  # registry (or served) name
    model_id: str  # exact model id the backend reports
    cot: bool
    lookback: int
    options: dict[str, Any] = Field(default_factory=dict)  # the agent's own options, decoding included
    prompt_style: str | None = None  # "paper" | "corrected" for the prompt-based agents; None where n/a
    sample_ids: tuple[str, ...] = ()
    data_fingerprint: str = ""
    code_fingerprint: str = ""

    @property
    def decoding(self) -> dict[str, Any]:
        """The decoding parameters among the options (they also enter every response-cache key)."""
        return {k: self.options[k] for k in ("temperature", "max_tokens", "seed", "top_p") if k in self.options}

    @property
    def samples_digest(self) -> str:
        return digest(list(self.sample_ids), 12)

    def key(self) -> str:
        """16 hex digits identifying everything that determines the cell's records."""
        return digest(self.model_dump(mode="json"))

    def run_name(self) -> str:
        return run_name(self.system, self.model, self.cot, self.lookback, self.key())

    def run_path(self, runs_root: Path) -> Path:
        return Path(runs_root) / self.dataset / f"{self.run_name()}.jsonl"

    def compact(self) -> dict[str, Any]:
        """The spec without its sample-id list (a digest and a count instead): what every record carries."""
        d = self.model_dump(mode="json", exclude={"sample_ids"})
        d.update(key=self.key(), n_samples=len(self.sample_ids), samples_digest=self.samples_digest)
        return d

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls.model_validate_json(text)
