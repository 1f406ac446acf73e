# memsync — every target works from a fresh clone: it builds the virtual environment it needs.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
IMAGE       ?= memsync
TAG         ?= dev-$(shell git rev-parse --short HEAD 2>/dev/null || echo local)
KIND_CLUSTER ?= memsync-e2e
KIND_CONFIG  ?= kind-config.yaml
PYTEST_ARGS ?=

.PHONY: browser fuzz fuzz-ci api-schema chart soak install constraints tools test check lint typecheck unit dev bench image kind-up \
	kind-load deploy e2e kind-down crds clean core-schema controlplane cluster-up cluster-down cluster-test kind-tier \
	release pin-image

# Two stamps: the runtime alone (`make dev`: what a user of memsync needs, no test tooling), and the runtime
# with the test extra (`make install`, `make test` and every target that runs the tests or the linters).
RUNTIME_STAMP := $(VENV)/.installed-runtime

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml constraints.txt | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml constraints.txt | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP) $(RUNTIME_STAMP)

install: $(STAMP)

# Re-resolve the dependencies to the newest versions pyproject.toml allows, in a fresh venv, and pin them.
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet '.[test]'
	{ sed -n '/^#/p' constraints.txt; .venv-constraints/bin/pip freeze --exclude-editable \
	  | grep -v -E '^memsync( |==|@)'; } > constraints.txt.new && mv constraints.txt.new constraints.txt
	rm -rf .venv-constraints

lint: $(STAMP)
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# The test command CI runs: lint, types, then every tier that this machine can run, each phase timed by
# tests/timed.sh (with MEMSYNC_PHASE_LOG set, .ci/run prints the phases' times as a table at its end).
# 0. with Go installed, helm, promtool and kwok are built first (cached outside the clone);
# 1. every tier but kind, cluster, browser and the API schema tests, on two xdist workers (with the randomized
#    soak's default mix; its final-flush outage, the weighted variants and the long mode run on demand,
#    `make soak`); then the store browser in Debian's chromium through Playwright (tests/browser; skipped,
#    naming the package, where chromium is not installed, failed under CI); then every fuzz target of
#    tests/fuzz for a fixed number of inputs and seed (`make fuzz-ci`), and the schema-driven tests of the
#    store server's API (`make api-schema`, on SQLite and PostgreSQL), each a phase of its own;
# 2. the kind tier, serially, through tests/kind/tier.sh: it starts dockerd when none runs, builds kind, the
#    node image and the memsync image here (cached outside the clone), and makes a kind test that would skip
#    fail instead; without docker or Go installed the kind tests skip, each with the reason;
# 3. the cluster tier in one pytest process with one control plane; with Go installed its binaries are built
#    first (cached outside the clone).
TIMED := tests/timed.sh
test:
	@$(TIMED) "virtualenv" $(MAKE) --no-print-directory install
	@$(TIMED) "lint, types" $(MAKE) --no-print-directory lint typecheck
	@if command -v go >/dev/null 2>&1; then $(TIMED) "helm, promtool, kwok" $(MAKE) --no-print-directory tools; fi
	$(TIMED) "xdist tier" $(BIN)/pytest -n 2 -m "not kind and not cluster and not soak_on_demand and not browser and not api_schema" $(PYTEST_ARGS)
	$(TIMED) "browser tier" $(BIN)/pytest -p no:xdist -m browser tests/browser $(PYTEST_ARGS)
	$(TIMED) "fuzz" $(FUZZ_CI)
	$(TIMED) "API schema" $(API_SCHEMA)
	$(TIMED) "kind tier" tests/kind/tier.sh $(BIN)/pytest -p no:xdist -m kind tests/kind $(PYTEST_ARGS)
	@if command -v go >/dev/null 2>&1; then $(TIMED) "control plane" $(MAKE) --no-print-directory controlplane; fi
	$(TIMED) "cluster tier" $(BIN)/pytest -p no:xdist -m cluster tests/cluster $(PYTEST_ARGS)

# The whole randomized soak (tests/soak): 10,000 seeded operations through a fault-injecting proxy, the
# final-flush outage and the weighted variants (make test runs the first); each prints its seed.
soak: $(STAMP)
	$(BIN)/pytest -m soak tests/soak $(PYTEST_ARGS)

# The store browser's tests alone (Debian's chromium: apt-get install --no-install-recommends chromium).
browser: $(STAMP)
	$(BIN)/pytest -p no:xdist -m browser tests/browser $(PYTEST_ARGS)

# Coverage-guided fuzzing, the long run (docs/testing.md): every target of tests/fuzz for FUZZ_SECONDS (two at a
# time); the inputs that reached new code are merged into its corpus (tests/fuzz/corpus/<target>, to commit),
# and a table shows the coverage each reached. An input that broke a property fails it, printed with its replay.
FUZZ_SECONDS ?= 300
FUZZ_JOBS    ?= 2
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz/runner.py run --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS) --merge $(FUZZ_TARGETS)

