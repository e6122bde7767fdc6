"""PHIA's code executor: runs LLM-written Python over a user's DataFrames in an isolated child process.

Two observation contracts (the paper's failure analysis hinges on the difference):
- `faithful` (the original PHIA): every block runs in a fresh process and a fresh scope with the frames
  re-provided, only printed output is observed, silence observes exactly "Code executed (no output)" (F1) and a
  name from an earlier block raises NameError (F2);
- `improved`: one worker per episode keeps state, the last expression is displayed as in a notebook, errors come
  back as a short traceback of the user's own frames, and the prompt gets a `schema_card`.

Safety comes from Linux, not from inspecting the code: see `worker.py` (namespaces, chroot into a private
tmpfs, rlimits, a dedicated uid as root or a user namespace without capabilities otherwise). The parent adds the
wall timeout (kill the worker's process group, restart it) and never trusts the child's bytes beyond bounded
JSON. It fails closed: a worker that could not apply every mechanism in REQUIRED is refused before any code is
sent, unless the caller opted into a degraded sandbox (`allow_degraded=True` or BALMS_SANDBOX_ALLOW_DEGRADED=1);
`Sandbox.mechanisms` then lists exactly what was and was not applied.
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

NO_OUTPUT = "Code executed (no output)"
WORKER_SCRIPT = Path(__file__).with_name("worker.py")
STATUSES = ("ok", "no_output", "error", "timeout", "killed", "memory", "output_truncated")
ALLOW_DEGRADED_ENV = "BALMS_SANDBOX_ALLOW_DEGRADED"
# Test hook: comma-separated namespaces (user, net, mount, pid) the worker must treat as refused by the kernel,
# so the refusal and the degraded path can be exercised on a machine where everything works.
SIMULATE_DENIED_ENV = "BALMS_SANDBOX_SIMULATE_DENIED"
RLIMITS = ("RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_CPU")
# Every mechanism the worker reports, in setup order. `uid_drop` (root) and a capability drop inside `userns`
# (unprivileged) are the two ways to reach `no_capabilities` (measured with capget after setup), so neither is
# required by itself.
MECHANISMS = ("separate_process", "own_session", "userns", "netns", "mountns", "pidns", "scratch_tmpfs", "chroot",
              "rlimits", "uid_drop", "no_capabilities", "no_new_privs")
REQUIRED = ("separate_process", "netns", "mountns", "pidns", "scratch_tmpfs", "chroot", "rlimits", "no_capabilities",
            "no_new_privs")
_uid_counter = itertools.count()
_verified: set = set()  # sandbox configurations whose first worker already passed the isolation check
# Every file a process's sandboxes write (the frames: a participant's sensing data; scratch; worker logs) lives
# under one folder of that process, `<tmp>/balms-sbx-run-<pid>-*`, removed at exit. A SIGKILLed process cannot
# remove its own, so each folder holds a lock its process keeps for its whole life (the kernel releases it at any
# death): the next process to start a sandbox removes every folder whose lock it can take (`sweep_stale`).
RUN_PREFIX = "balms-sbx-run-"
LOCK_NAME = ".owner.lock"
_run: tuple[int, Path, int] | None = None  # (pid, folder, its held lock's fd) of this process
_run_lock = threading.Lock()


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove the run folders of dead processes (their lock is free); returns what was removed."""
    removed = []
    for d in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{RUN_PREFIX}*")):
        try:
            if d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.geteuid():
                continue
            fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:  # no lock yet (its process is making it) or not ours: leave it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its process is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        finally:
            os.close(fd)
    return removed


