# make setup: venv + portable llama-cpp-python + editable install + local models (idempotent, seconds when done)
.PHONY: setup test demo lint models

setup:
	bash scripts/setup.sh

test: setup
	.venv/bin/python -m pytest -q

demo: setup
	.venv/bin/fanout demo

models: setup
	.venv/bin/python -m faces.cli models list

lint:
	@test -x .venv/bin/ruff || FANOUT_SETUP_SKIP_MODELS=1 bash scripts/setup.sh
	.venv/bin/ruff check .
