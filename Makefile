# WheelFoundry developer commands. Everything installs into .venv from this repo's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The lint tools live in venvs of their own: their pins (checkov's boto3 1.35, packaging 23) would downgrade
# .venv's. Under WF_CACHE_DIR when it is set (.ci/run sets it and keeps it between runs: a fresh clone then
# reuses them instead of spending about 60 s installing them), keyed by version and Python; else in .tools.
SAM_VERSION := 1.170.0
CHECKOV_VERSION := 3.3.30
TOOLS := $(if $(WF_CACHE_DIR),$(WF_CACHE_DIR)/lint-tools/$(shell $(PYTHON) -c 'import sys; print("py%d%d" % sys.version_info[:2])'),.tools)
SAM_HOME := $(TOOLS)/sam-$(SAM_VERSION)
CHECKOV_HOME := $(TOOLS)/checkov-$(CHECKOV_VERSION)
SAM := $(SAM_HOME)/bin/sam
CHECKOV := $(CHECKOV_HOME)/bin/checkov
# mypy's cache too (about 14 s of mypy's own without it): it checks each file's hash against a fresh clone's
# new mtimes, so a kept cache gives the same verdict.
MYPY_CACHE := $(if $(WF_CACHE_DIR),$(WF_CACHE_DIR)/mypy-cache,.mypy_cache)

# Bytecode caches on, as on a developer's machine and a build instance. A machine that exports
# PYTHONDONTWRITEBYTECODE (some CI images do) keeps none: every process then compiles all it imports from
# source, and an `import torch` from the build environments (installed with --no-compile, wfbuild/envs.py)
# takes 5-7 s instead of 3.4 on a slow core. The .pyc files land in .venv, the cached environments and
# git-ignored __pycache__ folders, which the bundle, the Lambda zip and the source packs leave out.
unexport PYTHONDONTWRITEBYTECODE

# JUNIT_DIR=DIR: each suite also writes DIR/<suite>.xml (tools/test_durations.py reads them).
JUNIT_TEST := $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/test.xml)
JUNIT_HEAVY := $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/test-heavy.xml)

.PHONY: demo test test-heavy test-heavy-slow corpus lint docs venv sam checkov clean docker docker-stop

$(STAMP): pyproject.toml examples/extension/setup.py functions/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	# The Lambda bundle's lock holds the tests to the versions Lambda runs (jsonschema, packaging and their
	# closure): as constraints, without its hashes (pip's hash mode refuses the editable install).
	sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' functions/requirements.txt > $(VENV)/lambda-constraints.txt
	$(BIN)/python -m pip install --quiet --no-compile -c $(VENV)/lambda-constraints.txt -e '.[dev]'
	# The example extension's own tests import it: build it once against the CPU torch here.
	$(BIN)/python -m pip install --quiet --no-build-isolation ./examples/extension
	touch $(STAMP)

venv: $(STAMP)

## The main job: the embedded AWS builds the example extension through the real state machine,
## publishes it to the emulated index, installs it into a fresh venv and runs its tests.
demo: $(STAMP)
	$(BIN)/wheelfoundry local demo

## The test suite (what CI runs after `make lint`): one pytest worker per core, up to 4 (pytest-xdist), each
## test file on one worker (its module fixtures built once: 245 s against 317 s split across workers), the
## files in tests/conftest.py's longest-first order (--no-loadscope-reorder: xdist would put the files
## with the most tests first, and a one-test 9-minute file last);
## the builds' environments are shared through one WF_CACHE_DIR under file locks (tests/conftest.py).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4 --dist loadfile --no-loadscope-reorder -m "not heavy" $(JUNIT_TEST)

## The heavy tests (every CUDA build: merged wheels, the GPU step, reproducibility, nvcc threads; the
## published-bytes, quota and two-folder reproducible runs; the Docker builds, which need `make docker`;
## publishing through a real index server): each makes several real builds. .ci/heavy runs them, a step of
## .ci/run (docs/development.md, "The gate").
test-heavy: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4 --dist loadfile --no-loadscope-reorder -m heavy $(JUNIT_HEAVY)

## The heavy step (.ci/heavy: the Docker test bed, then make test-heavy) on slower, busier cores: a busy loop
## beside it by default, or SLOW_CORES='--quota 1.2' (a CPU cgroup). What passes on the gate's machine and
## fails here asserts what a machine decides (docs/development.md, "Slower cores"). Not a step of .ci/run.
SLOW_CORES ?= --hogs 1
test-heavy-slow: $(STAMP)
	$(BIN)/python tools/slow_cores.py $(SLOW_CORES) -- bash .ci/heavy

## The corpus (examples/corpus): real PyTorch extensions from PyPI, each built for CPU through the embedded
## farm, installed from its index into a fresh venv and its ops checked against plain torch; a table and
## bench/results/corpus-<UTC>.json. CORPUS_ARGS='--all' adds the ones marked ci = false.
corpus: $(STAMP)
	$(BIN)/python tools/corpus.py $(CORPUS_ARGS)

## The Docker test bed for the container-mode tests (tests/container/): installs docker.io from Debian's
## archive when missing, starts this project's own dockerd (no bridge network), builds or reuses the
## test images. `make docker-stop` stops the engine; the images stay for the next run.
docker: $(STAMP)
	$(BIN)/python tools/docker_testbed.py start
	$(BIN)/python tools/docker_testbed.py images

docker-stop:
	python3 tools/docker_testbed.py stop

TOOL_REQUIREMENT.sam-$(SAM_VERSION) := aws-sam-cli==$(SAM_VERSION)
TOOL_REQUIREMENT.checkov-$(CHECKOV_VERSION) := checkov==$(CHECKOV_VERSION)

# A venv counts once its install finished (.installed): one cut short is made again, not reused.
$(TOOLS)/%/.installed:
	rm -rf $(@D)
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install --quiet --no-compile '$(TOOL_REQUIREMENT.$*)'
	touch $@

sam: $(SAM_HOME)/.installed

checkov: $(CHECKOV_HOME)/.installed

# A variable as this Makefile computes it: tests/test_security_checkov.py asks where checkov lives.
print-%:
	@echo '$($*)'

lint: $(STAMP) $(SAM_HOME)/.installed $(CHECKOV_HOME)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	$(BIN)/cfn-lint template.yaml
	SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 $(SAM) validate --lint --region us-east-1
	$(BIN)/statelint --ignore=URI statemachine/build.asl.json
	# CloudFront Functions against the cloudfront-js-2.0 runtime's documented rules (QuickJS accepts more).
	$(BIN)/python tools/lint_cloudfront_js.py template.yaml
	find buildspecs examples -name '*.sh' -print0 | xargs -0 -r $(BIN)/shellcheck
	find buildspecs -name '*.Dockerfile' -print0 | xargs -0 -r -n1 $(BIN)/hadolint
	# Offline and quiet: no policy download, no platform API; every skip carries its reason in the file.
	$(CHECKOV) --skip-download --compact --quiet --framework cloudformation -f template.yaml
	$(CHECKOV) --skip-download --compact --quiet --framework dockerfile -d buildspecs/images
	# The documentation site (mkdocs.yml): a broken link or anchor, or a page left out of the nav, fails.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## The documentation site on http://127.0.0.1:8000 (docs/, mkdocs.yml); docs/performance.md comes from
## bench/results/*.json: `$(BIN)/python tools/perf_docs.py` after a bench.
docs: $(STAMP)
	$(BIN)/python tools/perf_docs.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .tools .wf-local dist build site