def run_dir() -> Path:
    """This process's folder for its sandboxes' files (made at its first sandbox, after sweeping dead ones')."""
    global _run
    with _run_lock:
        if _run is not None and _run[0] == os.getpid() and _run[1].is_dir():
            return _run[1]
        sweep_stale()
        while True:
            d = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-"))  # mode 0700
            fd = os.open(d / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits while a sweeper that saw it unlocked removes it
            try:
                if os.stat(d / LOCK_NAME).st_ino == os.fstat(fd).st_ino:
                    break
            except OSError:
                pass
            os.close(fd)  # swept between mkdtemp and flock: make another
        _run = (os.getpid(), d, fd)
        atexit.register(_remove_run_dir, os.getpid(), d, fd)
        return d


def _remove_run_dir(pid: int, d: Path, fd: int) -> None:
    if os.getpid() != pid:  # a forked child's exit leaves its parent's folder alone
        return
    shutil.rmtree(d, ignore_errors=True)
    try:
        os.close(fd)
    except OSError:
        pass


class SandboxError(RuntimeError):
    """The sandbox itself (not the user's code) failed, e.g. the worker could not start."""


class SandboxUnavailable(SandboxError):
    """The isolation that model-written code needs is missing here; no code was run."""

    def __init__(self, message: str, mechanisms: dict):
        super().__init__(message)
        self.mechanisms = mechanisms
        self.applied = list(mechanisms.get("applied", []))
        self.missing = list(mechanisms.get("missing", []))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def assess(mech: dict) -> tuple[list[str], list[str]]:
    """(applied, not applied) mechanism names, from what the worker measured on itself."""
    def holds(name: str) -> bool:
        if name == "rlimits":
            return set(RLIMITS) <= set(mech.get("rlimits") or {})
        if name == "netns":
            return mech.get("netns") is True and mech.get("netns_changed") is True
        return mech.get(name) is True

    applied = [m for m in MECHANISMS if holds(m)]
    return applied, [m for m in MECHANISMS if m not in applied]


def _read_sysctl(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def how_to_enable() -> str:
    """What to change on this machine so the worker gets its namespaces (read from the sysctls present)."""
    if os.geteuid() == 0:
        return ("even as root the kernel refused the namespaces: inside a container, unshare(2) needs "
                "CAP_SYS_ADMIN and a seccomp profile that allows it (e.g. docker run --cap-add SYS_ADMIN "
                "--security-opt seccomp=unconfined), or run on a VM / the host")
    fixes = []
    if _read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        fixes.append("sysctl -w kernel.unprivileged_userns_clone=1")
    if _read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        fixes.append("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
    if _read_sysctl("/proc/sys/user/max_user_namespaces") == "0":
        fixes.append("sysctl -w user.max_user_namespaces=15000")
    if fixes:
        how = "allow unprivileged user namespaces (as root: " + "; ".join(fixes) + ")"
    else:
        how = ("allow unprivileged user namespaces (kernel.unprivileged_userns_clone=1, "
               "kernel.apparmor_restrict_unprivileged_userns=0 and user.max_user_namespaces>0 where those sysctls "
               "exist; in a container, a seccomp profile that allows unshare(2))")
    return how + ", or run as root"


def refusal_message(mech: dict) -> str:
    applied, missing = mech["applied"], mech["missing"]
    req_missing = [m for m in REQUIRED if m in missing]
    why = "; ".join(mech.get("warnings") or []) or "no reason reported"
    sim = mech.get("simulated_denied")
    sim_note = f" (simulated with {SIMULATE_DENIED_ENV}={','.join(sim)})" if sim else ""
    return (f"balms sandbox refuses to run model-written code: the isolation it needs is unavailable here{sim_note}. "
            f"Not applied: {', '.join(req_missing)}. Applied: {', '.join(applied) or 'none'}. Why: {why}. "
            f"To enable it: {how_to_enable()}; check with `python -m balms.cli sandbox selftest`. To run anyway "
            f"with only the mechanisms listed as applied, opt in explicitly: {ALLOW_DEGRADED_ENV}=1, "
            "Sandbox(..., allow_degraded=True), PHIA option allow_degraded=True or `balms sandbox selftest "
            "--allow-degraded`; every record and report then lists the mechanisms applied.")


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # per block, measured by the parent
    cpu_s: int = 10  # per block (soft RLIMIT_CPU); the hard limit is cpu_s * 20 per worker
    mem_mb: int = 1024  # address space on top of what numpy/pandas/frames already use
    max_output_chars: int = 4000  # observation text bound
    scratch_mb: int = 64  # private tmpfs size and RLIMIT_FSIZE
    nproc: int = 16  # RLIMIT_NPROC for the sandbox uid (threads count too)
    max_rows: int = 40  # rows shown when the last expression is a DataFrame/Series
    startup_s: float = 60.0  # worker start (imports + frames) timeout, not counted in a block
    # CPU priority of the worker (nice increment): its start-up (interpreter, pandas, frames) costs ~0.3 CPU-s,
    # and a grid in flight starts hundreds of them; niced, they use the CPU the harness leaves, so the threads
    # that feed the model servers are never queued behind them (issue 27: on 2 cores the servers idled ~60 s)
    nice: int = 10


@dataclass
class Observation:
    text: str  # what the model observes
    status: str  # one of STATUSES
    error_type: str | None = None
    error_message: str | None = None
    duration_s: float = 0.0  # send -> answer once the worker is ready (excludes a fresh process's start-up)
    stdout_chars: int = 0  # characters the code printed, before truncation
    notes: list[str] = field(default_factory=list)  # sandbox events (restart, state lost, ...)

    def to_dict(self) -> dict:
        return asdict(self)


def _allocate_uid() -> int:
    """A uid no account uses, distinct per sandbox, so RLIMIT_NPROC and kill(-1) only see this worker."""
    return 200_000 + (os.getpid() * 97 + next(_uid_counter)) % 700_000


class _Worker:
    """One child process and its two pipes."""

    def __init__(self, cfg: dict):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/", "TMPDIR": "/tmp", "PYTHONHASHSEED": "0"}
        self.log_path = Path(cfg["private"]) / f"worker-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", str(WORKER_SCRIPT), str(req_r), str(resp_w), str(os.getpid())],
                pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True, env=env, cwd="/", close_fds=True)
        os.close(req_r)
        os.close(resp_w)
        self.mechanisms: dict | None = None
        self.assessed: dict | None = None  # its mechanisms as checked against REQUIRED by the Sandbox that uses it
        self.started = time.monotonic()
        self.send(cfg)

    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode()
        os.write(self.req_w, struct.pack(">I", len(data)))
        view = memoryview(data)
        while view:
            n = os.write(self.req_w, view)
            view = view[n:]

    def recv(self, deadline: float, max_bytes: int) -> dict | None:
        """A message, or None on timeout. Raises EOFError if the child closed the pipe (it died)."""
        head = self._read(4, deadline)
        if head is None:
            return None
        (n,) = struct.unpack(">I", head)
        if n > max_bytes:
            raise ValueError(f"worker message of {n} bytes exceeds {max_bytes}")
        body = self._read(n, deadline)
        if body is None:
            return None
        obj = json.loads(body.decode("utf-8"))
        if not isinstance(obj, dict):
            raise ValueError("worker message is not an object")
        return obj

    def _read(self, n: int, deadline: float) -> bytes | None:
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # poll, not select: select() refuses a descriptor above 1,024, and a client with every cell in flight
            # holds more (its connections to the servers, the stores' readers): PHIA failed to start (issue 27)
            poller = select.poll()
            poller.register(self.resp_r, select.POLLIN)
            if not poller.poll(left * 1000):
                return None
            chunk = os.read(self.resp_r, n - len(buf))
            if not chunk:
                raise EOFError("worker exited")
            buf += chunk
        return buf

    def wait_ready(self, timeout: float) -> dict:
        try:
            msg = self.recv(time.monotonic() + timeout, 1 << 20)
        except (EOFError, ValueError) as e:
            raise SandboxError(f"sandbox worker failed to start: {e}; log: {self._log_tail()}") from e
        if msg is None:
            self.kill()
            raise SandboxError(f"sandbox worker not ready after {timeout:.0f}s; log: {self._log_tail()}")
        if not msg.get("ready"):
            self.kill()
            raise SandboxError(f"sandbox worker setup failed: {msg.get('error')}\n{msg.get('traceback', '')}")
        self.mechanisms = msg["mechanisms"]
        return self.mechanisms

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the whole process group (the pid namespace dies with its pid 1)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.req_w = self.resp_r = -1
        try:
            self.log_path.unlink()
        except OSError:
            pass


_starters: ThreadPoolExecutor | None = None
_starters_lock = threading.Lock()


def _starter_pool() -> ThreadPoolExecutor:
    """The process's pool that starts workers ahead of time, one per CPU at once. Why: a worker's start-up
    (interpreter, pandas, frames) costs ~0.3 CPU-s, and with a grid in flight hundreds of PHIA samples asked for
    one together; on 2 cores that start-up storm held the CPU for a minute while the servers idled (issue 27).
    A start still queued when its block arrives is cancelled and done on demand instead (`_ready_worker`), and one
    queued for a block that never comes (the episode answered) is never started at all."""
    global _starters
    with _starters_lock:
        if _starters is None:
            _starters = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1),
                                           thread_name_prefix="balms-sandbox-start")
        return _starters


