"""Child side of the PHIA code sandbox (run as a script, never imported by user code).

Why a separate script: the parent starts it with `python -I <this file> REQ_FD RESP_FD PARENT_PID` in a new
session, so the code an LLM wrote never shares an interpreter, a process group or (after setup) any privilege
with the harness. Setup order matters and is the whole security story:

  1. new network, mount and pid namespaces via unshare(2); when not root, together with a new user namespace in
     which the calling uid is mapped to the sandbox uid (so the unprivileged caller may mount and chroot inside
     it); fork so the executor is pid 1 of the new pid namespace, in its own session (when it dies, every process
     it spawned dies with it, and the code cannot signal the outer process group);
  2. a size-capped private tmpfs is mounted on the scratch folder (only this process tree sees it);
  3. numpy/pandas/stdlib modules are imported and warmed up, the user's frames are loaded from a private file;
  4. chroot into the scratch tmpfs, so nothing else of the filesystem exists any more;
  5. resource limits (CPU, address space, processes, file size, open files, core=0), then the privilege drop:
     as root, switch to a dedicated unused uid/gid; in a user namespace, drop every capability (effective,
     permitted, inheritable, ambient and bounding set); then no_new_privs and the parent-death signal.

Messages are 4-byte big-endian length + UTF-8 JSON in both directions; the parent never unpickles anything the
child sends. Every mechanism is reported as applied or not (with the reason as a warning), measured here; the
parent decides whether that is enough to run model-written code.
"""

from __future__ import annotations

import os
import sys

# Numeric libraries must not start thread pools (threads count against RLIMIT_NPROC and the address space).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS"):
    os.environ[_v] = "1"

import ast  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

_write = os.write
_read = os.read
_kill = os.kill
_waitpid = os.waitpid
_monotonic = time.monotonic
_sleep = time.sleep
_getpid = os.getpid
_exit = os._exit
_dumps = json.dumps
_loads = json.loads

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 2
MS_NODEV = 4
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# Namespace names accepted by the parent's BALMS_SANDBOX_SIMULATE_DENIED test hook
NS_FLAGS = {"user": CLONE_NEWUSER, "net": CLONE_NEWNET, "mount": CLONE_NEWNS, "pid": CLONE_NEWPID}

_libc = ctypes.CDLL(None, use_errno=True)

# Modules the user code may use; imported before the chroot because nothing can be imported after it.
PRELOAD = (
    "math statistics json datetime re collections itertools functools random time io string operator "
    "decimal fractions heapq bisect calendar textwrap warnings copy dataclasses typing socket encodings.idna "
    "encodings.ascii encodings.latin_1 encodings.utf_16 encodings.cp1252 numpy pandas"
).split()


# ----------------------------------------------------------------------------------------- protocol
def send(fd: int, obj: dict) -> None:
    data = _dumps(obj, ensure_ascii=True, default=str).encode("ascii")
    buf = struct.pack(">I", len(data)) + data
    while buf:
        n = _write(fd, buf)
        buf = buf[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        b = _read(fd, n - got)
        if not b:
            raise EOFError("parent closed the request pipe")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def recv(fd: int) -> dict:
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    return _loads(_read_exact(fd, n).decode("utf-8"))


# ----------------------------------------------------------------------------------------- libc helpers
def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def unshare(flags: int, denied: frozenset = frozenset()) -> None:
    """unshare(2); a namespace named in `denied` fails with EPERM as a kernel without it would (test hook)."""
    refused = sorted(name for name, f in NS_FLAGS.items() if flags & f and name in denied)
    if refused:
        raise OSError(1, f"unshare: Operation not permitted (simulated: {', '.join(refused)} namespace denied)")
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def map_ids(inside: int, outside_uid: int, outside_gid: int) -> None:
    """Map the caller's uid/gid to `inside` in the user namespace it just created (one id each, as an
    unprivileged process may; setgroups must be denied before gid_map can be written)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{inside} {outside_uid} 1"),
                       ("gid_map", f"{inside} {outside_gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities() -> dict:
    """This process's capability sets (capget), as integers."""
    hdr, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(hdr), data), "capget")
    join = lambda k: getattr(data[0], k) | (getattr(data[1], k) << 32)  # noqa: E731
    return {k: join(k) for k in ("effective", "permitted", "inheritable")}