# make test's fuzz phase: every target for its fixed number of inputs (runner.py CI_RUNS: about 25 s each here),
# with a fixed seed, from its committed corpus, nothing merged; a broken property fails it with the input saved.
FUZZ_CI := $(BIN)/python tests/fuzz/runner.py run --ci --jobs 2
fuzz-ci: $(STAMP)
	$(FUZZ_CI)

# make test's schema-driven phase: tests/api_schema on SQLite and PostgreSQL, a bounded number of examples.
API_SCHEMA := $(BIN)/pytest -n 2 -m api_schema tests/api_schema $(PYTEST_ARGS)
api-schema: $(STAMP)
	$(API_SCHEMA)

unit: $(STAMP)
	$(BIN)/pytest -n 2 tests/unit $(PYTEST_ARGS)

# The fast contributor check, before `make test`: lint, types and the unit tier (no server, no cluster).
check: lint typecheck unit

# The whole lifecycle on this machine: embedded store server, demo store, a synced folder; Ctrl-C flushes.
# ARGS passes flags to memsync dev, e.g. make dev ARGS="--port 8701 --conflict-policy keepLocalCopy".
ARGS ?=
dev: $(RUNTIME_STAMP)
	$(BIN)/memsync dev $(ARGS)

bench: $(STAMP)
	$(BIN)/python bench/store_server.py
	$(BIN)/python bench/sync_agent.py

