"""Hostile and broken code blocks for the PHIA sandbox, and the checker that decides whether each was contained.

A case is contained when (1) it ends as an Observation with an allowed status, (2) nothing secret leaks into the
observation, (3) the episode continues: the next block runs and still sees the frames, (4) nothing outside
scratch changed: a world-writable canary folder keeps its checksum, guard paths outside scratch do not appear,
and a loopback listener held by the parent receives no connection. Permissions cannot explain (4): the canary is
mode 0777, so only the sandbox's mechanisms protect it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from balms.paths import PROJECT_ROOT
from balms.sandbox.executor import Sandbox, SandboxLimits

FAIL = ("error", "memory", "killed", "timeout")
ANY = ("ok", "no_output", "error", "memory", "killed", "timeout", "output_truncated")
PASSWD_MARKER = "root:x:0:0"


@dataclass(frozen=True)
class Case:
    name: str
    category: str
    code: str  # tokens @CANARY@ @PORT@ @PARENT@ @REPO@ @DATA@ @GUARD@ are substituted
    expect: tuple[str, ...]  # allowed statuses
    forbid: tuple[str, ...] = ()  # substrings that must not appear in the observation
    require: tuple[str, ...] = ()  # substrings that must appear (proves which mechanism stopped it)


CASES: list[Case] = [
    # --- positive controls first (later cases may fill the scratch tmpfs on purpose)
    Case("write_scratch_allowed", "write",
         "open('notes.txt', 'w').write('hello')\nprint(open('notes.txt').read())", ("ok",)),
    Case("walk_root", "read", "import os\nprint(sorted(os.listdir('/')))", ("ok",), ("etc", "work", "usr")),
    # --- runaway CPU / time
    Case("infinite_loop", "time", "while True:\n    pass", ("timeout", "killed")),
    Case("sleep_forever", "time", "import time\ntime.sleep(10**6)", ("timeout",)),
    Case("ignore_signals_then_spin", "time",
         "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGALRM):\n"
         "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass", ("timeout", "killed")),
    Case("alarm_signal", "time", "import signal, time\nsignal.alarm(1)\ntime.sleep(5)", ("killed", "timeout")),
    Case("repr_never_returns", "time", "class A:\n    def __repr__(self):\n        while True: pass\nA()",
         ("timeout", "killed", "no_output", "ok")),
    # --- processes
    Case("fork_bomb", "process",
         "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
         ("timeout", "killed")),
    Case("fork_count_then_return", "process",
         "import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n    except OSError as e:\n"
         "        print('fork refused after', n, type(e).__name__); break\n    if pid == 0:\n        time.sleep(600)\n"
         "    n += 1", ("ok", "error")),
    Case("setsid_orphan", "process",
         "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nprint('parent side returns')",
         ("ok",)),
    Case("thread_bomb", "process",
         "import threading, time\nts = []\nwhile True:\n"
         "    t = threading.Thread(target=time.sleep, args=(600,), daemon=True)\n"
         "    t.start(); ts.append(t)", ("error", "memory")),
    Case("background_spinning_thread", "process",
         "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\n"
         "print('started')",
         ("ok",)),
    Case("os_system", "process", "import os\nprint(os.system('id > @CANARY@/pwned; rm -rf @CANARY@'))", ANY),
    Case("subprocess_run", "process",
         "import subprocess\nprint(subprocess.run(['/bin/sh', '-c', 'cat /etc/passwd'], capture_output=True).stdout)",
         FAIL, (PASSWD_MARKER,)),
    Case("os_exec", "process", "import os\nos.execv('/bin/sh', ['/bin/sh', '-c', 'touch @CANARY@/x'])", FAIL),
    # --- memory and output
    Case("memory_bomb_bytearray", "memory", "x = bytearray(64 * 1024**3)", ("memory", "killed")),
    Case("memory_bomb_growth", "memory", "xs = []\nwhile True:\n    xs.append(' ' * 10**7)",
         ("memory", "killed", "timeout")),
    Case("memory_bomb_numpy", "memory", "a = np.ones((10**6, 10**4))", ("memory", "killed")),
    Case("huge_output_string", "output", "print('x' * 10**7)", ("output_truncated",)),
    Case("huge_output_lines", "output", "for i in range(300000):\n    print(i)", ("output_truncated",)),
    Case("huge_repr_last_expression", "output", "'y' * 10**7", ("output_truncated", "ok", "no_output")),
    Case("scratch_file_too_big", "memory", "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (200 * 1024**2))",
         ("error", "memory", "killed")),
    Case("scratch_inode_bomb", "memory", "import os\nfor i in range(100000):\n    open(f'f{i}', 'w').close()",
         ("error",)),
    # --- network
    Case("socket_loopback_listener", "network",
         "import socket\ns = socket.create_connection(('127.0.0.1', @PORT@), timeout=2)\ns.sendall(b'leak')", FAIL,
         require=("Network is unreachable",)),
    Case("socket_external", "network",
         "import socket\ns = socket.create_connection(('192.0.2.1', 80), timeout=2)\ns.sendall(b'leak')", FAIL,
         require=("Network is unreachable",)),
    Case("dns_lookup", "network", "import socket\nprint(socket.getaddrinfo('example.com', 80))", FAIL),
    Case("udp_send", "network",
         "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('192.0.2.1', 53))", FAIL,
         require=("Network is unreachable",)),
    # --- filesystem reads
    Case("read_etc_passwd", "read", "print(open('/etc/passwd').read())", FAIL, (PASSWD_MARKER,)),
    Case("list_shared_data", "read", "import os\nprint(os.listdir('@DATA@'))", FAIL),
    Case("read_repo_file", "read", "print(open('@REPO@/balms/paths.py').read())", FAIL, ("PROJECT_ROOT",)),
    Case("read_proc_environ", "read", "print(open('/proc/1/environ').read())", FAIL),
    # --- filesystem writes
    Case("write_canary", "write", "open('@CANARY@/a.txt', 'w').write('pwned')", FAIL),
    Case("delete_canary", "write", "import os, shutil\nos.remove('@CANARY@/a.txt')\nshutil.rmtree('@CANARY@')", FAIL),
    Case("write_repo", "write", "open('@GUARD@', 'w').write('pwned')", FAIL),
    Case("chroot_escape", "write",
         "import os\nos.makedirs('jail', exist_ok=True)\nos.chroot('jail')\nos.chdir('../../../..')\nos.chroot('.')\n"
         "print(os.listdir('/'))", FAIL),
    # --- privilege and limits
    Case("setuid_root", "privilege", "import os\nos.setuid(0)", FAIL),
    Case("ctypes_libc", "privilege",
         "import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.setuid(0), libc.unshare(0x20000), libc.chroot(b'..'),\n"
         "      libc.mount(b'none', b'/', b'proc', 0, None))\nopen('@CANARY@/c.txt', 'w')", FAIL),
    Case("raise_rlimits", "privilege",
         "import resource\nresource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))",
         FAIL),
    Case("import_unavailable_module", "privilege", "import requests", FAIL),
    # --- killing the harness
    Case("kill_parent_ppid", "kill", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('still here')",
         ANY),
    Case("kill_parent_pid", "kill", "import os, signal\nos.kill(@PARENT@, signal.SIGKILL)", FAIL),
    Case("kill_everything", "kill", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived')", ANY),
    Case("kill_own_group", "kill", "import os, signal\nos.killpg(0, signal.SIGKILL)", ANY),
    # --- exits and broken code
    Case("sys_exit", "exit", "import sys\nsys.exit(3)", ("error",)),
    Case("os_exit", "exit", "import os\nos._exit(1)", ("killed",)),
    Case("keyboard_interrupt", "exit", "raise KeyboardInterrupt", ("error",)),
    Case("base_exception", "exit", "class Boom(BaseException):\n    pass\nraise Boom('x')", ("error",)),
    Case("syntax_error", "broken", "def f(:\n    pass", ("error",)),
    Case("null_byte", "broken", "print(1)\x00", ("error",)),
    Case("deep_recursion", "broken", "def f(n):\n    return f(n + 1)\nf(0)", ("error",)),
    Case("c_stack_overflow", "broken",
         "import sys\nsys.setrecursionlimit(10**8)\nx = []\nfor _ in range(2 * 10**5):\n    x = [x]\nrepr(x)",
         ("error", "killed", "memory", "timeout")),
    Case("close_stdout", "broken", "import sys\nsys.stdout.close()\nprint('x')", ("error",)),
    Case("close_all_fds", "broken",
         "import os\nfor fd in range(256):\n    try:\n        os.close(fd)\n    except OSError:\n"
         "        pass\nprint('closed')", ("killed",)),
    Case("forge_protocol", "broken", "import os, struct\nfor fd in range(3, 64):\n    try:\n"
         "        os.write(fd, struct.pack('>I', 2**31) + b'{')\n    except OSError:\n        pass", ANY),
    Case("read_stdin", "broken", "input()", ("error",)),
    Case("repr_raises", "broken", "class A:\n    def __repr__(self):\n        raise RuntimeError('bad repr')\nA()",
         ("error", "ok", "no_output")),
    Case("clobber_builtins", "broken", "import builtins\nbuiltins.print = None\nbuiltins.len = None", ANY),
]

PROBE = "print('probe', sum(range(10)), len(daily))"


def _probe_ok(text: str, n_rows: int) -> bool:
    return f"probe 45 {n_rows}" in text


def checksum(folder: Path) -> str:
    """Names, modes and contents of everything under `folder`."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files) + dirs:
            p = Path(root, name)
            st = p.lstat()
            h.update(f"{p.relative_to(folder)}|{st.st_mode}|{st.st_size}".encode())
            if p.is_file():
                h.update(p.read_bytes())
    h.update(f"root|{folder.stat().st_mode}".encode())
    return h.hexdigest()


