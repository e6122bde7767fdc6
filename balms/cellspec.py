"""What one cell of the benchmark is: a frozen, serialisable `CellSpec`.

A cell is (dataset, system, model with its canonical name and exact id, what its backend adds to every request,
CoT or not, look-back, the agent's full options with decoding, prompt style, the evaluation sample ids) plus two
fingerprints: the data tables the prompts read and the code that builds prompts, runs tools and parses answers
(the import closure of the cell's agent, the records and its model's backend class: `cell_code_fingerprint`;
scheduling, transport and stores are outside it, `NOT_CELL_CODE`).
The spec's key names the run file and is stored in its manifest and in every record, so any change to what a
cell would compute (a new prompt, a fixed parser, a regenerated cohort) gives a new run file instead of
silently reusing old records. Unchanged model
calls still come from the response cache, so a re-run after a code change costs seconds, not model time.
(The idea of HELM's RunSpec and inspect's Task.)
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import json
from collections import deque
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from balms.codegraph import imports_of, modules_of, parents

PACKAGE_ROOT = Path(__file__).resolve().parent

# ------------------------------------------------------------------------------ the code fingerprint ---
# A cell's records change only when what is sent to a model or how its answer is read changes: the agent (prompts,
# windows, tools, the sandbox a PHIA step runs in, parsing), the record it writes, and the module of the backend
# class that serves its model (what that backend adds to a request, how it reads a reply; what it adds is also in
# the spec as `request_additions`). The fingerprint hashes the import closure of those roots (imports anywhere in
# a file, plus code loaded by name, e.g. the sandbox worker that PHIA's executor starts as a separate process:
# see balms.codegraph), so no hand-written list can miss a module that shapes a request.
CELL_ROOTS = ("balms.records",)
# What the walk reaches but must not follow: code that moves no request and reads no answer. Changing it cannot
# change a record, so it must not re-key a cell. The one place that says what is outside the key, and why;
# tests/test_code_fingerprint.py checks each entry is reached (none is stale), that editing any module outside
# leaves every key unchanged and editing any module inside changes it.
_LOADER = "a loader (data registry): its tables are hashed by the data fingerprint"
_TRANSPORT = "transport: how a request travels (slots, servers), not what it says"
_STORE = "storage: where answers and records are kept, not what they say"
NOT_CELL_CODE: dict[str, str] = {
    "balms.data.pmdata": _LOADER,
    "balms.data.globem": _LOADER,
    "balms.data.diversityone": _LOADER,
    "balms.data.synthetic*": "a synthetic writer (data registry): the tables read from its cohort are hashed by the "
                             "data fingerprint",
    "balms.data.fingerprint": "computes the data fingerprint itself (its output is in the spec)",
    "balms.cellspec": "computes the keys themselves (a verdict's key is taken with it)",
    "balms.codegraph": "computes the keys themselves",
    "balms.models.registry": "names -> backends: the backend class's module is a root of its own, what it adds to a "
                             "request is in the spec (request_additions)",
    "balms.models.gguf_assets": "finds model files: the model's identity is its exact id in the spec",
    "balms.models.pricing": "cost accounting",
    "balms.threads": "scheduling: thread pools",
    "balms.models.retrying": _TRANSPORT,
    "balms.models.slots": _TRANSPORT,
    "balms.models.discovery": _TRANSPORT,
    "balms.models.cache": _STORE,
    "balms.jsonl_store": _STORE,
    "balms.stores": _STORE,
    "balms.paths": _STORE,
}


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any, n: int = 16) -> str:
    """Short sha256 of an object's canonical JSON."""
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:n]


# A verdict is computed by the judge loop and what it imports (rubric, G-Eval, the agents' own window renderer,
# the backends): its code key is the import closure of this root, like a cell's, so no hand-written list can miss one.
JUDGE_ROOTS = ("balms.judges.llm_judge",)


def judge_roots(backend: str) -> tuple[str, ...]:
    """Where a verdict's code starts: the judge loop and `backend`, the module of the judge model's backend class
    (`balms.models.registry.backend_module`)."""
    return (*JUDGE_ROOTS, backend)


