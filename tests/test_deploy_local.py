"""One node (`balms deploy local`): the recipe serves every vLLM model of a profile on the registry's GPUs, counted
out with CUDA_VISIBLE_DEVICES in phases that fit the node, the backbones before the judge; the SkyPilot tasks, this
recipe and the plan agree on each server's GPUs because all read `balms.models.serving`; too small a node is refused
naming each model and what it needs; `balms run --notebooks --model` runs only a phase's models' cells."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import yaml

from balms.cli import deploy as deploy_cli
from balms.cli import main as balms_main
from balms.experiments.config import load
from balms.experiments.plan import gpus_per_server, phase_work
from balms.models import registry
from balms.models.registry import spec


@pytest.fixture(scope="module")
def paper():
    return load("paper")


def servers_of(recipe: str) -> list[dict]:
    """Each `vllm serve` of a recipe: its phase, GPUs, served name, flags, port, and the phase's export."""
    out, phase, export = [], 0, {}
    for line in recipe.replace("\\\n    ", " ").splitlines():
        if line.startswith("# phase "):
            phase = int(line.split()[2])
        elif m := re.match(r"CUDA_VISIBLE_DEVICES=(\S+) vllm serve (\S+) --port (\d+) (.*) &$", line):
            flags = m.group(4).split()
            out.append({"phase": phase, "devices": [int(d) for d in m.group(1).split(",")], "weights": m.group(2),
                        "port": int(m.group(3)), "id": flags[flags.index("--served-model-name") + 1],
                        "tp": int(flags[flags.index("--tensor-parallel-size") + 1]), "flags": flags})
        elif line.startswith("export BALMS_VLLM_BASE_URLS="):
            export[phase] = line.split("=", 1)[1].split(",")
    for s in out:
        s["export"] = export[s["phase"]]
    return out


@pytest.mark.parametrize("gpus", [2, 4, 6, 8])
def test_the_recipe_serves_every_model_on_its_registry_gpus_in_phases_that_fit(paper, gpus):
    servers = servers_of(deploy_cli.local_recipe(paper, gpus))
    served = {s.model_id: s for s in deploy_cli.served_models(paper)}
    assert sorted(s["id"] for s in servers) == sorted(served)  # each of the profile's vLLM models, once
    for s in servers:
        want = served[s["id"]]
        assert len(s["devices"]) == s["tp"] == want.tensor_parallel, s
        assert ("--quantization" in s["flags"]) == bool(want.quantization)
        assert (s["weights"] == want.model_id) == (not want.quantization)  # the pre-quantised checkpoint otherwise
        assert f"http://localhost:{s['port']}/v1" in s["export"]
    assert len({s["port"] for s in servers}) == len(servers)
    for phase in {s["phase"] for s in servers}:
        used = [d for s in servers if s["phase"] == phase for d in s["devices"]]
        assert len(used) == len(set(used)) and max(used) < gpus, f"phase {phase} over-books the node"
    judge = [s["phase"] for s in servers if s["id"] == spec(paper.judge_model).model_id]
    if len({s["phase"] for s in servers}) > 1:  # the judge reads the backbones' rationales: after every one
        assert judge[0] > max(s["phase"] for s in servers if s["id"] != spec(paper.judge_model).model_id)


def test_a_node_holding_every_server_runs_one_phase_and_a_small_one_runs_each_phases_models(paper):
    need = sum(s.tensor_parallel for s in deploy_cli.served_models(paper))
    assert "# phase" not in deploy_cli.local_recipe(paper, need)
    recipe = deploy_cli.local_recipe(paper, need - 1)
    runs = re.findall(r"--model (\S+)", recipe.replace("\\\n    ", " "))
    backbones = [s for s in deploy_cli.served_models(paper) if s.role != "judge"]
    assert sorted(m for r in runs for m in r.split(",") if spec(m).backend == "openai") == \
        sorted(s.name for s in backbones)  # each backbone's cells run in its own phase
    assert "cache_mode replay" in recipe.splitlines()[-1]


def test_skypilot_task_local_recipe_and_plan_agree_on_gpus_per_server(paper, monkeypatch):
    """Every vLLM model of the paper profile (from its fields), and each consumer sees a registry change."""
    names = [n for n in dict.fromkeys([*paper.backbones, paper.horizon_model, paper.judge_model])
             if spec(n).backend == "openai"]

    def views() -> dict[str, tuple]:
        tasks = [yaml.safe_load(t) for t in deploy_cli.task_files(paper).values()]
        tasks = {t["envs"]["MODEL_ID"]: t for t in tasks}
        recipe = {s["id"]: len(s["devices"]) for s in servers_of(deploy_cli.local_recipe(paper, 8))}
        work = phase_work({"phases": {"all": {n: {"calls": 1, "server_hours": 1.0} for n in names}}})["all"]
        out = {}
        for n in names:
            task = tasks[spec(n).model_id]
            out[n] = (spec(n).tensor_parallel, *set(task["resources"]["accelerators"].values()),
                      recipe[spec(n).model_id], gpus_per_server(n), work[n]["gpus"])
        return out

    assert all(len(set(v)) == 1 for v in views().values()), views()
    name = next(n for n in names if spec(n).tensor_parallel == 1)
    monkeypatch.setitem(registry.MODELS, name, replace(spec(name), tensor_parallel=2))
    assert views()[name] == (2, 2, 2, 2, 2)  # one statement: a changed registry moves all three


def test_too_small_a_node_is_refused_naming_each_model_and_its_gpus(paper, capsys):
    assert balms_main(["deploy", "local", "--profile", "paper", "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    big = [s for s in deploy_cli.served_models(paper) if s.tensor_parallel > 1]
    assert big and all(f"{s.name} needs {s.tensor_parallel} GPUs per server" in err for s in big), err
    assert "the node has 1" in err and "tensor_parallel" in err
    assert not any(s.name in err for s in deploy_cli.served_models(paper) if s.tensor_parallel == 1)


def test_run_on_models_keeps_their_cells_and_refuses_a_model_no_cell_runs(paper):
    from balms.experiments.cells import cells_for
    from balms.experiments.grid import _on_models

    decls = cells_for("01_prediction", paper)
    kept = _on_models(decls, ["qwen2.5-7b-instruct"])  # the registry's spelling is found
    assert kept and {c.model for c in kept} == {"Qwen2.5-7B-Instruct"}
    assert len(kept) == sum(c.model == "Qwen2.5-7B-Instruct" for c in decls)
    with pytest.raises(ValueError, match="no cell runs on qwen2.5-coder-1.5b"):
        _on_models(decls, ["Qwen2.5-7B-Instruct", "qwen2.5-coder-1.5b"])
    with pytest.raises(SystemExit, match="balms run --notebooks: no cell runs on Qwen2.5-7B-Instruct"):
        balms_main(["run", "--notebooks", "01_prediction", "--config", "smoke", "--model", "Qwen2.5-7B-Instruct"])