def drop_capabilities(last_cap: int) -> None:
    """Empty the bounding and ambient sets, then the effective/permitted/inheritable sets (in that order:
    dropping the bounding set needs CAP_SETPCAP)."""
    for cap in range(last_cap + 1):
        _check(_libc.prctl(ctypes.c_int(PR_CAPBSET_DROP), ctypes.c_ulong(cap), ctypes.c_ulong(0),
                           ctypes.c_ulong(0), ctypes.c_ulong(0)), f"prctl CAPBSET_DROP {cap}")
    _libc.prctl(ctypes.c_int(PR_CAP_AMBIENT), ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0),
                ctypes.c_ulong(0), ctypes.c_ulong(0))  # EINVAL on kernels without ambient caps: nothing to clear
    hdr, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(hdr), data), "capset")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl {option}")


def _ns_inode(kind: str) -> int | None:
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


# ----------------------------------------------------------------------------------------- setup
def setup(cfg: dict, parent_pid: int, mech: dict) -> tuple[dict, dict]:
    """Apply the remaining isolation mechanisms (filling `mech`); return (mech, frames). Runs in the pid-1 child."""
    warn = mech["warnings"].append
    isolate = cfg.get("isolate", True)
    root = mech["root_at_start"]
    scratch = cfg["scratch"]
    uid = int(cfg["uid"])

    # 2. private tmpfs on scratch (inside our own mount namespace)
    mech["scratch_tmpfs"] = False
    if isolate and mech.get("mountns"):
        try:
            mount(None, "/", None, MS_REC | MS_PRIVATE, None)
            opts = f"size={int(cfg['scratch_mb'])}m,nr_inodes=4096,mode=0700"
            if root or mech.get("userns"):  # owned by the uid the code will run as
                opts += f",uid={uid},gid={uid}"
            mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, opts)
            mech["scratch_tmpfs"] = True
        except OSError as e:
            warn(f"private tmpfs on scratch not mounted ({e}); scratch is the plain folder")

    # 3. imports, warm-up of lazy pandas paths, frames
    import importlib

    for m in PRELOAD:
        importlib.import_module(m)
    import numpy as np
    import pandas as pd

    _warm = pd.DataFrame({"d": pd.date_range("2020-01-01", periods=6, freq="12h"), "x": np.arange(6.0)})
    _warm["day"] = _warm["d"].dt.date
    _x = _warm[["d", "x"]]
    for op in (lambda: _x.describe().to_string(), lambda: _warm.groupby("day")["x"].agg(["mean", "std"]),
               lambda: _x.set_index("d").resample("D").mean(), lambda: _x["x"].rolling(2).mean(),
               lambda: _x["x"].pct_change(), lambda: _x.corr(numeric_only=True),
               lambda: _warm.pivot_table(index="day", values="x"), lambda: _x.merge(_x, on="d"),
               lambda: _x["x"].value_counts(), lambda: pd.to_datetime(["2020-01-02"]), lambda: repr(_warm),
               lambda: _x.to_json(), lambda: _x.sort_values("x").head().to_string(), lambda: _x["x"].quantile(0.5),
               lambda: np.percentile(_x["x"], 50), lambda: _x.isna().sum(), lambda: _x.dropna().fillna(0),
               lambda: pd.concat([_x, _x]), lambda: _x.nlargest(2, "x"), lambda: _x["x"].describe(),
               lambda: _x.groupby(_x["d"].dt.date)["x"].sum(), lambda: _x["d"].dt.strftime("%Y-%m-%d"),
               lambda: _x.to_dict("records"), lambda: _x.to_csv(), lambda: _x.agg(["mean", "median"])):
        try:
            op()
        except Exception as e:  # noqa: BLE001 - warm-up only
            mech.setdefault("warmup_failures", []).append(str(e))
    frames = pd.read_pickle(cfg["frames_path"]) if cfg.get("frames_path") else {}

    devnull = os.open("/dev/null", os.O_RDWR)
    vm_now = _vm_size_bytes()  # before the chroot hides /proc
    last_cap = _last_cap()

    # 4. chroot into scratch
    mech["chroot"] = False
    if isolate:
        try:
            os.chroot(scratch)
            os.chdir("/")
            mech["chroot"] = True
        except OSError as e:
            warn(f"chroot into scratch failed ({e}); the code can read whatever this uid can read")
            os.chdir(scratch)
    else:
        os.chdir(scratch)
        warn("isolation disabled by the caller")

    # 5. limits, then uid drop
    mem_mb = int(cfg["mem_mb"])
    as_limit = vm_now + mem_mb * 2**20
    limits = {
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_NOFILE": (64, 64),
        "RLIMIT_NPROC": (int(cfg["nproc"]), int(cfg["nproc"])),
        "RLIMIT_FSIZE": (int(cfg["scratch_mb"]) * 2**20, int(cfg["scratch_mb"]) * 2**20),
        "RLIMIT_AS": (as_limit, as_limit),
    }
    cpu_used = int(_cpu_seconds()) + 1
    cpu_hard = cpu_used + int(cfg["cpu_s"]) * int(cfg.get("cpu_blocks", 20))
    limits["RLIMIT_CPU"] = (min(cpu_hard, cpu_used + int(cfg["cpu_s"])), cpu_hard)
    applied = {}
    for name, (soft, hard) in limits.items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
            applied[name] = [soft, hard]
        except (OSError, ValueError) as e:
            warn(f"{name} not set ({e})")
    mech["rlimits"] = applied
    mech["address_space_baseline_mb"] = round(vm_now / 2**20)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversize writes raise OSError(EFBIG) instead of killing us

    mech["uid_drop"] = False
    if isolate and root:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability
        mech["uid_drop"] = True
        mech["uid"] = uid
    elif isolate and mech.get("userns"):
        try:
            drop_capabilities(last_cap)
        except OSError as e:
            warn(f"capabilities inside the user namespace not dropped ({e})")
        mech["uid"] = uid  # the namespace's only uid; the kernel still sees the calling user
    elif isolate:
        warn("not root and no user namespace: no uid switch; code runs as the calling user and can reach "
             "whatever that user can")
    try:
        caps = capabilities()
        mech["no_capabilities"] = not any(caps.values())  # measured, whichever way it was reached
        if not mech["no_capabilities"]:
            warn(f"capabilities still held: {caps}")
    except OSError as e:
        mech["no_capabilities"] = False
        warn(f"capabilities could not be read ({e})")
    try:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        mech["no_new_privs"] = True
    except OSError as e:
        mech["no_new_privs"] = False
        warn(f"no_new_privs not set ({e})")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # credentials changed: (re)arm parent-death kill
    if os.getppid() == 1 and not mech.get("pidns"):
        _exit(3)  # parent already gone

    # stdin/stdout/stderr -> /dev/null (user prints are captured in memory, raw fd writes go nowhere)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    try:
        os.makedirs("tmp", exist_ok=True)
    except OSError:
        pass

    mech["probes"] = _probes(parent_pid)
    return mech, frames


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # CAPBSET_DROP of an unknown capability fails with EINVAL, caught by the caller


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _probes(parent_pid: int) -> dict:
    """Check from the inside that the mechanisms hold (what the code will actually face)."""
    import socket

    out: dict = {}
    out["uid"] = os.getuid()
    out["pid"] = os.getpid()  # 1 in a pid namespace of our own
    st = os.statvfs(".")  # the scratch folder: the private tmpfs has exactly the configured size
    out["scratch_fs_bytes"] = st.f_blocks * st.f_frsize
    out["etc_passwd_visible"] = os.path.exists("/etc/passwd")
    out["proc_visible"] = os.path.exists("/proc/self")
    try:
        out["interfaces"] = [n for _, n in socket.if_nameindex()]
    except OSError as e:
        out["interfaces"] = f"error: {e}"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", 9))
        out["loopback_connect"] = "connected"
    except OSError as e:
        out["loopback_connect"] = f"{type(e).__name__}: errno {e.errno}"
    finally:
        s.close()
    try:
        os.kill(parent_pid, 0)
        out["can_signal_parent"] = True
    except OSError:
        out["can_signal_parent"] = False
    try:
        os.setuid(0)
        out["can_regain_root"] = True
    except OSError:
        out["can_regain_root"] = False
    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        out["can_raise_rlimit"] = True
    except (OSError, ValueError):
        out["can_raise_rlimit"] = False
    try:
        out["capabilities"] = capabilities()
    except OSError as e:
        out["capabilities"] = f"error: {e}"
    return out


