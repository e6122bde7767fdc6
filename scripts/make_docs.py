"""Write every measured or generated figure the docs show, once, from the committed results (`make docs`).

Prose never types a measured number (a ratio, a timing, a count from a run): it links or includes a file this
script writes under docs/_generated/, and the README (the short claims table) and the runbook (the single-node
serving recipe, from the model registry) carry blocks between markers this script rewrites.
tests/test_docs_numbers.py checks that the committed files equal what this script writes now, and that no prose
repeats a measured number.

    python scripts/make_docs.py            # (re)write docs/_generated/*.md and the README's and runbook's blocks
    python scripts/make_docs.py --check    # exit 1 and name the stale files, writing nothing
    python scripts/make_docs.py --measure-disk [CHECKOUT]   # `du -sh` of its three environments into bench/disk.json
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "docs" / "_generated"
README = ROOT / "README.md"
CLAIMS = ROOT / "results" / "cpu-study" / "tables" / "cpu_study_claims.csv"
ANSWERS = CLAIMS.with_name("cpu_study_answers.csv")
STUDY_BUNDLE = ROOT / "results" / "cpu-study" / "cpu-study.bundle.tar.gz"
DEMO_RESPONSES = ROOT / "results" / "demo" / "responses.jsonl.gz"
DEMO_JUDGED = ROOT / "tables" / "case_study_d1_judged.csv"
DISK = ROOT / "bench" / "disk.json"
ENVIRONMENTS = (".venv", ".venv-router", ".venv-sky")
HEADER = "<!-- written by `make docs` (scripts/make_docs.py) from {src}; do not edit by hand -->\n\n"
BLOCK = re.compile(r"(<!-- BEGIN generated:(\S+) -->\n)(.*?)(<!-- END generated:\2 -->)", re.S)
# the claims the README's table answers (issue 26: ours against the mean predictor and Health-LLM, the larger model)
README_CLAIMS = ("personal_baseline_mean", "personal_baseline_healthllm", "model_size")


def _json(path: Path) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; `make docs` writes the docs from the committed results")
    return json.loads(path.read_text())


def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}".replace("-0.00", "0.00")


def _table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (cells with '|' escaped)."""
    esc = [[str(c).replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in esc]) + "\n"


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


# ---- the pages --------------------------------------------------------------------------------------------------

def claims_rows(claims: tuple[str, ...] | None = None, answer: bool = False) -> list[list]:
    """(claim with its model, ours, 95% interval, n, verdict) per row of the CPU study's claims table; `answer`
    words the verdict as the answer to "does it lower the MAE?" (study.ANSWER)."""
    import pandas as pd

    from balms.experiments import study

    table = pd.read_csv(CLAIMS)
    if claims is not None:
        table = table[table.claim.isin(claims)]
    rows = []
    for r in table.itertuples():
        ran = r.verdict != "not run"
        label = r.comparison if str(r.model) in r.comparison else f"{r.comparison} ({r.model})"
        rows.append([label, _fmt(r.diff) if ran else "-",
                     f"{_fmt(r.ci_low)} to {_fmt(r.ci_high)}" if ran else "-", str(r.n) if ran else "-",
                     study.ANSWER.get(r.verdict, r.verdict) if answer else r.verdict])
    return rows


def claims_page() -> str:
    import pandas as pd

    from balms.experiments import study

    header = ["claim (difference in MAE or modal share; model)", "ours", "95% interval", "n", "verdict"]
    return (HEADER.format(src="results/cpu-study/tables/cpu_study_claims.csv")
            + "Each of the paper's directional claims and our additions on the CPU study's real data, with the "
              "participant-bootstrap interval (embedded CPU models, not the paper's backbones). The verdict "
              "compares the interval with the direction the paper (or, for ours, the question) expects: agrees, "
              "disagrees, or cannot tell at this n.\n\n"
            + _table(header, claims_rows())
            + "\nWhat the cells answered (`results/cpu-study/tables/cpu_study_answers.csv`): "
            + study.answers_sentence(pd.read_csv(ANSWERS)) + "\n"
            + "\nThe sensor test (issue 39: does an answer move when the window's sensor values are another user's, "
              "or the same user's from a distant period?): "
            + study.sensor_sentence(pd.read_csv(CLAIMS)) + "\n")


