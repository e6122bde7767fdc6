"""No participant data outlives its run (issue 37): a process's sandboxes keep their files (the frames, a user's
sensing data; scratch; logs) under one run folder, readable by this user only, removed at exit; a process SIGKILLed
in a PHIA episode leaves its folder, and the next process to start a sandbox removes it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from balms import paths

EPISODE = textwrap.dedent('''
    import sys, time
    from balms.agents.registry import make_agent
    from balms.experiments import cohort
    from balms.experiments.config import ExperimentConfig
    from balms.models.base import Completion

    class Stalls:
        """Writes code at the first step (a real sandbox runs it), then hangs in the next call, mid-episode."""
        model_id, name, calls = "stalls", "stalls", 0

        def generate(self, messages, params):
            self.calls += 1
            if self.calls == 1:
                return Completion(text="[Thought] count the days\\n```python\\nprint(1 + 1)\\n```",
                                  model_id=self.model_id, prompt_tokens=5, completion_tokens=5, latency_s=0.01)
            print("IN_EPISODE", flush=True)
            time.sleep(600)

    co = cohort("pmdata", ExperimentConfig(datasets=["pmdata"]))
    make_agent("phia", max_iters=3).predict(co.eval_samples(1, 0)[0], co.tables, Stalls())
''')

START_AGAIN = textwrap.dedent('''
    import pandas as pd
    from balms.sandbox import Sandbox
    with Sandbox({"df": pd.DataFrame({"a": [1, 2]})}) as sb:
        assert sb.run("print(df.a.sum())").text.strip() == "3"
''')


def _env(tmp_path: Path) -> dict:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return os.environ | {"TMPDIR": str(tmp_path / "tmp"), "BALMS_RAW_DIR": str(tmp_path / "no_raw"),
                         "BALMS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(paths.PROJECT_ROOT)}


def _run_folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("balms-sbx*"))


@pytest.mark.slow  # real sandbox workers
@pytest.mark.timeout(300)
def test_a_run_killed_in_a_phia_episode_leaves_nothing_after_the_next_start(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", EPISODE], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "IN_EPISODE", f"the episode did not start: {line!r}, exit {proc.poll()}"
        (run,) = _run_folders(tmp_path)
        assert run.name.startswith(f"balms-sbx-run-{proc.pid}-")
        frames = list(run.glob("priv-*/frames.pkl"))
        assert frames  # the participant's frames, on disk while the episode runs: this user's only
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in frames)
        assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in [run, *run.iterdir()] if d.is_dir())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    time.sleep(0.5)
    assert _run_folders(tmp_path) == [run]  # a kill cannot clean up after itself
    again = subprocess.run([sys.executable, "-c", START_AGAIN], env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _run_folders(tmp_path) == []  # the killed run's folder swept at the start, the new one removed at exit


@pytest.mark.slow
def test_the_sweep_leaves_a_live_process_folder_alone(tmp_path):
    """A folder whose process is alive (its lock held) is never swept, whoever starts next."""
    env = _env(tmp_path)
    hold = textwrap.dedent('''
        import sys, time
        from balms.sandbox.executor import run_dir
        print(run_dir(), flush=True)
        time.sleep(600)
    ''')
    proc = subprocess.Popen([sys.executable, "-c", hold], env=env, stdout=subprocess.PIPE, text=True)
    try:
        live = Path(proc.stdout.readline().strip())
        assert live.is_dir()
        sweep = "from balms.sandbox.executor import sweep_stale; print(len(sweep_stale()))"
        out = subprocess.run([sys.executable, "-c", sweep], env=env, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "0" and live.is_dir()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    out = subprocess.run([sys.executable, "-c", sweep], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "1" and not live.exists()
