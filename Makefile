# make setup: venv + portable llama-cpp-python + editable install + local models (idempotent, seconds when done)
.PHONY: setup test test-fast demo lint models

setup:
	bash scripts/setup.sh

test: setup
	bash scripts/test_deps.sh
	.venv/bin/python -m pytest -q

# every test that needs no model and no Ray and is not slow (pyproject.toml's markers), with no model installed,
# on both cores: a contributor's loop
test-fast:
	@FANOUT_SETUP_SKIP_MODELS=1 bash scripts/setup.sh  # seconds when done; redoes the install when pyproject changed
	@d=$$(mktemp -d); cp -r $${FANOUT_CACHE:-$$HOME/.cache/fanout}/cpu $$d/ 2>/dev/null || true; \
	FANOUT_MODELS_OFFLINE=1 FANOUT_CACHE=$$d .venv/bin/python -m pytest -q -m "not model and not ray and not slow" -n 2

demo: setup
	.venv/bin/fanout demo

models: setup
	.venv/bin/python -m fanout.cli.main models list

lint:
	@test -x .venv/bin/ruff || FANOUT_SETUP_SKIP_MODELS=1 bash scripts/setup.sh
	.venv/bin/ruff check .
