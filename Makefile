# `make` builds the kernels; `make demo` runs the documents' worked examples on the GPU; `make test` runs the suite.
# ARCHS=90 make ...   builds for one GPU architecture only (fast iteration).
PYTHON ?= python3
export PYTHONPATH := $(CURDIR)/src$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: all kernels demo test bench info clean

all: kernels

kernels:
	$(PYTHON) build_ptx.py

demo: kernels
	$(PYTHON) -m gpumat demo

info: kernels
	$(PYTHON) -m gpumat info

test: kernels
	$(PYTHON) -m pytest -q -ra

bench: kernels
	$(PYTHON) -m gpumat bench all

clean:
	rm -rf build src/gpumat/kernels/*.fatbin src/gpumat/kernels/manifest.json