def _start_ready(cfg: dict, startup_s: float) -> _Worker:
    """A worker, started and ready (runs on `_starter_pool`)."""
    w = _Worker(cfg)
    try:
        w.wait_ready(startup_s)
    except BaseException:
        w.kill()
        raise
    return w


def _kill_unused(f: Future) -> None:
    if not f.cancelled() and f.exception() is None:
        f.result().kill()


class Sandbox:
    """Context manager; `run(code)` returns an Observation and never raises for anything the code does."""

    def __init__(self, frames: dict[str, pd.DataFrame], mode: str = "faithful",
                 limits: SandboxLimits | None = None, isolate: bool = True, allow_degraded: bool | None = None):
        """`allow_degraded`: run even where a mechanism in REQUIRED is missing (None: read
        BALMS_SANDBOX_ALLOW_DEGRADED). Raises SandboxUnavailable otherwise, at the latest before the first block
        is sent; the first Sandbox of a process checks already here, before any model is asked for code."""
        if mode not in ("faithful", "improved"):
            raise ValueError(f"mode must be 'faithful' or 'improved', got {mode!r}")
        for name, df in frames.items():
            if not name.isidentifier() or name in ("pd", "np"):
                raise ValueError(f"frame name {name!r} must be a Python identifier other than pd/np")
            if not isinstance(df, pd.DataFrame):
                raise TypeError(f"frame {name!r} must be a pandas DataFrame, got {type(df).__name__}")
        env_allow = _truthy(os.environ.get(ALLOW_DEGRADED_ENV))
        self.allow_degraded = env_allow if allow_degraded is None else bool(allow_degraded)
        self._allowed_by = (f"{ALLOW_DEGRADED_ENV}=1" if allow_degraded is None else "allow_degraded=True")
        denied = sorted({d.strip() for d in os.environ.get(SIMULATE_DENIED_ENV, "").split(",") if d.strip()})
        unknown = sorted(set(denied) - {"user", "net", "mount", "pid"})
        if unknown:
            raise ValueError(f"{SIMULATE_DENIED_ENV}: unknown namespace(s) {unknown}; use user, net, mount, pid")
        self.mode = mode
        self.limits = limits or SandboxLimits()
        # under this process's run folder (`run_dir`: removed at exit, swept after a kill); 0700 folders, the
        # frames 0600: readable by this user only, which the worker is while it loads them (before its uid drop)
        root = run_dir()
        self.private = Path(tempfile.mkdtemp(prefix="priv-", dir=root))
        os.chmod(self.private, 0o700)
        self.scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=root))
        self.uid = _allocate_uid()
        if os.geteuid() == 0:
            os.chown(self.scratch, self.uid, self.uid)
        os.chmod(self.scratch, 0o700)
        frames_path = self.private / "frames.pkl"
        with os.fdopen(os.open(frames_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as fh:
            pd.to_pickle(dict(frames), fh)
        lim = self.limits
        self._cfg = {"mode": mode, "scratch": str(self.scratch), "private": str(self.private), "uid": self.uid,
                     "frames_path": str(frames_path), "mem_mb": lim.mem_mb, "cpu_s": lim.cpu_s, "nice": lim.nice,
                     "scratch_mb": lim.scratch_mb, "nproc": lim.nproc, "max_output_chars": lim.max_output_chars,
                     "max_rows": lim.max_rows, "isolate": isolate, "simulate_denied": denied}
        self._worker: _Worker | None = None
        self._next: Future | None = None  # the next block's worker, being started ahead of time
        self._block = 0
        self.restarts = 0
        self.mechanisms: dict = {}
        self._warned = False
        self.closed = False
        self._prestart()  # faithful: this is the first block's fresh process, started ahead of time
        key = (isolate, self.allow_degraded, tuple(denied))
        if key not in _verified:
            try:
                self._ready_worker()
            except BaseException:
                self.close()
                raise
            _verified.add(key)

    # ------------------------------------------------------------------ lifecycle
    def _spawn(self) -> None:
        self._worker = _Worker(self._cfg)

    def _prestart(self) -> None:
        """Start the next block's worker ahead of time, on the process's starter pool (`_starter_pool`)."""
        self._next = _starter_pool().submit(_start_ready, self._cfg, self.limits.startup_s)

    def _ready_worker(self) -> _Worker:
        if self._worker is None:
            nxt, self._next = self._next, None
            if nxt is not None and not nxt.cancel():  # started ahead of time (or starting): take it
                self._worker = nxt.result()
            else:  # none, or still queued behind other starts: start it here, now
                self._spawn()
        w = self._worker
        if w.assessed is None:
            mech = dict(w.mechanisms if w.mechanisms is not None else w.wait_ready(self.limits.startup_s))
            applied, missing = assess(mech)
            mech.update(applied=applied, missing=missing, degraded=any(m in missing for m in REQUIRED))
            w.assessed = mech
            if mech["degraded"]:
                if not self.allow_degraded:
                    self._discard_worker()
                    self.mechanisms = mech  # what refused this sandbox's code
                    raise SandboxUnavailable(refusal_message(mech), mech)
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"balms sandbox running DEGRADED ({self._allowed_by}): applied "
                                  f"{', '.join(applied) or 'none'}; NOT applied {', '.join(missing)}. Why: "
                                  f"{'; '.join(mech.get('warnings') or []) or 'no reason reported'}",
                                  RuntimeWarning, stacklevel=3)
        return w

    def _discard_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._discard_worker()
        nxt, self._next = self._next, None
        if nxt is not None and not nxt.cancel():  # being started or ready, unused: kill it once it is up
            nxt.add_done_callback(_kill_unused)
        shutil.rmtree(self.private, ignore_errors=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ running
    def run(self, code: str) -> Observation:
        if self.closed:
            raise SandboxError("sandbox is closed")
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        self._block += 1
        w = self._ready_worker()
        # the workers that ran code, only: the process's first Sandbox checks one before any block and later ones
        # do not, so a record of an episode that ran no code must not depend on which Sandbox came first
        self.mechanisms = w.assessed
        t0 = time.monotonic()
        lim = self.limits
        resp, failure = None, None
        try:
            w.send({"op": "run", "code": code, "block": self._block})
            resp = w.recv(t0 + lim.wall_s, max_bytes=8 * lim.max_output_chars + (1 << 16))
            if resp is None:
                failure = "timeout"
        except (EOFError, BrokenPipeError, OSError):
            failure = "killed"
        except (ValueError, UnicodeDecodeError):
            failure = "protocol"
        duration = time.monotonic() - t0
        if failure is not None:
            exit_code = w.proc.poll()
            self._discard_worker()
            self.restarts += 1
            obs = self._failure_observation(failure, exit_code, duration)
        else:
            obs = self._observation(resp, duration)
            leftover = int(resp.get("threads", 1) or 1) > 1
            if self.mode == "faithful" or leftover or obs.status == "memory":
                self._discard_worker()
                if obs.status == "memory" and self.mode == "improved" and not leftover:
                    # whatever the code still holds would starve every later block
                    self.restarts += 1
                    obs.notes.append("memory limit hit; the worker was restarted and variables were reset")
                    obs.text = self._truncate(obs.text + "\n[sandbox: memory limit hit; worker restarted, "
                                              "variables were reset]")
                if leftover and self.mode == "improved":
                    self.restarts += 1
                    obs.notes.append(f"{resp['threads'] - 1} background thread(s) were left running; "
                                     "the worker was restarted and variables were reset")
                    obs.text = self._truncate(obs.text + "\n[sandbox: background threads left running; "
                                              "worker restarted, variables were reset]")
        if self._worker is None:
            self._prestart()  # fresh process for the next block, started while the model thinks
        return obs

    def _truncate(self, text: str) -> str:
        n = self.limits.max_output_chars
        if len(text) <= n:
            return text
        return text[:n] + f"\n... [output truncated: {len(text) - n} more characters]"

    def _failure_observation(self, failure: str, exit_code: int | None, duration: float) -> Observation:
        state = " Variables from earlier blocks were lost." if self.mode == "improved" else ""
        if failure == "timeout":
            text = (f"TimeoutError: the code block did not finish within {self.limits.wall_s:g} s and was stopped."
                    f"{state}")
            return Observation(text, "timeout", "TimeoutError", text, duration, 0, ["worker killed and restarted"])
        if failure == "protocol":
            text = f"SandboxError: the code corrupted the executor's channel; the executor was restarted.{state}"
            return Observation(text, "killed", "SandboxError", text, duration, 0, ["protocol violation"])
        how = f" (exit code {exit_code})" if exit_code is not None else ""
        text = (f"ProcessKilled: the code block terminated the Python process{how} "
                f"(e.g. os._exit, a fatal signal, a CPU or memory limit); the executor was restarted.{state}")
        return Observation(text, "killed", "ProcessKilled", text, duration, 0, ["worker died and was restarted"])

    def _observation(self, r: dict, duration: float) -> Observation:
        lim = self.limits
        stdout = str(r.get("stdout") or "")
        chars = int(r.get("stdout_chars") or 0)
        etype = r.get("error_type")
        emsg = r.get("error_message")
        trunc_note = ""
        if chars > len(stdout):
            trunc_note = f"\n... [output truncated: {chars - len(stdout)} more characters]"
        if etype:
            status = "memory" if r.get("is_memory") else "error"
            err = str(r.get("traceback") or f"{etype}: {emsg}")
            text = (stdout + trunc_note).rstrip("\n")
            text = (text + "\n" + err) if text else err
            return Observation(self._truncate(text), status, str(etype), emsg, duration, chars)
        display = r.get("display")
        if self.mode == "faithful":
            if not stdout:
                return Observation(NO_OUTPUT, "no_output", None, None, duration, chars)
            text = stdout + trunc_note
        else:
            parts = [p for p in (stdout.rstrip("\n") + trunc_note if stdout else "", display) if p]
            if not parts:
                names = r.get("defined") or []
                hint = f" Defined or changed: {', '.join(names)}." if names else ""
                return Observation(f"{NO_OUTPUT}.{hint} End a block with an expression or print() to see values.",
                                   "no_output", None, None, duration, chars)
            text = "\n".join(parts)
        status = "output_truncated" if (trunc_note or len(text) > lim.max_output_chars) else "ok"
        return Observation(self._truncate(text), status, None, None, duration, chars)