def readme_claims_block() -> str:
    return ("| claim (model) | ours | 95% interval | n | verdict |\n|---|---|---|---|---|\n"
            + "".join("| " + " | ".join(r) + " |\n" for r in claims_rows(README_CLAIMS, answer=True))
            + "\n*Written by `make docs` from `results/cpu-study/tables/cpu_study_claims.csv`; every claim: "
              "[docs/_generated/claims.md](docs/_generated/claims.md).*\n")


def serve_paper_block() -> str:
    """The runbook's single-node recipe: `balms deploy local` for the paper profile on the paper's 4 x A6000."""
    from balms.cli.deploy import local_recipe
    from balms.experiments import config

    return "```bash\n" + local_recipe(config.load("paper"), 4) + "```\n"


def _bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scale_page() -> str:
    d = _json(ROOT / "bench" / "scale.json")
    said = _bench_scale().summary(d)
    rows = [[str(r["gpus"]), ", ".join(f"{m} {n}" for m, n in r["servers"].items()), str(r["samples_per_cell"]),
             _fmt(r["compression"], 1), _fmt(r["fleet_utilisation"], 3), _fmt(r["allocation_ceiling"], 3),
             _fmt(r["busiest_ratio"], 3), f"{100 * r['plan']['error']:+.0f}%", _fmt(r["ideal_over_chain"], 1),
             _fmt(r["client_cpu_ms_per_call"], 1),
             "/".join(f"{x:.1f}" for x in r["load_average"]["before"][:1] + r["load_average"]["after"][:1])]
            for r in d["runs"]]
    return (HEADER.format(src="bench/scale.json (`make bench-scale`)")
            + f"Notebook 01's paper grid on simulated vLLM servers split by `balms plan --gpus` (`{d['command']}`; "
              f"server model: {d['server_model']['source']}; embedder: {d['embedder']}):\n\n"
            + _table(["GPUs", "servers per model (the plan's allocation)", "samples per cell", "compression",
                      "fleet utilisation", "the allocation's ceiling (busiest server never idle)",
                      "busiest server / wall", "plan's wall-time error", "ideal wall / longest chain",
                      "client CPU ms per call", "load average before/after"], rows)
            + f"\n{said['runs']} ({said['goal']}). {said['loopback']}.\n")


def timing_page() -> str:
    t = _json(ROOT / "bench" / "paper_timing.json")["demo"]
    cold, warm = t["cold"], t["warm"]
    rows = [[name, _mmss(s), _mmss(warm["notebooks_s"].get(name, float("nan")))] for name, s in
            sorted(cold["notebooks_s"].items())]
    rows.append(["**total**", _mmss(cold["total_s"]), _mmss(warm["total_s"])])
    how = "; ".join(f"{mode}: commit {m['commit']}, {m['measured_at']}, {m['cpu_count']} cores, load "
                    f"{m['load_1m_start']} to {m['load_1m_end']}" for mode, m in (("cold", cold), ("warm", warm)))
    return (HEADER.format(src="bench/paper_timing.json (`python bench/time_paper.py`)")
            + "`make paper` on the demo profile, each notebook in minutes:seconds, cold (fresh clone, empty cache) "
              "and warm (the same cache and runs):\n\n"
            + _table(["notebook", "cold", "warm"], rows) + f"\nMeasured ({how}).\n")


def disk_page() -> str:
    d = _json(DISK)
    rows = [[f"`{e['path']}`" if e["path"] != "total" else "**total**", e["size"]] for e in d["environments"]]
    return (HEADER.format(src="bench/disk.json (`python scripts/make_docs.py --measure-disk`)")
            + f"Disk used by the installed environments (`{d['command']}`, {d['measured_at']}):\n\n"
            + _table(["environment", "size"], rows))