def demo_frames(n_days: int = 30, seed: int = 0) -> dict[str, pd.DataFrame]:
    """A small daily frame for the suite (seeded)."""
    rng = np.random.default_rng(seed)
    return {"daily": pd.DataFrame({"date": pd.date_range("2021-01-01", periods=n_days, freq="D"),
                                   "steps": rng.integers(2000, 15000, n_days).astype(float),
                                   "sleep_min": rng.normal(420, 40, n_days).round(1)})}


def _listener_hits(srv: socket.socket) -> int:
    hits = 0
    while True:
        try:
            conn, _ = srv.accept()
        except (BlockingIOError, OSError):
            return hits
        hits += 1
        conn.close()


def run_suite(mode: str = "improved", limits: SandboxLimits | None = None, cases: list[Case] | None = None,
              progress=None, allow_degraded: bool | None = None) -> dict:
    """Run every case in ONE episode (the episode must survive them all); return the selftest report.
    Raises SandboxUnavailable (before any case runs) where isolation is missing and degraded is not allowed."""
    limits = limits or SandboxLimits(wall_s=2.0, cpu_s=2, mem_mb=512, max_output_chars=2000)
    cases = CASES if cases is None else cases
    frames = demo_frames()
    n_rows = len(frames["daily"])
    canary = Path(tempfile.mkdtemp(prefix="balms-canary-"))
    for name in ("a.txt", "b.txt"):
        (canary / name).write_text(f"canary {name}\n")
        os.chmod(canary / name, 0o666)
    os.chmod(canary, 0o777)  # world-writable: only the sandbox protects it
    guard = PROJECT_ROOT / f".sandbox_guard_{os.getpid()}"
    data_dir = PROJECT_ROOT.parent / "shared" / "data"
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    before = checksum(canary)
    results = []
    t_start = time.monotonic()
    try:
        with Sandbox(frames, mode=mode, limits=limits, allow_degraded=allow_degraded) as sb:
            for case in cases:
                code = (case.code.replace("@CANARY@", str(canary)).replace("@PORT@", str(port))
                        .replace("@PARENT@", str(os.getpid())).replace("@REPO@", str(PROJECT_ROOT))
                        .replace("@DATA@", str(data_dir)).replace("@GUARD@", str(guard)))
                obs = sb.run(code)
                follow = sb.run(PROBE)
                reasons = []
                if obs.status not in case.expect:
                    reasons.append(f"status {obs.status} not in {list(case.expect)}")
                leaked = [m for m in case.forbid if m in obs.text]
                if leaked:
                    reasons.append(f"leaked {leaked}")
                missing = [m for m in case.require if m not in obs.text]
                if missing:
                    reasons.append(f"expected {missing} in the observation")
                if follow.status != "ok" or not _probe_ok(follow.text, n_rows):
                    reasons.append(f"episode did not continue: {follow.status} {follow.text[:120]!r}")
                after = checksum(canary)
                if after != before:
                    reasons.append("canary folder changed")
                    before = after
                if guard.exists():
                    reasons.append(f"wrote outside scratch: {guard}")
                    guard.unlink()
                hits = _listener_hits(srv)
                if hits:
                    reasons.append(f"loopback listener got {hits} connection(s)")
                results.append({"name": case.name, "category": case.category, "status": obs.status,
                                "expected": list(case.expect), "error_type": obs.error_type,
                                "duration_s": round(obs.duration_s, 3), "text": obs.text[:300],
                                "followup_ok": not any(r.startswith("episode") for r in reasons),
                                "contained": not reasons, "reasons": reasons})
                if progress:
                    progress(results[-1])
            mechanisms = dict(sb.mechanisms)
            restarts = sb.restarts
    finally:
        srv.close()
        for root, dirs, files in os.walk(canary, topdown=False):
            for n in files:
                os.unlink(os.path.join(root, n))
            for n in dirs:
                os.rmdir(os.path.join(root, n))
        os.rmdir(canary)
    return {"tried": len(results), "contained": sum(r["contained"] for r in results), "mode": mode,
            "worker_restarts": restarts, "wall_s": round(time.monotonic() - t_start, 1),
            "limits": limits.__dict__, "mechanisms": mechanisms, "mechanisms_applied": mechanisms["applied"],
            "mechanisms_missing": mechanisms["missing"], "degraded": mechanisms["degraded"], "cases": results}