# ----------------------------------------------------------------------------------------- executing blocks
class BoundedWriter:
    """In-memory stdout/stderr replacement: keeps the first `limit` characters, counts the rest."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0
        self.closed = False
        self.encoding = "utf-8"
        self.errors = "strict"

    def write(self, s) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        self.total += n
        room = self.limit - self.kept
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        return n

    def flush(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def close(self) -> None:
        self.closed = True

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        import io

        raise io.UnsupportedOperation("fileno")

    def getvalue(self) -> str:
        return "".join(self.parts)


def render_value(value, max_chars: int, max_rows: int) -> str:
    """Notebook-style display of a block's last expression."""
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        return value.to_string(max_rows=max_rows, max_cols=30)
    if isinstance(value, pd.Series):
        return value.to_string(max_rows=max_rows) + f"\nName: {value.name}, Length: {len(value)}, dtype: {value.dtype}"
    import numpy as np

    if isinstance(value, np.generic) and value.ndim == 0:
        value = value.item()  # 450.0 rather than np.float64(450.0)
    text = repr(value)
    return text if len(text) <= max_chars else text[:max_chars]


def short_traceback(exc: BaseException, filename_prefix: str, frames_kept: int = 3) -> str:
    """Only the last frames that belong to the user's block, then the exception line."""
    lines = []
    if not isinstance(exc, SyntaxError):
        tb = traceback.extract_tb(exc.__traceback__)
        user = [fr for fr in tb if fr.filename.startswith(filename_prefix)]
        for fr in user[-frames_kept:]:
            where = f"line {fr.lineno}" + (f", in {fr.name}" if fr.name != "<module>" else "")
            lines.append(f"  {where}: {(fr.line or '').strip()}")
        if tb and user and tb[-1] is not user[-1]:
            lines.append(f"  (raised inside {os.path.basename(tb[-1].filename)}:{tb[-1].name})")
    else:
        if exc.lineno is not None:
            lines.append(f"  line {exc.lineno}: {(exc.text or '').rstrip()}")
    head = "Traceback (most recent call last, your code only):\n" if lines and not isinstance(exc, SyntaxError) else ""
    return head + "\n".join(lines + [_exc_line(exc)])


