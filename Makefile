# Each target brings what it needs (tools/devenv.py): the Python packages, from the package index into
# .venv/ unless an active virtual environment or python3 itself already has them, and a CUDA compiler
# (nvcc from $NVCC, the PATH or $CUDA_HOME, else the pinned package-index one, installed likewise).
# The targets that need a GPU (demo, info, bench, sanitize) first ask the driver for one (--gpu) and,
# without one, say so and stop with exit status 2 before fetching or building anything; test, kernels
# and wheel need no GPU.
#   make demo | test | bench [OP=matmul]          build the kernels, then run (test: after lint and docs)
#   make info                                     the GPU and its kernels; builds them only if none are built
#   make lint                                     ruff check and ruff format --check over the tree
#   make docs                                     the HTML docs (Sphinx, warnings as errors): build/docs/html
#   make kernels                                  build the kernels only
#   make sanitize [TESTS=tests/x.py]              the GPU tests under compute-sanitizer memcheck and racecheck
#   make plot RESULT=benchmarks/results/X.json    draw a benchmark result
#   make wheel                                    dist/gpumat-*.whl, kernels inside (built first, with progress lines)
#   ARCHS=90 make ...                             build for one GPU architecture only (fast iteration)
PYTHON ?= python3
DEVENV = $(PYTHON) tools/devenv.py
OP ?= all

.PHONY: all kernels demo test lint docs sanitize info bench plot wheel clean

all: kernels

kernels:
	$(DEVENV) --kernels

demo:
	$(DEVENV) --gpu --deps --kernels -- -m gpumat demo

test: lint docs
	$(DEVENV) --deps --extra test --kernels -- -m pytest -q

lint:
	$(DEVENV) --extra lint -- -m ruff check .
	$(DEVENV) --extra lint -- -m ruff format --check .

docs:
	$(DEVENV) --deps --extra docs -- -m sphinx -W --keep-going -q -b html -d build/docs/doctrees docs build/docs/html

sanitize:
	$(DEVENV) --gpu --deps --extra test --kernels -- tools/sanitize.py $(TESTS)

info:
	$(DEVENV) --gpu --deps --kernels-if-absent -- -m gpumat info

bench:
	$(DEVENV) --gpu --deps --kernels -- -m gpumat bench $(OP)

plot:
	$(DEVENV) --extra plot -- benchmarks/plot.py $(RESULT)

wheel:
	$(DEVENV) --module pip --kernels --nvcc-env -- -m pip wheel --no-deps -w dist .

clean:
	rm -rf build dist src/*.egg-info src/gpumat/kernels/*.fatbin src/gpumat/kernels/manifest.json src/gpumat/kernels/entries.json