def judge_code_fingerprint(backend: str, root: str | None = None) -> str:
    """The code key of a verdict (the closure of `judge_roots`)."""
    return closure_fingerprint(judge_roots(backend), root)


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
def code_fingerprint(rels: tuple[str, ...], root: str | None = None) -> str:
    """sha256 over the source files under `rels` (paths in the package), names included. A cell's code is
    fingerprinted by `cell_code_fingerprint` instead (its import closure, not a list)."""
    base = Path(root) if root else PACKAGE_ROOT
    h = hashlib.sha256()
    for f in _code_files(base, rels):
        h.update(f.relative_to(base).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def excluded(module: str) -> str | None:
    """Why `module` is not cell code (NOT_CELL_CODE), None when it is."""
    return next((why for pat, why in NOT_CELL_CODE.items() if fnmatch.fnmatchcase(module, pat)), None)


def _package_modules(top: str, root: str | None) -> dict[str, Path]:
    """A top-level package's modules: balms from `root` (a copy, in tests) or this package; another one (a
    system from a plugin) from where Python would import it."""
    if top == "balms":
        return modules_of(Path(root) if root else PACKAGE_ROOT, "balms")
    spec = importlib.util.find_spec(top)
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise ValueError(f"code fingerprint: cannot find the source of module {top!r}")
    if spec.submodule_search_locations:
        return modules_of(Path(list(spec.submodule_search_locations)[0]), top)
    return modules_of(Path(spec.origin), top)


@lru_cache(maxsize=32)
def import_closure(roots: tuple[str, ...], root: str | None = None) -> tuple[tuple[str, str], ...]:
    """(module, source file) of every module the `roots` load, transitively: their imports (any depth, lazy
    ones included), the packages Python runs first (`__init__`), and code loaded by name (balms.codegraph);
    modules of NOT_CELL_CODE are left out and not followed. Tracked: balms, and the package of each root
    (a plugin's own modules). `root`: a copy of the balms package to read instead of this one."""
    tops = tuple(dict.fromkeys(["balms", *(r.split(".")[0] for r in roots)]))
    modules: dict[str, Path] = {}
    for top in tops:
        modules.update(_package_modules(top, root))
    missing = [r for r in roots if r not in modules]
    if missing:
        raise ValueError(f"code fingerprint: no source for root module(s) {missing}")
    seen: dict[str, Path] = {}
    todo = deque(roots)
    while todo:
        m = todo.popleft()
        if m in seen or m not in modules or excluded(m):
            continue
        seen[m] = modules[m]
        todo.extend(parents(m))
        todo.extend(e.imported for e in imports_of(m, modules[m], modules, m, tops, references=True))
    return tuple(sorted((m, str(p)) for m, p in seen.items()))


@lru_cache(maxsize=4096)  # by content: a test edits one file among many unchanged ones
def code_tokens(source: bytes) -> bytes:
    """A module's code without what cannot change what it computes: comments, docstrings and layout. The
    tokens (kind and text) of the source, minus comments, blank lines and the string that opens a module, class or
    function body (its docstring, which no prompt reads: tests/test_code_fingerprint.py checks that editing one
    re-keys nothing, and that editing any code does)."""
    import ast
    import io
    import tokenize

    tree = ast.parse(source)
    docs = {(n.body[0].lineno, n.body[0].col_offset) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
            and isinstance(n.body[0].value.value, str)}
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    out, drop_newline = [], False
    for tok in tokenize.tokenize(io.BytesIO(source).readline):
        if tok.type in skip or (drop_newline and tok.type == tokenize.NEWLINE):
            drop_newline = False
            continue
        if tok.type == tokenize.STRING and tok.start in docs:
            drop_newline = True  # the docstring's own statement goes, with its line end
            continue
        drop_newline = False
        out.append(f"{tok.type}:{tok.string}")
    return "\x1f".join(out).encode()


@lru_cache(maxsize=32)
def closure_fingerprint(roots: tuple[str, ...], root: str | None = None) -> str:
    """sha256 over the import closure of `roots`: each module's name and code (`code_tokens`)."""
    h = hashlib.sha256()
    for name, path in import_closure(roots, root):
        h.update(name.encode() + b"\0" + code_tokens(Path(path).read_bytes()) + b"\0")
    return h.hexdigest()[:16]


def cell_roots(agent: Any, backend: str) -> tuple[str, ...]:
    """The modules a cell's code starts from: its agent class's module and those of its base classes (in balms
    or the agent's own package), CELL_ROOTS, and `backend`, the module of the backend class that serves the cell's
    model (`balms.models.registry.backend_module`)."""
    cls = agent if isinstance(agent, type) else type(agent)
    own = cls.__module__.split(".")[0]
    mods = [c.__module__ for c in cls.__mro__ if c.__module__.split(".")[0] in ("balms", own)]
    return tuple(dict.fromkeys([*mods, *CELL_ROOTS, backend]))


def _has_source(module: str) -> bool:
    top = module.split(".")[0]
    if top == "balms":
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # e.g. __main__ of a notebook kernel
        return False
    return spec is not None and bool(spec.submodule_search_locations or spec.origin)


def cell_code_fingerprint(agent: Any, backend: str, root: str | None = None) -> str:
    """The code fingerprint of a cell run by `agent` (an agent or its class) on a model served by the backend class
    of module `backend`.

    Per cell, not global: a cell's key changes exactly when code in its own closure changes, so a fix to PHIA's
    sandbox re-runs PHIA's cells and leaves Health-LLM's on disk (their records could not have changed), and a fix
    to the HTTP backend leaves the embedded model's cells alone; the systems share the records and parsing code,
    so a change there re-keys every cell. Scheduling, transport and stores are outside (NOT_CELL_CODE). Cached per
    process (the walk parses each file once). An agent class defined where no source file exists (a notebook's
    `__main__`) adds its class source (`inspect.getsource`) to the fingerprint instead of a walk."""
    import inspect

    roots = cell_roots(agent, backend)
    located = tuple(r for r in roots if _has_source(r))
    fp = closure_fingerprint(located, root)
    if located == roots:
        return fp
    cls = agent if isinstance(agent, type) else type(agent)
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        source = f"{cls.__module__}.{cls.__qualname__} (source unavailable: edits to it do not change the key)"
    return digest([fp, source])


# ------------------------------------------------------------------------------ the spec --------------
class FrozenDict(dict):
    """A dict that refuses changes (nested dicts frozen too, lists as tuples): a spec's options are read-only.
    A dict subclass, so JSON, pydantic and `isinstance(x, dict)` callers read it as before."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a cell spec's options are read-only: build a new spec (spec.model_copy(update=...))")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(_canonical(self))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))

    def thaw(self) -> dict:
        """A plain, mutable deep copy."""
        return json.loads(json.dumps(self))


def _freeze(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ValueError(f"{where}: keys must be strings, got {bad[:3]}")
        return FrozenDict({k: _freeze(v, f"{where}.{k}") for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, f"{where}[{i}]") for i, v in enumerate(value))
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return value
    raise ValueError(f"{where}: {type(value).__name__} {value!r} is not a JSON value (string, number, bool, null, "
                     "list or mapping): record the option as data")


def _frozen_options(value: dict) -> FrozenDict:
    return _freeze(value, "options")


def _frozen_additions(value: dict) -> FrozenDict:
    return _freeze(value, "request_additions")


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
    """One cell of the benchmark. Equal specs compute equal records; the key names the run file. Immutable (its
    options and request additions are read-only mappings) and validated: an unknown field, a non-JSON option or
    an impossible value is refused with a message naming it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str = Field(min_length=1)
    system: str = Field(min_length=1)
    model: str = Field(min_length=1)  # the registry's canonical name (balms.models.registry.canonical_name)
    model_id: str = Field(min_length=1)  # exact model id the backend reports
    # what the backend adds to every request (e.g. llama.cpp's default system message): in the response-cache key
    # too (balms.models.cache), so a change to it is a new cell whose calls are not answered from the old ones
    request_additions: Annotated[dict[str, Any], AfterValidator(_frozen_additions)] = Field(
        default_factory=FrozenDict)
    cot: bool
    lookback: int = Field(ge=0)
    # the agent's own options, decoding included (read-only)
    options: Annotated[dict[str, Any], AfterValidator(_frozen_options)] = Field(default_factory=FrozenDict)
    prompt_style: str | None = Field(default=None, min_length=1)  # "paper" | "corrected"; None where n/a
    sample_ids: tuple[str, ...] = ()
    data_fingerprint: str = ""
    code_fingerprint: str = ""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"CellSpec: unknown field(s) {unknown}; a spec has exactly "
                                 f"{sorted(cls.model_fields)}")
        return data

    @field_validator("sample_ids")
    @classmethod
    def _distinct_ids(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        seen: set[str] = set()
        dup = [i for i in ids if i in seen or seen.add(i)]
        if dup:
            raise ValueError(f"sample ids repeat: {dup[:3]} (a cell evaluates each sample once)")
        return ids

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


def describe_cell(spec: CellSpec, options: dict | None = None) -> str:
    """One line naming a cell, for progress output: "pmdata rag qwen2.5-coder-0.5b zs L14 [channels=...]"."""
    extra = " ".join(f"{k}={v}" for k, v in (options or {}).items())
    if len(extra) > 60:
        extra = extra[:57] + "..."
    return " ".join(x for x in (spec.dataset, spec.system, spec.model, "cot" if spec.cot else "zs",
                                f"L{spec.lookback}", extra) if x)