def measurements_page() -> str:
    roles = _json(ROOT / "bench" / "roles.json")
    rows = [[r["model"], r["role"], r["variant"], str(r["n"]), f"{100 * r['parse_rate']:.0f}%",
             f"{100 * r['code_block_rate']:.0f}%" if r.get("code_block_rate") is not None else "-",
             f"{r['s_per_call']:.1f}", f"{r['calls_per_prompt']:.1f}",
             f"{r['load_1m_start']:.1f}-{r['load_1m_end']:.1f}"] for r in roles["rows"]]
    s = _json(ROOT / "bench" / "serving.json")

    def lever(rows_, key, ratio):
        return [f"{rows_[0][key]:.2f}"] + [f"{r[key]:.2f} (x{r[ratio]:.2f})" for r in rows_[1:]]

    serving = [["continuous batching, decode: generated tokens/s", *lever(s["batching_decode"], "gen_tok_per_s",
                                                                           "gen_ratio_vs_1")],
               ["continuous batching, real Health-LLM CoT prompts end to end: requests/min",
                *lever(s["batching_cot_end_to_end"], "requests_per_min", "req_ratio_vs_1")],
               [f"greedy CoT replies identical to one-at-a-time (of {s['batching_cot_end_to_end'][0]['requests']})",
                *[str(r["greedy_same_as_1"]) for r in s["batching_cot_end_to_end"]]]]
    flights = [f"{r['in_flight']} in flight" for r in s["batching_decode"]]
    prefix = [[name, f"{100 * p['tokens_reused_share']:.0f}%", f"x{p['speedup']:.2f}"]
              for name, p in s["prefix_reuse"].items()]
    r = _json(ROOT / "bench" / "runner.json")
    runner = [[f"loopback server ({r['latency_s']} s per request), {c} in flight", f"{r[f'throughput_rps_c{c}']:.2f}",
               f"{r[f'ideal_ratio_c{c}']:.3f}"] for c in (1, 8, 64)]
    runner.append([f"llama.cpp ({r['llamacpp_n_prompts']} prompts), harness against direct POSTs", "-",
                   f"{r['llamacpp_ratio']:.3f}"])
    load = r.get("machine", {})
    return (HEADER.format(src="bench/roles.json (`make bench-roles`), bench/serving.json (`make bench-llama`) and "
                              "bench/runner.json (`make bench-runner`)")
            + "### Is the harness ever the bottleneck? (`bench/bench_runner.py`)\n\n"
            + _table(["path", "requests/s", "ratio (loopback: to the ideal; llama.cpp: to direct)"], runner)
            + f"\nHarness overhead per request at one in flight: {r['overhead_ms_per_request']} ms (a bare HTTP round "
              f"trip: {r['bare_http_overhead_ms_per_request']} ms)"
            + (f"; load average {load['loadavg_start'][0]:.1f} before, {load['loadavg_end'][0]:.1f} after"
               if load.get("loadavg_start") else "") + ".\n\n"
            + "### Each agent role on the embedded model\n\n"
            + _table(["model", "role", "variant", "n", "parse rate", "code-block rate", "s per call",
                      "calls per prompt", "load 1m"], rows)
            + f"\n### llama.cpp's server on the same cores ({s['model']}, {s['slots']} slots, load "
              f"{s['load_1m_start']}-{s['load_1m_end']}, {s['measured_at']})\n\n"
            + _table(["lever", *flights], serving) + "\n"
            + _table(["prompt-prefix reuse (server prompt cache off vs on)", "prompt tokens reused", "prompt time"],
                     prefix))


# ---- inside the agents: real records, shown as they were ---------------------------------------------------------

def _fence(text: str, lang: str = "text") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"


def study_record(system: str, *, want=lambda r: True) -> tuple[str, dict]:
    """The first record of a committed CPU-study run file of `system` (by file name) that `want` accepts."""
    with tarfile.open(STUDY_BUNDLE) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if m.name.endswith(".jsonl") and m.name.rsplit("/", 1)[-1].startswith(f"{system}__"):
                for line in tar.extractfile(m).read().decode().splitlines():
                    r = json.loads(line) if line.strip() else None
                    if r and r.get("status") == "ok" and want(r):
                        return m.name, r
    raise LookupError(f"{STUDY_BUNDLE}: no {system} record as wanted; the Inside-the-agents page needs one")