def _exc_line(exc: BaseException) -> str:
    msg = str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def run_block(req: dict, ns: dict, cfg: dict, my_pid: int) -> dict:
    code = req["code"]
    block = int(req["block"])
    improved = cfg["mode"] == "improved"
    filename = f"<block-{block}>"
    max_chars = int(cfg["max_output_chars"])
    out = BoundedWriter(max_chars)
    resp: dict = {"stdout": "", "stdout_chars": 0, "display": None, "error_type": None, "error_message": None,
                  "traceback": None, "defined": [], "threads": 1}
    before = {k: id(v) for k, v in ns.items()}
    # per-block CPU budget (soft limit), the hard limit bounds the episode
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (min(hard, int(_cpu_seconds()) + int(cfg["cpu_s"]) + 1), hard))
    except (OSError, ValueError):
        pass
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    try:
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if improved and tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            exec(compile(tree, filename, "exec"), ns)
            if last is not None:
                value = eval(compile(last, filename, "eval"), ns)
                if value is not None:
                    ns["_"] = value
                    resp["display"] = render_value(value, max_chars, int(cfg.get("max_rows", 40)))
        except BaseException as exc:  # noqa: BLE001 - everything the code raises becomes an observation
            if _getpid() != my_pid:
                _exit(0)
            resp["error_type"] = type(exc).__name__
            resp["error_message"] = str(exc)[:2000]
            resp["is_memory"] = isinstance(exc, MemoryError)
            try:
                resp["traceback"] = short_traceback(exc, "<block-") if improved else _exc_line(exc)
            except BaseException as e2:  # noqa: BLE001
                resp["traceback"] = f"{resp['error_type']}: {resp['error_message']} (traceback unavailable: {e2!r})"
            exc.__traceback__ = None
    finally:
        if _getpid() != my_pid:  # a forked child of the user code must never answer the parent
            _exit(0)
        sys.stdout, sys.stderr = saved
    resp["stdout"] = out.getvalue()
    resp["stdout_chars"] = out.total
    try:
        import threading

        resp["threads"] = threading.active_count()
    except BaseException:  # noqa: BLE001
        pass
    if improved:
        resp["defined"] = sorted(k for k, v in ns.items()
                                 if not k.startswith("_") and before.get(k) != id(v))[:30]
    return resp


