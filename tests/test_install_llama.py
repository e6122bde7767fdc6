"""scripts/install-llama-cpp picks the build flavour from the CPU's flags; a fake pip records what it was asked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install-llama-cpp"
AVX512 = "avx512f avx512bw avx512dq avx512vl avx512vbmi avx512_vnni avx512_bf16"


def run(tmp_path, flags: str, *, wheel_cached: bool, shared_wheel: bool, flavor: str | None = "auto",
        pip_fails=""):
    (tmp_path / "cpuinfo").write_text(f"processor : 0\nflags\t\t: fpu sse2 avx avx2 fma {flags}\n")
    log = tmp_path / "pip.log"
    pip = tmp_path / "fakepip"
    # `wheel` writes a wheel into -w DIR (or fails when asked to); every call is logged
    pip.write_text(f"""#!/usr/bin/env bash
echo "$@" >> {log}
if [ "$1" = wheel ]; then
  [ -n "{pip_fails}" ] && exit 1
  while [ $# -gt 0 ]; do [ "$1" = -w ] && touch "$2/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"; shift; done
fi
""")
    pip.chmod(0o755)
    cache, shared = tmp_path / "cache", tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    if shared_wheel:
        (shared / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").touch()
    if wheel_cached:
        (cache / "avx512-0.3.36").mkdir(parents=True, exist_ok=True)
        (cache / "avx512-0.3.36" / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").touch()
    env = dict(os.environ, CPUINFO=str(tmp_path / "cpuinfo"), LLAMA_WHEEL_CACHE=str(cache),
               SHARED_WHEELS=str(shared), LLAMA_FLAVOR=flavor or "")
    if flavor is None:
        del env["LLAMA_FLAVOR"]
    out = subprocess.run([str(SCRIPT), str(pip)], env=env, capture_output=True, text=True, check=True)
    return out.stdout + out.stderr, log.read_text().splitlines()


def test_no_avx512_takes_the_portable_shared_wheel(tmp_path):
    out, calls = run(tmp_path, "avx512f", wheel_cached=False, shared_wheel=True)  # avx512f alone is not enough
    assert "avx2 build (prebuilt wheel" in out
    assert not any(c.startswith("wheel ") for c in calls)
    assert "--force-reinstall" in calls[0]
    assert calls[0].endswith("shared/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl")


def test_no_avx512_no_wheel_compiles_portable(tmp_path):
    out, calls = run(tmp_path, "", wheel_cached=False, shared_wheel=False)
    assert "avx2 build (compiled)" in out
    assert "--no-cache-dir" in calls[0] and "--force-reinstall" in calls[0] and "--no-binary" in calls[0]


def test_avx512_cpu_compiles_once_then_reuses_the_cached_wheel(tmp_path):
    out, calls = run(tmp_path, AVX512, wheel_cached=False, shared_wheel=True)
    assert "compiling the AVX-512 build" in out and calls[0].startswith("wheel ") and "--no-cache-dir" in calls[0]
    assert any("--force-reinstall" in c for c in calls) and "avx512 build" in out
    out2, calls2 = run(tmp_path, AVX512, wheel_cached=True, shared_wheel=True)
    assert "compiling" not in out2 and not any(c.startswith("wheel ") for c in calls2[len(calls):])


def test_failed_avx512_compile_falls_back_loudly(tmp_path):
    out, calls = run(tmp_path, AVX512, wheel_cached=False, shared_wheel=True, pip_fails="yes")
    assert "WARNING: the AVX-512 build failed" in out and "avx2 build (prebuilt wheel" in out


def test_forced_portable_flavour_ignores_avx512(tmp_path):
    out, calls = run(tmp_path, AVX512, wheel_cached=True, shared_wheel=True, flavor="avx2")
    assert "avx2 build" in out and not any("avx512" in c for c in calls)


def test_the_default_is_the_portable_build_even_where_avx512_runs(tmp_path):
    """Committed results and cold runs on any AVX2 machine compute the same floats (bench/reproducibility.json):
    the portable build is the default, AVX-512 an opt-in for speed."""
    out, calls = run(tmp_path, AVX512, wheel_cached=True, shared_wheel=True, flavor=None)
    assert "avx2 build (prebuilt wheel" in out and not any("avx512" in c for c in calls)