def _has_code_and_output(r: dict) -> bool:
    kinds = [t["kind"] for t in r["transcript"]]
    return "code" in kinds and any(t["kind"] == "observation" and t["meta"].get("status") == "ok"
                                   and t["content"].strip() for t in r["transcript"])


def _reads_data_and_shows_it(r: dict) -> bool:
    code = " ".join(t["content"] for t in r["transcript"] if t["kind"] == "code")
    shown = [t["content"].strip() for t in r["transcript"] if t["kind"] == "observation"
             and t["meta"].get("status") == "ok"]
    return ("daily_df" in code or "subday_df" in code) and any(len(o) > 3 and o != "nan" for o in shown)


def phia_example() -> tuple[str, dict]:
    """The PHIA episode the page shows: one whose code reads the data and prints something, else any that ran code
    and printed (tests/test_book.py finds its code and output on the rendered page)."""
    try:
        return study_record("phia", want=lambda r: _has_code_and_output(r) and _reads_data_and_shows_it(r))
    except LookupError:
        return study_record("phia", want=_has_code_and_output)


def _where(name: str, r: dict) -> str:
    return (f"*Record `{r['sample_id']}` of `{name}` in `results/cpu-study/cpu-study.bundle.tar.gz`; model "
            f"{r['model']} (an embedded CPU model, not one of the paper's backbones); label {r['label']}, "
            f"prediction {r['prediction']}.*\n\n")


def raptor_rows() -> list[dict]:
    rows = []
    with gzip.open(DEMO_RESPONSES, "rt") as f:
        for line in f:
            d = json.loads(line)
            if d.get("table") == "raptor_summaries":
                rows.append(d["row"])
    if not rows:
        raise LookupError(f"{DEMO_RESPONSES}: no raptor_summaries rows")
    return rows


