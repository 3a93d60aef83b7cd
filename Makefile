# pd-serve: `make setup` once (the other targets run it when needed), `make demo`, `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.pd-serve-installed
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test unit integration bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup_venv.sh
	bash scripts/setup_venv.sh
	$(PY) -m pd_serve.default_model
	touch $(STAMP)

demo: setup
	$(VENV)/bin/pd-serve demo

test: setup
	$(PY) -m pytest tests -ra

unit: setup
	$(PY) -m pytest tests/unit -q

integration: setup
	$(PY) -m pytest tests/integration -ra

bench: setup
	$(PY) -m bench.serving_core_figures

clean:
	rm -rf $(VENV) .pytest_cache