crds: $(STAMP)
	$(BIN)/memsync operator crd > crds/sessionmemories.agents.memsync.dev.yaml
	$(BIN)/memsync operator crd --resource agentenvironments > crds/agentenvironments.agents.memsync.dev.yaml
	$(BIN)/python -m memsync.crd.reference crds/*.agents.memsync.dev.yaml > docs/crd-reference.md

# The sandbox template's Kubernetes types, from the pinned release's OpenAPI document (in the Go module cache).
core-schema: $(STAMP)
	$(BIN)/python -m memsync.devtools.core_schema

# The image of the operator, the sync agent and the store server. BASE=debootstrap builds on a Debian 12 +
# Python 3.11 base made on this machine (images/debian-base.sh) where the published base cannot be pulled;
# PYTHON_IMAGE=... names any other base. EXTRA_CA_BUNDLE=FILE is trusted by pip during the build only (a
# TLS-intercepting proxy); it never reaches the image. --network=host: the build needs no NAT of the daemon.
BASE            ?= published
PYTHON_IMAGE    ?=
EXTRA_CA_BUNDLE ?=
image:
	@mkdir -p build/image && rm -f build/image/extra-ca.pem
	@if [ -n "$(EXTRA_CA_BUNDLE)" ]; then cp "$(EXTRA_CA_BUNDLE)" build/image/extra-ca.pem; fi
	@base="$(PYTHON_IMAGE)"; \
	if [ -z "$$base" ] && [ "$(BASE)" = debootstrap ]; then base="$$(images/debian-base.sh python)" || exit 1; fi; \
	set -x; docker build --network=host $${base:+--build-arg PYTHON_IMAGE=$$base} -t $(IMAGE):$(TAG) .

kind-up:
	kind create cluster --name $(KIND_CLUSTER) --config $(KIND_CONFIG) --wait 5m

kind-load: image
	kind load docker-image $(IMAGE):$(TAG) --name $(KIND_CLUSTER)

# Applies to the kind cluster's context only (never whatever context is current), with the image that
# kind-load loaded in place of the overlay's memsync:kind.
# The CRDs go first and must be Established before the operator starts: it resolves its resources once.
deploy:
	kubectl --context kind-$(KIND_CLUSTER) apply --server-side -k crds/
	kubectl --context kind-$(KIND_CLUSTER) wait --for=condition=Established --timeout=120s \
	  crd/sessionmemories.agents.memsync.dev crd/agentenvironments.agents.memsync.dev
	kubectl kustomize manifests/overlays/kind | sed 's#memsync:kind#$(IMAGE):$(TAG)#g' \
	  | kubectl --context kind-$(KIND_CLUSTER) apply --server-side -f -
	kubectl --context kind-$(KIND_CLUSTER) -n memsync-system rollout status deployment/memsync-operator --timeout=300s
	kubectl --context kind-$(KIND_CLUSTER) -n memsync-system rollout status deployment/memsync-store --timeout=300s

# Creates the cluster, builds and loads the image, deploys overlays/kind, runs the kind scenarios,
# and deletes the cluster unless KEEP_CLUSTER=1 (with your docker, kind and the published node image).
e2e: $(STAMP)
	MEMSYNC_IMAGE=$(IMAGE):$(TAG) KIND_CLUSTER=$(KIND_CLUSTER) $(BIN)/pytest -p no:xdist -m kind tests/kind $(PYTEST_ARGS)

# The kind tier as `make test` runs it, on a machine with no registry: dockerd, kind, the node image and the
# memsync image all built here (root, Go, docker.io and debootstrap needed); KEEP_CLUSTER=1 keeps it.
kind-tier: $(STAMP)
	tests/kind/tier.sh $(BIN)/pytest -p no:xdist -m kind tests/kind $(PYTEST_ARGS)

# The cluster tier: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl built from the
# pinned Go modules in tests/cluster/controlplane into a cache outside the clone (reused when current).
controlplane:
	nice -n 10 tests/cluster/controlplane/build.sh

# helm and promtool for the chart and alert-rule tests, and kwok for the fleet benchmark
# (bench/operator_fleet.py), built from the pinned Go modules in tests/tools into a cache outside the clone
# (reused when current; the tests build them on first use too).
tools:
	nice -n 10 tests/tools/build.sh helm >/dev/null
	nice -n 10 tests/tools/build.sh promtool >/dev/null
	nice -n 10 tests/tools/build.sh kwok >/dev/null

# A local cluster to try memsync with kubectl: prints KUBECONFIG=...; runs until `make cluster-down`.
cluster-up: $(STAMP) controlplane
	PYTHONPATH=tests $(BIN)/python -m cluster.tier up

# Stops what the local control plane's quickstart started (its store server), then the cluster.
cluster-down: $(STAMP)
	examples/quickstart/local-control-plane.sh stop
	PYTHONPATH=tests $(BIN)/python -m cluster.tier down

# The cluster scenarios: one control plane for the whole pytest session (never under xdist).
cluster-test: $(STAMP) controlplane
	$(BIN)/pytest -p no:xdist -m cluster tests/cluster $(PYTEST_ARGS)

kind-down:
	kind delete cluster --name $(KIND_CLUSTER)

# The chart as a release ships it: `helm package` with the version and appVersion of the one version
# (memsync.__version__), the image repository of the release (CHART_IMAGE; the tag defaults to the
# appVersion, CHART_IMAGE_TAG overrides it), and `helm repo index` (CHART_URL: where the .tgz will be
# served, else the index names it relatively). The output is CHART_OUT/memsync-VERSION.tgz and index.yaml.
VERSION         := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' operator/memsync/__init__.py)
HELM            ?= $(shell p="$$(tests/tools/build.sh helm --check 2>/dev/null)" && echo "$$p" | tail -n 1 || echo helm)
CHART_OUT       ?= build/chart
CHART_IMAGE     ?= memsync
CHART_IMAGE_TAG ?=
CHART_IMAGE_DIGEST ?=
CHART_URL       ?=
chart:
	rm -rf "$(CHART_OUT)/src" && mkdir -p "$(CHART_OUT)/src"
	cp -RL charts/memsync "$(CHART_OUT)/src/memsync"
	sed -i -e '/^image:/,/^[^ #]/{s#^  repository: .*#  repository: $(CHART_IMAGE)#;s#^  tag: .*#  tag: "$(CHART_IMAGE_TAG)"#;s#^  digest: .*#  digest: "$(CHART_IMAGE_DIGEST)"#;}' \
	  "$(CHART_OUT)/src/memsync/values.yaml"
	$(HELM) package "$(CHART_OUT)/src/memsync" --version $(VERSION) --app-version $(VERSION) --destination "$(CHART_OUT)"
	$(HELM) repo index "$(CHART_OUT)" $(if $(CHART_URL),--url $(CHART_URL))
	rm -rf "$(CHART_OUT)/src"

# A release into DIST (default dist/): the wheel and the sdist, the image as an OCI archive with its digest,
# and the chart packaged with that digest, plus SHA256SUMS (release/release.sh; docker, skopeo and helm).
# RELEASE_IMAGE=memsync:TAG archives an image built already instead of building memsync:VERSION.
DIST ?= dist
release: $(STAMP)
	release/release.sh "$(DIST)"

# After pushing the release's image (skopeo copy --preserve-digests oci-archive:dist/memsync-VERSION.oci.tar
# docker://REPOSITORY:VERSION), point both installs at it by digest in one step: the production overlay's
# `images:` (newName, digest) and DIST/values-image.yaml for `helm install -f`.
REPOSITORY ?=
OVERLAY    ?= manifests/overlays/production
pin-image:
	@test -n "$(REPOSITORY)" || { echo "usage: make pin-image REPOSITORY=registry.example.com/memsync" >&2; exit 2; }
	@digest="$$(cat "$(DIST)/memsync-$(VERSION).image-digest")" || exit 2; \
	sed -i -e "/^  - name: memsync$$/,/^[^ ]/{s#^    newName: .*#    newName: $(REPOSITORY)#;s#^    newTag: .*#    digest: $$digest#;s#^    digest: .*#    digest: $$digest#;}" \
	  "$(OVERLAY)/kustomization.yaml"; \
	printf 'image:\n  repository: %s\n  digest: "%s"\n' "$(REPOSITORY)" "$$digest" > "$(DIST)/values-image.yaml"; \
	echo "$(OVERLAY): $(REPOSITORY)@$$digest; helm: -f $(DIST)/values-image.yaml"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .memsync