def inside_agents_page() -> str:
    import pandas as pd

    out = [HEADER.format(src="results/cpu-study/cpu-study.bundle.tar.gz, results/demo/responses.jsonl.gz and "
                             "tables/case_study_d1_judged.csv")]
    name, r = study_record("healthllm", want=lambda r: not r["cot"])
    prompt = next(t for t in r["transcript"] if t["kind"] == "prompt")
    answer = next(t for t in r["transcript"] if t["kind"] == "completion")
    out += ["## A Health-LLM prompt and its answer\n\n", _where(name, r), _fence(prompt["content"]),
            "\nThe model's reply:\n\n", _fence(answer["content"])]

    name, r = study_record("rag", want=lambda r: not r["cot"])
    ret = next(t for t in r["transcript"] if t["kind"] == "retrieval")
    meta = ret["meta"]
    out += ["\n## A RAG retrieval with its scores\n\n", _where(name, r),
            "The query is the most recent day of the window; the candidates are the window's other days, ranked by "
            "cosine similarity of their embeddings.\n\nQuery:\n\n", _fence(meta["query"]),
            f"\nTop {len(meta['dates'])} of {meta['n_candidates']} candidate days:\n\n",
            _table(["day", "cosine score", "text"],
                   [[d, f"{s:.4f}", t] for d, s, t in
                    zip(meta["dates"], meta["scores"], ret["content"].splitlines(), strict=True)])]

    rows = sorted(raptor_rows(), key=lambda x: (x["dataset"], x["user"], x["day"]))
    first, tree = rows[0], rows[:1]
    for x in rows[1:]:  # the first user's first run of consecutive days: one look-back window's day nodes
        if (x["dataset"], x["user"]) != (first["dataset"], first["user"]) or \
                (pd.Timestamp(x["day"]) - pd.Timestamp(tree[-1]["day"])).days != 1:
            break
        tree.append(x)
    out += ["\n## A RAPTOR tree with its summaries\n\n",
            f"*Day nodes of user {first['user']} ({first['dataset']}) from the demo's committed `raptor_summaries` "
            f"rows (`results/demo/responses.jsonl.gz`, model `{first['model_id']}`, an embedded CPU model).* "
            "RAPTOR's tree has two levels here: the sub-day records of each look-back day are its leaves, and one "
            "summary the model writes per day is the node above them (kept under the hash of its leaves, "
            "`leaves_sha`, so every window that shares the day reuses it). Retrieval then ranks leaves and "
            "summaries together by cosine similarity to the query day.\n\n",
            "```text\n" + f"{first['user']} window\n"
            + "".join(f"{'└' if i == len(tree) - 1 else '├'}── {x['day']}: "
                      f"{x['summary'].splitlines()[0] if x['summary'] else '(empty)'}\n" for i, x in enumerate(tree))
            + "```\n"]

    name, r = phia_example()
    out += ["\n## A PHIA episode: code, output, answer\n\n", _where(name, r)]
    for t in r["transcript"]:
        if t["kind"] == "prompt" and t is r["transcript"][0]:
            out += ["**Task** (first lines):\n\n", _fence("\n".join(t["content"].splitlines()[:6]))]
        elif t["kind"] == "code":
            out += [f"**Code step** (iteration {t['meta'].get('iteration')}), run in the sandbox:\n\n",
                    f'<div class="phia-code">\n\n{_fence(t["content"], "python")}\n</div>\n\n']
        elif t["kind"] == "observation":  # the sandbox's output, or the harness's reply to a step with no code
            status = t["meta"].get("status")
            label = "**Harness reply** (no code to run, no answer)" if status == "no_action" else \
                f"**Sandbox output** (status {status})"
            out += [f"{label}:\n\n",
                    f'<div class="phia-output">\n\n{_fence(t["content"])}\n</div>\n\n']
        elif t["kind"] in ("forced_answer", "forced_finish") or (t["kind"] == "completion" and "Answer:" in
                                                                    t["content"]):
            out += [f"**{t['kind'].replace('_', ' ')}**:\n\n", _fence(t["content"])]
    out += [f"\nParsed answer: **{r['prediction']}** (label {r['label']}).\n"]

    judged = pd.read_csv(DEMO_JUDGED)
    cols = ["faithfulness", "evidence_grounding", "domain_knowledge", "safety", "clarity", "overall"]
    out += ["\n## The judge's verdict\n\n",
            f"*The demo's judge ({judged.judge_model.iloc[0]}, `{judged.judge_mode.iloc[0]}` mode) on the paper's "
            "Appendix D.1 case-study rationales (`tables/case_study_d1_judged.csv`); the committed results keep no "
            "judge verdict on the episode above.*\n\n",
            _table(["rationale", "status", *cols],
                   [[x.rationale, x.judge_status, *(_fmt(getattr(x, c)) for c in cols)]
                    for x in judged.itertuples()])]
    return "".join(out)


def llama_page() -> str:
    d = _json(ROOT / "bench" / "llama.json")
    t = d["threads"]
    two = t["two_1_thread_processes"]
    def speeds(m: dict) -> list[str]:
        return [f"{m['prompt_tok_s']:.1f}", f"{m['gen_tok_s']:.1f}"]

    rows = [["installed build (all threads)", *speeds(d["installed"])],
            ["portable wheel", *speeds(d["portable_wheel"])],
            ["1 thread", *speeds(t["1_thread"])], ["2 threads", *speeds(t["2_threads"])],
            ["two 1-thread processes at once (sum)", f"{sum(x['prompt_tok_s'] for x in two):.1f}",
             f"{sum(x['gen_tok_s'] for x in two):.1f}"]]
    r = d["ratio_installed_vs_portable"]
    return (HEADER.format(src="bench/llama.json (`make bench-llama`)")
            + f"The embedded model on this machine ({d['cpus']} cores; a {d['installed']['prompt_tokens']:,}-token "
              "prompt, one repeat each), tokens per second:\n\n"
            + _table(["llama.cpp", "prompt tokens/s", "generated tokens/s"], rows)
            + f"\nInstalled build against the portable wheel: prompt x{r['prompt']:.2f}, generation "
              f"x{r['generation']:.2f}; 2 threads against 1: prompt x{t['ratio_2_threads_vs_1']['prompt']:.2f}; "
              f"two 1-thread processes against one: x{t['ratio_two_processes_vs_1_thread']['prompt']:.2f} in total.\n")


