# The two commands: `make demo` and `make test` (each sets up .venv first when needed).
PYTHON_311 ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-done
# the torch that setup installs when .venv has none; a GPU machine may want a given CUDA build, e.g.
#   make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
# (a torch already in .venv, CUDA or not, is kept: setup never reinstalls it)
TORCH ?= torch==2.13.0
# make test runs the suite in this many processes (pytest-xdist; tests/conftest.py says how)
TEST_WORKERS ?= 2
# more packages for setup to install, beside the others (pinned by requirements.txt), e.g.
#   make setup ALSO=triton        (the gpu extra: .ci/run installs it for the fused kernels' tests)
ALSO ?=

.PHONY: setup demo test clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON_311) -m venv $(VENV)
	$(PY) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, got " + sys.version'
	$(PIP) install -q --upgrade pip
	# packages are byte-compiled at install: where PYTHONDONTWRITEBYTECODE is set (as on the CI
	# machines) nothing compiled later is kept, and every process would compile what it imports.
	# torch as TORCH says (above; a torch already here is kept), the project with its dependencies,
	# and ALSO: three pips at once, each unpacking and compiling packages the others do not install
	# (torch's own requirements are none of the project's), in a third of the time of one after another
	{ $(PY) -c 'import torch' 2>/dev/null || $(PIP) install -q $(TORCH); } & torch=$$!; \
	{ test -z "$(ALSO)" || $(PIP) install -q -c requirements.txt $(ALSO); } & also=$$!; \
	$(PIP) install -q -c requirements.txt cython -e '.[bench,test]'; project=$$?; \
	wait $$torch && wait $$also && test $$project = 0
	# fairseq-fixed last, built against this torch, numpy and cython, without its declared
	# dependencies (torchaudio would pull a CUDA torch); pyproject.toml lists its real ones
	$(PY) -c 'import fairseq' 2>/dev/null || $(PIP) install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	$(PY) -c 'import fairseq, rfa_doc_mt; print("setup ok: fairseq", fairseq.__version__)'
	touch $(STAMP)

demo: setup
	bash scripts/demo.sh

test: setup
	$(VENV)/bin/ruff check -q rfa_doc_mt tests
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 tests

clean:
	rm -rf $(VENV) work