def _reap_strays(timeout_s: float = 2.0) -> int:
    """Kill and reap every other process in our pid namespace (we are its pid 1, so orphans are ours too).
    Waits until none is left (or `timeout_s`): a killed child counts against RLIMIT_NPROC until it is reaped,
    and the next block must not find the process budget used up by the previous one's leftovers."""
    n = 0
    deadline = _monotonic() + timeout_s
    while True:
        try:
            _kill(-1, signal.SIGKILL)  # again each round: catches processes forked while we were reaping
        except OSError:
            pass
        try:
            pid, _ = _waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n  # no child left
        if pid:
            n += 1
        elif _monotonic() > deadline:
            return n
        else:
            _sleep(0.001)


def make_namespace(frames: dict) -> dict:
    import numpy as np
    import pandas as pd

    ns = {"__name__": "__main__", "__builtins__": __builtins__, "pd": pd, "np": np}
    for name, df in frames.items():
        ns[name] = df  # loaded fresh in this process; nothing else holds them
    return ns


def serve(cfg: dict, req_fd: int, resp_fd: int, mech: dict, frames: dict) -> None:
    my_pid = _getpid()
    ns = make_namespace(frames)
    send(resp_fd, {"ready": True, "mechanisms": mech})
    while True:
        try:
            req = recv(req_fd)
        except EOFError:
            _exit(0)
        if req.get("op") == "exit":
            _exit(0)
        resp = run_block(req, ns, cfg, my_pid)
        if mech.get("pidns"):
            resp["strays_killed"] = _reap_strays()
        send(resp_fd, resp)


def main() -> None:
    req_fd, resp_fd, parent_pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        _exit(3)
    cfg = recv(req_fd)
    # lower CPU priority first, before the costly imports (SandboxLimits.nice); children inherit it
    mech_nice = os.nice(int(cfg.get("nice") or 0))
    root = os.geteuid() == 0
    real_uid, real_gid = os.getuid(), os.getgid()  # read before unshare: afterwards they show as unmapped
    mech: dict = {"warnings": [], "separate_process": True, "own_session": os.getsid(0) == os.getpid(),
                  "root_at_start": root, "userns": False, "nice": mech_nice}
    denied = frozenset(cfg.get("simulate_denied") or ())
    if denied:
        mech["simulated_denied"] = sorted(denied)
    net_before = _ns_inode("net")
    mech["netns"] = mech["mountns"] = mech["pidns"] = False
    if cfg.get("isolate", True):
        user = 0 if root else CLONE_NEWUSER  # root needs no user namespace (and keeps the real uid switch)
        try:
            unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | user, denied)
            mech["netns"] = mech["mountns"] = mech["pidns"] = True
            mech["userns"] = bool(user)
        except OSError as e:
            mech["warnings"].append(f"network, mount and pid namespaces unavailable ({e}); "
                                    "trying a network namespace alone")
            try:
                unshare(CLONE_NEWNET | user, denied)
                mech["netns"] = True
                mech["userns"] = bool(user)
            except OSError as e2:
                mech["warnings"].append(f"NO network isolation: {e2}")
        if mech["userns"]:
            try:
                map_ids(int(cfg["uid"]), real_uid, real_gid)
            except OSError as e:  # the code would run as an unmapped uid: no file can be created
                mech["warnings"].append(f"uid/gid mapping in the user namespace failed ({e})")
    mech["netns_changed"] = net_before is not None and _ns_inode("net") != net_before
    if mech["pidns"]:
        pid = os.fork()
        if pid:  # outer: wait for the executor, then mirror its end
            os.close(req_fd)
            os.close(resp_fd)
            _, status = os.waitpid(pid, 0)
            _exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # own session: kill(0), killpg(0) and kill(getppid()=0) from the code reach only this namespace's
        # processes, never the outer process (which, in a user namespace, runs as the same kernel uid)
        os.setsid()
        mech["own_session"] = os.getsid(0) == os.getpid()
        mech["pid_in_namespace"] = os.getpid()
    try:
        mech, frames = setup(cfg, parent_pid, mech)
    except BaseException as e:  # noqa: BLE001
        send(resp_fd, {"ready": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        _exit(4)
    serve(cfg, req_fd, resp_fd, mech, frames)


if __name__ == "__main__":
    main()