def reproducibility_page() -> str:
    """What a cold run reproduces: two llama.cpp builds against each other and against the committed answers."""
    d = _json(ROOT / "bench" / "reproducibility.json")
    rows = [[what, f"{d[k]['identical_text']} of {d[k]['n']}", f"{d[k]['same_prediction']} of {d[k]['n']}"]
            for what, k in (("installed build vs portable build, same prompts, same order", "installed_vs_portable"),
                            ("installed build vs the committed answers", "installed_vs_committed"),
                            ("portable build vs the committed answers", "portable_vs_committed"))]
    order = d.get("order")
    extra = ""
    if order:
        extra = (f"\nThe same build and prompts in the reverse order: {order['identical_text']} of {order['n']} "
                 f"answers identical to the forward order's ({order['same_prediction']} of {order['n']} scores). A "
                 "cold run's answer depends on what the embedded model read before it, so a cold run is not an "
                 "exact reproduction even on the same machine; a replay of the committed responses is.\n")
    return (HEADER.format(src=f"bench/reproducibility.json (`{d['command']}`)")
            + f"Greedy answers to committed prompts of the CPU study ({len(d['cells'])} cells, re-answered by their "
              f"own agents with the response cache off; {d['threads']} threads, {d['cpus']} cores):\n\n"
            + _table(["comparison", "identical answers", "same score"], rows) + extra
            + "\nWhat this means for a reviewer: every committed table and figure is reproduced exactly by a replay "
              "of the committed responses (`make test-replay`, zero model calls); a cold run reproduces the "
              "pipeline, not each answer.\n")


def demo_checks_page() -> str:
    import pandas as pd

    t = pd.read_csv(ROOT / "tables" / "demo_checks.csv")
    return (HEADER.format(src="tables/demo_checks.csv (notebooks 01, 02, 05, 07)")
            + "Whether each mechanism of the committed demo visibly did its job (`tests/test_demo_results.py` "
              "recomputes each verdict from its value and goal):\n\n"
            + _table(["check", "value", "goal", "passed", "notebook"],
                     [[f"`{r.check}`", f"{r.value:g}", r.goal, "yes" if r.passed else "**no**", r.notebook]
                      for r in t.itertuples()]))


def sample_rules_page() -> str:
    import pandas as pd

    rules = pd.read_csv(ROOT / "tables" / "sample_rules.csv")
    ev = pd.read_csv(ROOT / "tables" / "evaluation_rules.csv")
    wide = rules.pivot_table(index="rule", columns="dataset", values=["n_samples", "mean_predictor_mae"],
                             aggfunc="first", sort=False)
    datasets = [d for d in ("pmdata", "globem", "diversityone") if d in set(rules.dataset)]
    src = rules.drop_duplicates("dataset").set_index("dataset")
    header = ["rule"] + [f"{d} ({src.source[d]}) samples / mean predictor (paper {src.paper_n_samples[d]:,} / "
                         f"{src.paper_mean_predictor_mae[d]:.2f})" for d in datasets]
    rows = [[f"`{rule}`"] + [f"{int(wide.loc[rule, ('n_samples', d)]):,} / "
                             f"{wide.loc[rule, ('mean_predictor_mae', d)]:.3f}" for d in datasets]
            for rule in wide.index]
    balms = ev[ev.sample_rule == "balms"]
    ev_src = balms.drop_duplicates("dataset").set_index("dataset")
    datasets = [d for d in ("pmdata", "globem", "diversityone") if d in ev_src.index]
    ev_rows = [[f"`{r.evaluation_rule}`"] + [
        f"{balms[(balms.dataset == d) & (balms.evaluation_rule == r.evaluation_rule)].n_scored.iloc[0]:,} / "
        f"{balms[(balms.dataset == d) & (balms.evaluation_rule == r.evaluation_rule)].mean_predictor_mae.iloc[0]:.3f}"
        for d in datasets] for r in balms.drop_duplicates("evaluation_rule").itertuples()]
    return (HEADER.format(src="tables/sample_rules.csv and tables/evaluation_rules.csv (notebook 00)")
            + "Each sample rule's samples and mean-predictor MAE (under `heldout30`), per dataset:\n\n"
            + _table(header, rows)
            + "\nUnder the sample rule `balms`, each evaluation rule's scored samples and mean-predictor MAE:\n\n"
            + _table(["evaluation rule"] + [f"{d} ({ev_src.source[d]}) scored / mean predictor (paper "
                                            f"{ev_src.paper_mean_predictor_mae[d]:.2f})" for d in datasets], ev_rows))


