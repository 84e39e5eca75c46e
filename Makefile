# make setup: venv + portable llama-cpp-python + editable install + local models (idempotent, seconds when done)
.PHONY: setup test test-fast demo lint models

setup:
	bash scripts/setup.sh

# pytest's test runs: PYTHONDONTWRITEBYTECODE emptied so pytest keeps its rewritten test modules in
# tests/__pycache__ (git-ignored) and a worker's collection reads them instead of rewriting every module again.
# 2 workers: 3 and 4 were no faster on the shared 2-core box and cost up to 25% more CPU (docs/performance.md
# "Test suite")
PYTEST := PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q
# two passes: every test without a model or Ray on 2 workers, then the Ray tests and the other model tests in two
# pytest processes side by side (scripts/test_models_and_ray.sh says why and how)
test: setup
	bash scripts/test_deps.sh
	$(PYTEST) -m "not model and not ray" -n 2
	bash scripts/test_models_and_ray.sh

# every test that needs no model and no Ray and is not slow (pyproject.toml's markers), with no model installed:
# a contributor's loop. Three workers on 2 cores: a third of the tier's wall is waits (servers starting, timeouts),
# which a third worker fills (64 -> 57 s on a quiet 2-core box; 4 workers: 56 s for 10% more CPU)
test-fast:
	@FANOUT_SETUP_SKIP_MODELS=1 bash scripts/setup.sh  # seconds when done; redoes the install when pyproject changed
	@d=$$(mktemp -d); cp -r $${FANOUT_CACHE:-$$HOME/.cache/fanout}/cpu $$d/ 2>/dev/null || true; \
	FANOUT_MODELS_OFFLINE=1 FANOUT_CACHE=$$d $(PYTEST) -m "not model and not ray and not slow" -n 3; \
	rc=$$?; rm -rf $$d; exit $$rc

demo: setup
	.venv/bin/fanout demo

models: setup
	.venv/bin/python -m fanout.cli.main models list

# ruff, then mypy over fanout, fanout.actors and fanout.pipelines (pyproject's [tool.mypy] states the strictness).
# mypy cannot follow setuptools' editable import hook, so it reads the wheel's layout from a tree of symlinks in
# build/typecheck (fanout/'s entries, actors -> fanout/actors, pipelines -> fanout/pipelines), rebuilt each run:
# the same names the wheel installs, with or without an editable install and whatever fanout/__init__.py does.
TYPECHECK := build/typecheck
lint:
	@test -x .venv/bin/ruff -a -x .venv/bin/mypy || FANOUT_SETUP_SKIP_MODELS=1 bash scripts/setup.sh
	.venv/bin/ruff check .
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/fanout
	@for f in fanout/*; do ln -s "$(CURDIR)/$$f" $(TYPECHECK)/fanout/; done
	@ln -s "$(CURDIR)/actors" $(TYPECHECK)/fanout/actors && ln -s "$(CURDIR)/pipelines" $(TYPECHECK)/fanout/pipelines
	cd $(TYPECHECK) && $(CURDIR)/.venv/bin/mypy --config-file $(CURDIR)/pyproject.toml -p fanout
