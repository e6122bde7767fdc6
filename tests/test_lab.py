"""`make lab`: JupyterLab on notebooks/ with the balms kernel, driven through its REST API and a kernel session."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import websocket

ROOT = Path(__file__).resolve().parents[1]
TOKEN = uuid.uuid4().hex


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, path: str, body: dict | None = None) -> dict | list:
    req = urllib.request.Request(f"{base}{path}", method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


@pytest.mark.slow
def test_make_lab_lists_the_notebooks_and_runs_a_cell_of_00(tmp_path):
    if not (ROOT / ".venv" / "share" / "jupyter" / "kernels" / "balms").exists():
        pytest.skip("no balms kernel in .venv (make install)")
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_PORT={port}",
                             f"LAB_ARGS=--no-browser --ip=127.0.0.1 --IdentityProvider.token={TOKEN}"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                listing = _api(base, "/api/contents")
                break
            except OSError:
                assert proc.poll() is None, f"make lab exited: {proc.stderr.read().decode()[-2000:]}"
                assert time.monotonic() < deadline, "JupyterLab did not answer within 120 s"
                time.sleep(1)
        names = {item["name"] for item in listing["content"]}
        expected = {p.with_suffix(".ipynb").name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")}
        assert expected <= names, f"notebooks missing from /api/contents: {expected - names}"
        nb = _api(base, "/api/contents/00_preprocessing.ipynb")["content"]
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")  # the parameters cell
        session = _api(base, "/api/sessions", {"path": "00_preprocessing.ipynb", "type": "notebook",
                                               "kernel": {"name": "balms"}})
        assert session["kernel"]["name"] == "balms"
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/api/kernels/{session['kernel']['id']}/channels"
                                         f"?token={TOKEN}", timeout=120)
        msg_id = uuid.uuid4().hex
        code = "".join(cell["source"]) + "\nprint('profile', profile)"
        ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                                       "session": uuid.uuid4().hex, "version": "5.3"},
                            "parent_header": {}, "metadata": {}, "channel": "shell",
                            "content": {"code": code, "silent": False, "store_history": False,
                                        "user_expressions": {}, "allow_stdin": False}}))
        out, status, idle = "", None, False
        while status is None or not idle:  # the reply (shell) may come before the output (iopub): read to idle
            m = json.loads(ws.recv())
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                out += m["content"]["text"]
            elif m["msg_type"] == "execute_reply":
                status = m["content"]["status"]
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        ws.close()
        assert status == "ok" and "profile demo" in out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # make and the server it started: this test's own process group
            proc.wait(30)