def evaluation_page() -> str:
    from balms.data.samples import DEFAULT_RULE
    from balms.data.summary import evaluation_statement
    from balms.experiments import config

    rule = config.load("demo").evaluation_rule
    return (HEADER.format(src="balms.data.summary.evaluation_statement (the demo profile's rule)")
            + evaluation_statement(DEFAULT_RULE, rule) + "\n")


def fidelity_effects_page() -> str:
    """What two of the paper's choices do to our numbers (issue 38): its CoT template as printed against our
    placeholder form, and the judge's window (look-back arrays) against each agent's own view."""
    from balms.experiments.claims import compare_sentence, fmt, pct

    c, j = _json(ROOT / "bench" / "cot_format.json"), _json(ROOT / "bench" / "judge_window.json")
    rows, sentences = [], []
    for system, v in c["systems"].items():
        for form in c["forms"]:
            f = v[form]
            rows.append([system, form, f["n"], f["n_parse_failures"], fmt(f["mae_excluded"]), fmt(f["mae_scored"]),
                         f"{f['modal_answer']} ({pct(f['modal_share'], 0)})", pct(f["modal_label_share"], 0),
                         pct(f["share_answer_1"], 0), pct(f["share_answer_3"], 0)])
        d = v["printed_minus_answer_line_exclude"]
        sentences.append("- " + compare_sentence(f"{system} with the printed template", "with the placeholder form",
                                                 d["diff"], d["ci_low"], d["ci_high"], n=d["n_pairs"])
                         + f" Answering 3 on every one of these days scores {fmt(v['mae_always_3'])}, answering 1 "
                           f"{fmt(v['mae_always_1'])}.")
    out = [HEADER.format(src="bench/cot_format.json (`python bench/bench_cot_format.py`) and bench/judge_window.json "
                              "(`python bench/bench_judge_window.py`)"),
           f"### The CoT template: as printed against our placeholder form\n\nThe CPU study's CoT days on "
           f"{c['dataset']}, model `{c['model']}` (a small CPU model, not a paper backbone), replayed from its "
           "committed responses; `printed` shows the paper's worked reasoning paragraph and its answer sentence "
           "(which names the value 3), `answer_line` a placeholder paragraph and `Answer: 1`.\n\n",
           _table(["system", "cot_format", "days", "unparsed", "MAE", "MAE (failures scored)", "commonest answer",
                   "commonest label", "answers of 1", "answers of 3"], rows),
           "\n" + "\n".join(sentences) + "\n\nRead with the answer shares: a form whose commonest answer is its "
           "example's value on most days measures what the example anchors, not what the sensors say.\n\n",
           f"### The judge's window: the look-back arrays against the agent's own view\n\nJudge `{j['judge_model']}` "
           f"({j['judge_mode']}, grounding hint {'on' if j['grounding_hint'] else 'off'}), the first "
           f"{j['n_per_system']} CoT rationales per system of `{j['agent_model']}` on {j['dataset']}.\n\n"]
    jrows = []
    for system, v in j["systems"].items():
        eg = v.get("evidence_grounding_lookback_minus_agent")
        ov = v.get("overall_lookback_minus_agent")
        jrows.append([system, f"{v['windows_that_differ']} of {v['n_rationales']}",
                      *(["identical judge input: no call"] * 2 if eg is None else
                        [f"{fmt(x['mean'], 3)} ({fmt(x['lo'], 3)} to {fmt(x['hi'], 3)}; n = {x['n']})"
                         for x in (eg, ov)])])
    out.append(_table(["system", "windows that differ", "Evidence Grounding, lookback - agent (95% CI)",
                       "Overall, lookback - agent (95% CI)"], jrows))
    for system, v in j["systems"].items():
        eg = v.get("evidence_grounding_lookback_minus_agent")
        if eg is not None:
            out.append("\n- " + compare_sentence(f"{system} judged on the look-back arrays", "on its own view",
                                                  eg["mean"], eg["lo"], eg["hi"], what="Evidence Grounding",
                                                  n=eg["n"], digits=3) + "\n")
    return "".join(out)


