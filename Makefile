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
# MPICH for the multi-device path (see shared notes on MLIR 22), and METIS (gpmetis) for the
# placement benchmark's baseline, and Chromium, whose headless mode the report's browser test
# draws `report.html` with.
APT_PACKAGES := llvm-22-dev libmlir-22-dev mlir-22-tools libclang-22-dev clang-22 libomp-22-dev \
	libpolly-22-dev libzstd-dev libz3-dev libxml2-dev zlib1g-dev mpich libmpich-dev metis \
	chromium g++
# Python modules for the model and test-data scripts (import names = pip names). onnx is
# pinned: the ONNX conformance manifest (testdata/onnx-conformance/) lists the node test
# cases of that release.
PY_PACKAGES := numpy safetensors onnx==1.23.2 onnxruntime
# The bundled ONNX model `make demo` imports and runs.
DEMO_ONNX := testdata/models/onnx/mlp

TESSERA := $(CARGO) run --quiet -p tessera --

.PHONY: help deps build demo test fmt lint check-mlir models fuzz

# The fuzz harness's input kinds (fuzz/run.sh); FUZZ_KIND selects some for `make fuzz`.
FUZZ_KINDS := onnx onnx_structured text_ir target_toml calibration_toml placement_json npy
FUZZ_KIND ?=
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= 0

help:
	@echo "make deps        install missing system, Python and Rust dependencies (Debian 12)"
	@echo "make build       build the workspace"
	@echo "make demo        deps + build, then compile bundled ONNX models (cpu; mcm-2x2 with its report), run one compiled and interpreted"
	@echo "make test        deps, then tests, the MLIR toolchain check, rustfmt and clippy"
	@echo "make fmt         format all Rust code"
	@echo "make lint        clippy with warnings as errors"
	@echo "make check-mlir  lower and run testdata/mlir/smoke.mlir with MLIR 22"
	@echo "make models      regenerate testdata/models/ (needs numpy, safetensors)"
	@echo "make fuzz        fuzz every input kind (stable Rust, libFuzzer): FUZZ_SECONDS=60 per kind,"
	@echo "                 FUZZ_KIND=\"onnx npy\" (default all: $(FUZZ_KINDS)),"
	@echo "                 FUZZ_RUNS=N stops a kind after N runs; crashes land in fuzz/artifacts/KIND/"

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
	for spec in $(PY_PACKAGES); do \
		m="$${spec%%==*}"; v="$${spec#*==}"; \
		if [ "$$v" = "$$spec" ]; then \
			$(PYTHON) -c "import $$m" >/dev/null 2>&1 || missing="$$missing $$spec"; \
		else \
			$(PYTHON) -c "import sys, $$m; sys.exit($$m.__version__ != '$$v')" >/dev/null 2>&1 \
				|| missing="$$missing $$spec"; \
		fi; \
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
	@mkdir -p target/demo
	@echo "== tessera compile $(DEMO_ONNX)/model.onnx --input-shape x=4x32 -o target/demo/mlp-cpu   (default target: cpu)"
	@$(TESSERA) compile $(DEMO_ONNX)/model.onnx --input-shape x=4x32 -o target/demo/mlp-cpu
	@echo "== ls target/demo/mlp-cpu   (per-device MLIR, the CPU's shared library, manifest, weights, plan)"
	@ls target/demo/mlp-cpu
	@echo "== tessera run target/demo/mlp-cpu --input x=$(DEMO_ONNX)/input_0_x.npy   (the shared library compile built, loaded)"
	@$(TESSERA) run target/demo/mlp-cpu --input x=$(DEMO_ONNX)/input_0_x.npy
	@echo "== tessera compile testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 --target mcm-2x2 -o target/demo/gpt2-mcm"
	@$(TESSERA) compile testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 --target mcm-2x2 -o target/demo/gpt2-mcm
	@echo "== the report (topology, timeline, memory, placement, ops by module, passes): open target/demo/gpt2-mcm/report.html in a browser"
	@echo "== tessera import $(DEMO_ONNX)/model.onnx -o target/demo/mlp.tir; head -n 16 target/demo/mlp.tir"
	@$(TESSERA) import $(DEMO_ONNX)/model.onnx -o target/demo/mlp.tir
	@head -n 16 target/demo/mlp.tir
	@echo "   ..."
	@echo "== tessera run $(DEMO_ONNX)/model.onnx --input x=$(DEMO_ONNX)/input_0_x.npy"
	@$(TESSERA) run $(DEMO_ONNX)/model.onnx --input x=$(DEMO_ONNX)/input_0_x.npy
	@echo "== onnxruntime computed (first row): $$($(PYTHON) -c 'import numpy as n; print(n.round(n.load("$(DEMO_ONNX)/output_0_probs.npy")[0][:4], 6))' 2>/dev/null || echo "(needs numpy)")"

# deps installs Chromium, so the report's browser test must run, not skip.
test: export TESSERA_REQUIRE_CHROMIUM := 1
# Each step says what it is first (`== make test: ...`), so a failure's log names its step.
test: deps
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		echo "== make test: cargo nextest run --workspace"; \
		$(CARGO) nextest run --workspace --no-fail-fast </dev/null; \
		echo "== make test: cargo test --workspace --doc"; \
		$(CARGO) test --workspace --doc </dev/null; \
	else \
		echo "== make test: cargo test --workspace"; \
		$(CARGO) test --workspace --no-fail-fast </dev/null; \
	fi
	@echo "== make test: scripts/check-mlir.sh"
	scripts/check-mlir.sh </dev/null
	@# Fuzzing: every saved crash input (testdata/fuzz/KIND/crashes/) replayed, then a few
	@# seconds of fuzzing per kind from its seeds.
	@echo "== make test: fuzz/run.sh check"
	FUZZ_CHECK_SECONDS=3 fuzz/run.sh check </dev/null
	@echo "== make test: cargo fmt --check, cargo clippy"
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings </dev/null

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

check-mlir:
	scripts/check-mlir.sh

fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) nice -n 19 fuzz/run.sh fuzz $(FUZZ_KIND)

models:
	$(PYTHON) testdata/models/make_mlp.py
