# tessera: developer and CI entry points. `make help` lists them.
#
# `deps` installs what the build and tests need on Debian 12 (as root, or with sudo); it only
# installs what is missing, so it is fast when everything is present.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
PYTHON ?= python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# LLVM/MLIR 22 from Debian's packages (melior needs the static MLIR libraries and tblgen),
# and MPICH for the multi-device path (see shared notes on MLIR 22).
APT_PACKAGES := llvm-22-dev libmlir-22-dev mlir-22-tools libclang-22-dev clang-22 \
	libpolly-22-dev libzstd-dev libz3-dev libxml2-dev zlib1g-dev mpich libmpich-dev
# Python modules for the model and test-data scripts (import names = pip names).
PY_PACKAGES := numpy safetensors onnx onnxruntime

TESSERA := $(CARGO) run --quiet -p tessera --

.PHONY: help deps build demo test fmt lint check-mlir models

help:
	@echo "make deps        install missing system, Python and Rust dependencies (Debian 12)"
	@echo "make build       build the workspace"
	@echo "make demo        deps + build, then format and run the bundled sample model"
	@echo "make test        deps, then tests, the MLIR toolchain check, rustfmt and clippy"
	@echo "make fmt         format all Rust code"
	@echo "make lint        clippy with warnings as errors"
	@echo "make check-mlir  lower and run testdata/mlir/smoke.mlir with MLIR 22"
	@echo "make models      regenerate testdata/models/ (needs numpy, safetensors)"

deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: apt-get install$$missing"; \
		$(SUDO) apt-get update -q; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@missing=""; \
	for m in $(PY_PACKAGES); do \
		$(PYTHON) -c "import $$m" >/dev/null 2>&1 || missing="$$missing $$m"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: pip install$$missing"; \
		PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install -q --disable-pip-version-check $$missing \
			|| PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install -q --disable-pip-version-check --break-system-packages $$missing; \
	fi
	@$(CARGO) fmt --version >/dev/null 2>&1 || { echo "deps: rustup component add rustfmt"; rustup component add rustfmt; }
	@$(CARGO) clippy --version >/dev/null 2>&1 || { echo "deps: rustup component add clippy"; rustup component add clippy; }
	@echo "deps: ok"

build:
	$(CARGO) build --workspace

demo: deps
	$(CARGO) build -p tessera
	@echo "== tessera fmt testdata/models/mlp.tir"
	@$(TESSERA) fmt testdata/models/mlp.tir
	@echo "== tessera run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy"
	@$(TESSERA) run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy

test: deps
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast; \
		$(CARGO) test --workspace --doc; \
	else \
		$(CARGO) test --workspace --no-fail-fast; \
	fi
	scripts/check-mlir.sh
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

check-mlir:
	scripts/check-mlir.sh

models:
	$(PYTHON) testdata/models/make_mlp.py