PAGES = {
    "evaluation.md": evaluation_page,
    "llama.md": llama_page,
    "reproducibility.md": reproducibility_page,
    "sample_rules.md": sample_rules_page,
    "demo_checks.md": demo_checks_page,
    "claims.md": claims_page,
    "scale.md": scale_page,
    "timing.md": timing_page,
    "disk.md": disk_page,
    "measurements.md": measurements_page,
    "inside_agents.md": inside_agents_page,
    "fidelity_effects.md": fidelity_effects_page,
}
RUNBOOK = ROOT / "docs" / "runbook.md"
# pages carrying generated blocks (<!-- BEGIN generated:NAME --> ... <!-- END generated:NAME -->), each block's writer
BLOCKS = {README: {"claims": readme_claims_block}, RUNBOOK: {"serve-paper-4-gpus": serve_paper_block}}


def rendered() -> dict[Path, str]:
    """Every generated file's text, by path (the README and the runbook with their blocks rewritten)."""
    out = {GENERATED / name: make() for name, make in PAGES.items()}
    for page, blocks in BLOCKS.items():
        text = page.read_text()
        names = {m.group(2) for m in BLOCK.finditer(text)}
        if names != set(blocks):
            raise ValueError(f"{page}: generated blocks {sorted(names)}, expected {sorted(blocks)} "
                             "(<!-- BEGIN generated:NAME --> ... <!-- END generated:NAME -->)")
        out[page] = BLOCK.sub(lambda m, blocks=blocks: m.group(1) + blocks[m.group(2)]() + m.group(4), text)
    return out


def measure_disk(where: Path) -> None:
    """`du -sh` of the three environments of the checkout `where`, once, into bench/disk.json (an environment not
    installed there is recorded as such, not skipped)."""
    import datetime

    envs = []
    for env in ENVIRONMENTS:
        if (where / env).is_dir():
            size = subprocess.run(["du", "-sh", env], cwd=where, capture_output=True, text=True, check=True)
            envs.append({"path": env, "size": size.stdout.split()[0] + "B"})
        else:
            envs.append({"path": env, "size": "not installed when measured"})
    present = [e["path"] for e in envs if not e["size"].startswith("not")]
    total = subprocess.run(["du", "-shc", *present], cwd=where, capture_output=True, text=True, check=True)
    envs.append({"path": "total", "size": total.stdout.splitlines()[-1].split()[0] + "B"})
    DISK.write_text(json.dumps({"command": "du -sh " + " ".join(ENVIRONMENTS), "environments": envs,
                                "measured_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")},
                               indent=1) + "\n")
    print(f"wrote {DISK}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming stale files")
    ap.add_argument("--measure-disk", type=Path, nargs="?", const=ROOT, metavar="CHECKOUT",
                    help="measure the environments of CHECKOUT (default this one) into bench/disk.json")
    a = ap.parse_args(argv)
    if a.measure_disk:
        measure_disk(a.measure_disk)
    stale = []
    for path, text in rendered().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not a.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    verb = "stale (run `make docs`)" if a.check else "written"
    print(f"docs: {len(stale)} file(s) {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
