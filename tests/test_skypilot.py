"""Several nodes with SkyPilot (issue 27): the committed task files are what `balms deploy skypilot` writes from the
registry, they cover exactly the paper profile's vLLM models under the ids balms routes by, SkyPilot's own schema
objects accept them (and refuse a misspelt key), and balms drives the endpoint shape SkyPilot exposes: one
endpoint per model, given as `sky serve status --endpoint` (`http://host:port`) or `sky status --endpoint`
(`host:port`) print it, each model's calls reaching only its own endpoint.

SkyPilot lives in its own venv (requirements/sky.txt, `make install-sky`, part of `make install`): where it is not
installed the parse test is skipped, except under CI (CI=true), where it fails: CI installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import side_venv_tool

from balms.cli import deploy as deploy_cli
from balms.cli import main as balms_main
from balms.experiments.config import ExperimentConfig, load
from balms.models import routing
from balms.models.registry import MODELS, spec
from fake_servers import AnsweringOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "deploy" / "skypilot"
# what the paper profile sends to vLLM: four backbones (Table 3) and the judge (Figure 4), by their served ids; the
# judge as the paper deployed it (Appendix D: "served via vLLM (bitsandbytes 8-bit, tensor_parallel_size=2)")
PAPER_VLLM = {"Qwen/Qwen2.5-7B-Instruct": 1, "mistralai/Mistral-7B-Instruct-v0.3": 1, "Qwen/Qwen2.5-14B-Instruct": 2,
              "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": 2, "meta-llama/Llama-3.3-70B-Instruct": 2}
PAPER_JUDGE = {"tensor_parallel": 2, "quantization": "bitsandbytes-8bit"}


def task_paths() -> list[Path]:
    return sorted(TASKS.rglob("*.yaml"))


@pytest.fixture(scope="module")
def paper():
    return load("paper")


def sky_python() -> str | None:
    for cand in (os.environ.get("BALMS_SKY_PYTHON"), str(ROOT / ".venv-sky" / "bin" / "python")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def test_committed_tasks_are_what_the_generator_writes(paper, tmp_path):
    assert deploy_cli.drift(TASKS, paper) == []
    # the check sees an edit and a stray file, and says so through the command line
    shutil.copytree(TASKS, tmp_path / "t", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    one = tmp_path / "t" / "qwen2-5-7b-instruct.yaml"
    one.write_text(one.read_text().replace("--tensor-parallel-size 1", "--tensor-parallel-size 2"))
    (tmp_path / "t" / "stray.yaml").write_text("run: echo\n")
    assert deploy_cli.drift(tmp_path / "t", paper) == [
        "stray.yaml: not generated (no such model in profile 'paper')",
        "qwen2-5-7b-instruct.yaml: differs from the generator's output"]
    assert balms_main(["deploy", "skypilot", "--profile", "paper", "--out", str(tmp_path / "t"), "--check"]) == 1
    assert balms_main(["deploy", "skypilot", "--profile", "paper", "--out", str(tmp_path / "t")]) == 0
    assert deploy_cli.drift(tmp_path / "t", paper) == []


def test_tasks_cover_exactly_the_paper_profiles_vllm_models(paper):
    # from the profile's fields, not the generator's walk over the declared cells
    names = [*paper.backbones, paper.horizon_model, paper.judge_model]
    want = {spec(n).model_id: spec(n).tensor_parallel for n in names if spec(n).backend == "openai"}
    assert want == PAPER_VLLM
    got = {}
    for p in task_paths():
        t = yaml.safe_load(p.read_text())
        mid = t["envs"]["MODEL_ID"]
        got[mid] = int(re.search(r"--tensor-parallel-size (\d+)", t["run"]).group(1))
        assert '--served-model-name "$MODEL_ID"' in t["run"]
        assert set(t["resources"]["accelerators"].values()) == {got[mid]}  # GPUs = tensor parallel
        assert (p.parent.name == "judge") == (MODELS[paper.judge_model].model_id == mid)
        assert ("--reasoning-parser" in t["run"]) == any(s.model_id == mid and s.is_reasoning for s in MODELS.values())
    assert got == PAPER_VLLM


def test_registry_deploy_and_plan_agree_on_the_judge_as_the_paper_deployed_it(paper):
    """One statement of the judge's GPUs and precision (the registry's), read by the SkyPilot task, the one-node
    recipe and the plan."""
    from balms.experiments.plan import gpus_per_server, phase_work

    s = spec(paper.judge_model)
    assert {"tensor_parallel": s.tensor_parallel, "quantization": s.quantization} == PAPER_JUDGE
    task = yaml.safe_load((TASKS / "judge" / f"{deploy_cli.service_name(s.name)}.yaml").read_text())
    assert "--tensor-parallel-size 2" in task["run"]
    assert task["resources"]["accelerators"] == {g: 2 for g in deploy_cli.GPUS}
    assert "--quantization bitsandbytes" in task["run"] and "load_in_8bit=True" in task["setup"]
    assert task["envs"]["WEIGHTS"] != s.model_id  # the 8-bit checkpoint the setup writes, not the bf16 repo
    local = deploy_cli.local_recipe(paper, 4).replace("\\\n    ", " ")
    serve = next(line for line in local.splitlines() if f"--served-model-name {s.model_id}" in line)
    assert serve.startswith(f"CUDA_VISIBLE_DEVICES=0,1 vllm serve {task['envs']['WEIGHTS']} ")
    assert "--quantization bitsandbytes" in serve and "load_in_8bit=True" in local
    assert gpus_per_server(s.name) == 2
    plan = {"phases": {"judge": {s.name: {"calls": 10, "server_hours": 3.0}}}}
    assert phase_work(plan)["judge"][s.name]["gpus"] == 2


def test_deploy_writes_the_plans_allocation_as_replicas(tmp_path, real_data, monkeypatch):
    """`balms deploy skypilot --gpus`: each task's replicas are the plan's servers for its model, in its phase."""
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    cfg = load("paper", raw_root=str(real_data), datasets=["globem"], systems=["healthllm"], n_samples=2,
               judge_systems=["healthllm"], notebooks=["01_prediction", "02_cot", "07_rationale_quality"])
    replicas, alloc = deploy_cli.allocated_replicas(cfg, "A6000:6")
    assert set(alloc["phases"]) == {"prediction", "judge"} and alloc["gpus"] == 6
    # the judge phase's few rationales fill one server's slots: one replica, its other GPUs left free
    assert replicas[cfg.judge_model] == alloc["phases"]["judge"]["servers"][cfg.judge_model] == 1
    assert sum(n * spec(m).tensor_parallel for m, n in alloc["phases"]["prediction"]["servers"].items()) <= 6
    files = deploy_cli.task_files(cfg, replicas)
    for rel, text in files.items():
        t = yaml.safe_load(text)
        name = next(n for n in replicas if deploy_cli.service_name(n) == t["name"])
        assert t["service"]["replicas"] == replicas[name], rel
    assert all(yaml.safe_load(t)["service"]["replicas"] == 1 for t in deploy_cli.task_files(cfg).values())


def test_skypilot_parses_every_task_with_its_own_schema(tmp_path):
    py = side_venv_tool(sky_python(), "SkyPilot (make install-sky, or BALMS_SKY_PYTHON=/path/to/python with it)")
    bad = tmp_path / "misspelt.yaml"
    bad.write_text((TASKS / "qwen2-5-7b-instruct.yaml").read_text().replace("accelerators:", "acelerators:"))
    paths = [str(p) for p in task_paths()] + [str(bad)]
    r = subprocess.run([py, str(TASKS / "check.py"), *paths], capture_output=True, text=True, timeout=300)
    out = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr  # the misspelt file, and only it
    by_path = {t["path"]: t for t in out["tasks"]}
    assert "did you mean 'accelerators'" in by_path.pop(str(bad))["error"]
    assert out["skypilot"] == "0.14.1"
    parsed = {}
    for t in by_path.values():
        assert "error" not in t, t
        mid, tp = t["envs"]["MODEL_ID"], int(re.search(r"--tensor-parallel-size (\d+)", t["run"]).group(1))
        parsed[mid] = tp
        assert t["name"] == deploy_cli.service_name(next(s.name for s in MODELS.values() if s.model_id == mid))
        assert t["accelerators"] == [["A6000", tp], ["L40S", tp]]
        assert t["ports"] == ["8000"] and "--port 8000" in t["run"]
        assert t["readiness_path"] == "/v1/models" and t["replicas"][0] == 1
        assert t["envs"]["MAX_NUM_SEQS"] == str(ExperimentConfig().server_slots)
        assert t["secrets"] == ["HF_TOKEN"]
    assert parsed == PAPER_VLLM


def test_endpoint_urls_take_what_sky_prints():
    assert deploy_cli.endpoint_urls(["1.2.3.4:8000", "http://5.6.7.8:30001/", "https://x.example/v1",
                                     "1.2.3.4:8000,9.9.9.9:8000"]) == [
        "http://1.2.3.4:8000/v1", "http://5.6.7.8:30001/v1", "https://x.example/v1", "http://9.9.9.9:8000/v1"]


@pytest.fixture()
def endpoints(paper):
    """One strict server per paper backbone served by vLLM: the shape one SkyPilot task per model exposes."""
    backbones = [s for s in deploy_cli.served_models(paper) if s.role != "judge"]
    srvs = {s.name: AnsweringOpenAIServer(models=[s.model_id], strict=True).start() for s in backbones}
    routing.forget()
    yield srvs
    routing.forget()
    for s in srvs.values():
        s.stop()


def test_balms_routes_each_model_to_its_own_endpoint(endpoints, tmp_path, monkeypatch, real_data, capsys):
    from balms.experiments.grid import make_cell
    from balms.experiments.scheduler import schedule_cells

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("BALMS_VLLM_BASE_URLS", raising=False)
    srvs = list(endpoints.values())
    # half as `sky status --endpoint 8000 NAME` prints them (host:port), half as `sky serve status --endpoint`
    printed = [s.url.removeprefix("http://") if i % 2 else s.url for i, s in enumerate(srvs)]

    assert balms_main(["deploy", "endpoints", "--profile", "paper", *printed[:-1]]) == 1  # one backbone unserved
    last = list(endpoints)[-1]
    assert f"MISSING {last}: no endpoint serves it" in capsys.readouterr().out
    assert balms_main(["deploy", "endpoints", "--profile", "paper", *printed]) == 0
    export = capsys.readouterr().out.strip().splitlines()[-1]
    urls = export.removeprefix("export BALMS_VLLM_BASE_URLS=").split(",")
    assert urls == [s.url + "/v1" for s in srvs]
    assert balms_main(["deploy", "endpoints", "--profile", "paper", "--judge", *printed]) == 1  # phase 2 not up

    cfg = ExperimentConfig(profile="sky", datasets=["pmdata"], systems=["healthllm"], backbones=list(endpoints),
                           n_samples=2, seed=0, lookback=3, concurrency=8, servers=urls)
    res = schedule_cells(cfg, [make_cell(cfg, "pmdata", "healthllm", m) for m in cfg.backbones], progress=False)
    recs = [r for cell in res.records for r in cell]
    assert len(recs) == 2 * len(endpoints) and not any(r.error for r in recs)
    for name, s in endpoints.items():  # each model's calls went to its own endpoint, and only there
        assert [p["model"] for p in s.requests] == [spec(name).model_id] * 2, name
    # and an endpoint refuses a model it does not serve, as vLLM does
    a, b = srvs[0], srvs[1]
    r = httpx.post(a.url + "/v1/chat/completions", timeout=10,
                   json={"model": b.models[0], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 404 and b.models[0] in r.text
