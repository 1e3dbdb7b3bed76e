# llmaz for Python: every developer and CI entry point. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALL_STAMP := $(VENV)/.installed

# Everything built from Go modules lives outside the repo, keyed by version, and is built only when missing.
LLMAZ_CACHE ?= $(HOME)/.cache/llmaz
TOOLS_BIN := $(LLMAZ_CACHE)/bin/tools
KUSTOMIZE_VERSION := v5.8.1
KUSTOMIZE := $(TOOLS_BIN)/kustomize-$(KUSTOMIZE_VERSION)
export LLMAZ_CACHE

PYTEST_ARGS ?=

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Setup

.PHONY: install
install: $(INSTALL_STAMP) ## Create .venv and install the package with its dev extras (idempotent).

$(INSTALL_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

$(KUSTOMIZE):
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN)/.kustomize-build go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(TOOLS_BIN)/.kustomize-build/kustomize $@ && rmdir $(TOOLS_BIN)/.kustomize-build

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build the pinned kustomize into the cache.
	@echo $(KUSTOMIZE)

##@ Development

.PHONY: manifests
manifests: install ## Generate CRDs (and other generated manifests) from src/llmaz/apis.
	$(PY) -m llmaz.apis.crdgen config/crd/bases

.PHONY: fmt
fmt: install ## Format the code.
	$(VENV)/bin/ruff format src test hack
	$(VENV)/bin/ruff check --fix src test hack

.PHONY: lint
lint: install ## ruff check, ruff format --check, mypy --strict.
	$(VENV)/bin/ruff check src test hack
	$(VENV)/bin/ruff format --check src test hack
	$(VENV)/bin/mypy --strict src

.PHONY: kustomize-build
kustomize-build: $(KUSTOMIZE) ## Check that every kustomize directory under config/ builds.
	@for d in $$(find config -name kustomization.yaml -printf '%h\n' | sort); do \
	  $(KUSTOMIZE) build $$d > /dev/null || { echo "kustomize build $$d failed"; exit 1; }; \
	  echo "kustomize build $$d: ok"; \
	done

##@ Test

.PHONY: test-unit
test-unit: install ## Fast tests: pure logic, no cluster.
	$(PY) -m pytest test/unit $(PYTEST_ARGS)

.PHONY: test
test: lint kustomize-build test-unit ## Everything CI runs: lint and every test tier.

##@ Run

.PHONY: run
run: ## Start a local control plane and the manager in the foreground.
	@echo "make run will start a local kube-apiserver and etcd, install the CRDs and default backends," >&2
	@echo "and run llmaz-manager in the foreground. It is not available yet." >&2
	@exit 2
