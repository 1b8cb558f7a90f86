# The two commands: `make demo` and `make test`. Each creates .venv when missing and installs the project into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.flytune-installed
PYTEST_ARGS ?=

.PHONY: demo test install clean
install: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh
	VENV=$(VENV) bash scripts/bootstrap.sh
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m flytune_nb demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
