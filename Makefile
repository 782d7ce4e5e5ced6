# gpurun — see README.md. `make test` runs every test; integration tests need
# root and the engines .ci/run installs (docker.io, containerd, runc, ...).
GO        ?= go
PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -s -w -X github.com/gpurun/gpurun/internal/version.Version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $$($(GO) env GOPATH)/bin/staticcheck)
# Packages whose tests need no daemon and no root: all but the engines'
# integration tests and their harness (integration/agreement and
# integration/checkhost's parsers are unit tests).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e '/integration$$' -e '/integration/harness$$')

.PHONY: all build demo test test-unit test-integration bench lint fuzz install clean

all: build

build: bin/gpurun bin/gpurun-full bin/gpurun-runtime

# gpurun (cmd/gpurun) is the lean launcher (docs/docker-run.md#speed):
# docker run/create and the OCI hook start in ~4 ms; it hands compose, plan,
# doctor, stats, resize, node, nri and webhook to gpurun-full
# (cmd/gpurun-full), installed next to it. Two main packages, no build
# tags: go build, go install ./cmd/... and make all give the same binaries.
bin/gpurun: FORCE
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpurun

bin/gpurun-full: FORCE
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpurun-full

bin/gpurun-runtime: FORCE
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpurun-runtime

FORCE:

# The quick start: works on a fresh machine, no daemon and no root needed.
FIXTURES = oci/testdata/fixtures
demo: bin/gpurun bin/gpurun-full
	@echo '$$ gpurun plan --spec $(FIXTURES)/docker-20.10-env-nvidia-all.json --host-memory 64g'
	@bin/gpurun plan --spec $(FIXTURES)/docker-20.10-env-nvidia-all.json --host-memory 64g
	@echo
	@echo '$$ gpurun plan --spec $(FIXTURES)/containerd-1.6-cri-container-env-nvidia-all.json --host-memory 64g --json'
	@bin/gpurun plan --spec $(FIXTURES)/containerd-1.6-cri-container-env-nvidia-all.json --host-memory 64g --json
	@echo
	@echo '$$ gpurun --dry-run run --rm --gpus all --memory 16g nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py'
	@DOCKER_HOST=unix:///nonexistent.sock bin/gpurun --dry-run run --rm --gpus all --memory 16g nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py

# make test on a fresh machine: test-deps (hack/test-deps.sh) installs what
# the tests need first — the engines from Debian's packages, staticcheck, a
# Docker daemon that answers — and as non-root stops at once, naming the
# command that works. Then the three suites, in order.
test: test-deps
	$(MAKE) --no-print-directory test-unit test-integration e2e

.PHONY: test-deps
test-deps:
	@hack/test-deps.sh

# The tools the tests build from the Go module proxy (containerd 2.x, helm,
# docker compose v2, nfpm), each once per version: under
# /var/cache/gpurun-tools as root (CI and sudo make test), so that a new
# checkout does not build them again, else in .tools/.
TOOLS ?= $(if $(filter 0,$(shell id -u)),/var/cache/gpurun-tools,$(CURDIR)/.tools)

# containerd 2.x, built from the Go module proxy, loads the version 3/4
# configs the installer writes (Debian ships 1.6 only); with its own ctr and
# runc shim it also runs the NRI plugin's integration tests.
CONTAINERD2_VERSION ?= v2.4.2
CONTAINERD2_BIN ?= $(TOOLS)/containerd-$(CONTAINERD2_VERSION)
CONTAINERD2 ?= $(CONTAINERD2_BIN)/containerd
CONTAINERD2_TOOLS = $(CONTAINERD2_BIN)/containerd $(CONTAINERD2_BIN)/ctr $(CONTAINERD2_BIN)/containerd-shim-runc-v2
$(CONTAINERD2_TOOLS):
	GOBIN=$(@D) CGO_ENABLED=0 $(GO) install github.com/containerd/containerd/v2/cmd/$(@F)@$(CONTAINERD2_VERSION)

# helm, for the chart (deploy/helm/gpurun): make lint runs helm lint, the
# unit tests compare helm template with the kustomize overlays and the
# cluster tests helm install it. Built from the Go module proxy into
# .tools/ once per version.
HELM_VERSION ?= v3.22.0
HELM ?= $(TOOLS)/helm-$(HELM_VERSION)/helm
$(HELM):
	GOBIN=$(@D) CGO_ENABLED=0 $(GO) install -ldflags '-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# docker compose v2, the CLI plugin most compose users run (Debian ships
# docker-compose 1.29 only): the compose integration test brings the
# migrated projects up with both. Built from the Go module proxy into
# $(TOOLS) once per version, inside the downloaded module (its go.mod has
# exclude directives, which go install refuses); v2.40.x still talks to
# the Docker Engine 20.10 (API 1.41) the tests start.
COMPOSE_V2_VERSION ?= v2.40.3
COMPOSE_V2 ?= $(TOOLS)/compose-$(COMPOSE_V2_VERSION)/cli-plugins/docker-compose
$(COMPOSE_V2):
	$(GO) mod download github.com/docker/compose/v2@$(COMPOSE_V2_VERSION)
	cd "$$($(GO) env GOMODCACHE)/github.com/docker/compose/v2@$(COMPOSE_V2_VERSION)" && \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X github.com/docker/compose/v2/internal.Version=$(COMPOSE_V2_VERSION)' -o $@ ./cmd

test-unit: $(CONTAINERD2) $(HELM)
	GPURUN_TEST_CONTAINERD2=$(CONTAINERD2) GPURUN_TEST_HELM=$(HELM) $(GO) test -count=1 $(UNIT_PKGS)
	@# gpurun explain's recall and false findings on its corpus of real logs.
	@$(GO) test -count=1 -v -run '^TestCorpusRecall$$' ./diagnose/explain/ | grep 'corpus: '

# NVIDIA's container toolkit, the stack every GPU node runs next to gpurun
# (docs/nvidia.md): nvidia-ctk, nvidia-ctk-installer (the GPU Operator's
# toolkit entry point, with NVIDIA's NRI plugin), nvidia-container-runtime
# and its .cdi/.legacy modes, and nvidia-cdi-hook, built from the Go module
# proxy with cgo (its internal/cuda needs it) once per version: into
# /var/cache/gpurun-tools as root (CI keeps it warm), else into .tools/.
# The integration tests in integration/nvidia_test.go run them
# ($$GPURUN_TEST_NVIDIA_TOOLKIT).
NVIDIA_TOOLKIT_VERSION ?= v1.20.2
NVIDIA_TOOLKIT_CACHE   ?= $(if $(filter 0,$(shell id -u)),/var/cache/gpurun-tools,$(CURDIR)/.tools)
NVIDIA_TOOLKIT_BIN     ?= $(NVIDIA_TOOLKIT_CACHE)/nvidia-container-toolkit-$(NVIDIA_TOOLKIT_VERSION)
NVIDIA_TOOLKIT_CMDS     = nvidia-ctk nvidia-ctk-installer nvidia-container-runtime nvidia-container-runtime.cdi nvidia-container-runtime.legacy nvidia-cdi-hook
.PHONY: nvidia-toolkit
nvidia-toolkit: $(NVIDIA_TOOLKIT_BIN)/.complete
$(NVIDIA_TOOLKIT_BIN)/.complete:
	mkdir -p $(@D)
	GOBIN=$(@D) CGO_ENABLED=1 $(GO) install $(foreach c,$(NVIDIA_TOOLKIT_CMDS),github.com/NVIDIA/nvidia-container-toolkit/cmd/$(c)@$(NVIDIA_TOOLKIT_VERSION))
	touch $@

# Kubernetes for the cluster tests (integration/cluster_test.go): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl built from the
# Go module proxy by hack/build-kubernetes.sh, once per release, into
# K8S_CACHE/<version>/bin (about 10 minutes on 2 cores; then a no-op): the
# newest release the proxy serves. Since 1.35 a kubelet on cgroup v1 starts
# only when its configuration says failCgroupV1: false, as the harness's does.
K8S_VERSION ?= v1.37.2
K8S_CACHE   ?= /var/cache/gpurun-k8s
K8S_BIN     ?= $(K8S_CACHE)/$(K8S_VERSION)/bin
.PHONY: k8s-tools
k8s-tools:
	GPURUN_K8S_VERSION=$(K8S_VERSION) GPURUN_K8S_CACHE=$(K8S_CACHE) hack/build-kubernetes.sh >/dev/null

# The previous release of gpurun that the upgrade tests install first and
# downgrade to (docs/upgrading.md): hack/build-previous.sh checks
# PREV_COMMIT out of this repository's history, builds its image context
# with its own Makefile and copies its Dockerfile and chart, once, into
# PREV_CACHE/<commit> (a few seconds with a warm Go build cache; then a
# no-op).
PREV_COMMIT ?= 460d3b5
PREV_CACHE  ?= $(if $(filter 0,$(shell id -u)),/var/cache/gpurun-prev,$(CURDIR)/.tools/prev)
PREV        ?= $(PREV_CACHE)/$(PREV_COMMIT)
.PHONY: prev-release
prev-release:
	GPURUN_PREV_COMMIT=$(PREV_COMMIT) GPURUN_PREV_CACHE=$(PREV_CACHE) hack/build-previous.sh >/dev/null

# Real engines (dockerd, containerd + CRI, runc, podman, a single-node
# Kubernetes cluster), each on its own sockets, state dirs and network
# namespace; needs root. The tests build bin/ themselves. Verbose, so that
# the log says what each test cost: the last lines list every top-level
# test by time (hack/testtimes.sh).
test-integration: build $(CONTAINERD2_TOOLS) k8s-tools $(HELM) $(COMPOSE_V2) nvidia-toolkit prev-release
	@out=$$(mktemp); status=0; \
	GPURUN_TEST_CONTAINERD2_BIN=$(CONTAINERD2_BIN) GPURUN_TEST_NVIDIA_TOOLKIT=$(NVIDIA_TOOLKIT_BIN) GPURUN_TEST_K8S_BIN=$(K8S_BIN) GPURUN_TEST_HELM=$(HELM) GPURUN_TEST_COMPOSE_V2=$(COMPOSE_V2) GPURUN_TEST_PREV=$(PREV) \
		$(GO) test -v -count=1 -p 1 -timeout 40m -tags integration ./integration/ ./integration/harness/ ./integration/checkhost/ 2>&1 | tee $$out || status=1; \
	grep -q '^FAIL' $$out && status=1; hack/testtimes.sh <$$out; rm -f $$out; exit $$status

# The machine as the tests found it (integration/checkhost; root): host-snapshot
# records docker0 and the other interfaces, the engines' configs and
# hooks.d, gpurun's install paths, mounts, cgroups, engine processes and
# the harness's /tmp dirs; check-host, after the tests, names each change
# and fails. .ci/run does both around make test.
HOST_SNAPSHOT ?= $(CURDIR)/.host-snapshot.json
.PHONY: host-snapshot check-host
host-snapshot:
	$(GO) run ./integration/checkhost snapshot $(HOST_SNAPSHOT)

check-host:
	$(GO) run ./integration/checkhost compare $(HOST_SNAPSHOT)

# The users' failure end to end on Debian's PyTorch (docs/e2e.md): a
# DataLoader dies of Docker's default /dev/shm (a Bus error) and finishes
# under gpurun run and gpurun-runtime. Needs root and mmdebstrap; the PyTorch
# image is built once (~1.5 min) and cached in /var/cache/gpurun-e2e.
.PHONY: e2e
E2E_TAGS = integration e2e
e2e: $(CONTAINERD2_TOOLS) k8s-tools
	GPURUN_TEST_CONTAINERD2_BIN=$(CONTAINERD2_BIN) GPURUN_TEST_K8S_BIN=$(K8S_BIN) \
		$(GO) test -count=1 -p 1 -timeout 20m -tags '$(E2E_TAGS)' -run '^TestTorch|^TestClusterTorch' -v ./integration/

# BenchmarkRunOverhead runs 60 pairs: docker run varies by ±10 ms from run
# to run, and 20 leave the median of gpurun's added time that far off.
# BenchmarkRuntimeShimRuncRun runs 60 rounds of runc, a Go binary that only
# execs runc and gpurun-runtime, and reports each one's CPU time and its
# ratio to runc's (cpu-ratio; go-exec-cpu-ratio is the floor of any Go
# wrapper). BenchmarkHookRunc runs 60 rounds of runc alone, runc with a Go
# hook that does nothing and runc with gpurun's createRuntime hook as
# `gpurun hook` and as `gpurun-runtime hook` (what install writes), the
# same way (cpu-ratio, runtime-hook-cpu-ratio; go-hook-cpu-ratio is the
# floor of any Go hook). kube/webhook's BenchmarkServeProcess serves the
# same paced reviews from gpurun's webhook and from one that does nothing
# (internal/nullwebhook), each in a process of its own (cpu-ms/review).
# The unit benchmarks include the NRI plugin's under 100 concurrent
# creates (node/nri: BenchmarkCreateContainerConcurrent, the handler's
# p50/p99; ...ConcurrentNRI, the same through the NRI protocol, with the
# round trip's p50/p99).
# The webhook's load test (integration/cluster_webhook_load_test.go) on the
# multi-node cluster prints its bench: line: the API server's admission
# p50/p99 for gpurun's webhook, the webhook's own, pods/s and how long the
# webhook's rollout took, and its floor's bench: line (the same load with
# no webhook, with one that does nothing, with gpurun's); the chart's
# upgrade from the previous release and back
# (integration/cluster_multinode_upgrade_test.go) prints how long the node
# agent's rollouts took, the containerd restarts and the GPU pods created
# meanwhile (about 5 minutes, cluster included).
bench: build $(CONTAINERD2_TOOLS) k8s-tools $(HELM) prev-release
	out=$$(mktemp); status=0; \
	GPURUN_TEST_K8S_BIN=$(K8S_BIN) GPURUN_TEST_CONTAINERD2_BIN=$(CONTAINERD2_BIN) GPURUN_TEST_HELM=$(HELM) GPURUN_TEST_PREV=$(PREV) \
		$(GO) test -count=1 -timeout 20m -tags integration \
		-run '^TestClusterMultiNode$$/^cluster$$/^(webhook-load|chart_runtime-class)$$' -v ./integration/ >$$out 2>&1 || status=$$?; \
	grep -E '^bench:|load_test.go|load_floor_test.go|upgrade_test.go|^(---|ok|FAIL)' $$out; [ $$status = 0 ] || tail -50 $$out; rm -f $$out; exit $$status
	$(GO) test -run '^$$' -bench . -benchmem $(UNIT_PKGS)
	$(GO) test -run '^$$' -bench . -skip '^(BenchmarkRunOverhead|BenchmarkRuntimeShimRuncRun|BenchmarkHookRunc)$$' -benchtime 20x -tags integration ./integration/...
	$(GO) test -run '^$$' -bench '^(BenchmarkRunOverhead|BenchmarkRuntimeShimRuncRun|BenchmarkHookRunc)$$' -benchtime 60x -tags integration ./integration/
	$(GO) test -run '^$$' -bench '^BenchmarkTorch' -benchtime 3x -timeout 20m -tags '$(E2E_TAGS)' ./integration/

# A short run of every fuzz target (go test runs one target per invocation).
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseSize$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzParseQuantity$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzFormatQuantity$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzParseFast$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME) ./oci
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./node/specfile
	$(GO) test -run '^$$' -fuzz '^FuzzEngineHostShm$$' -fuzztime $(FUZZTIME) ./oci
	$(GO) test -run '^$$' -fuzz '^FuzzWalk$$' -fuzztime $(FUZZTIME) ./node/specfile
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFields$$' -fuzztime $(FUZZTIME) ./node/specfile
	$(GO) test -run '^$$' -fuzz '^FuzzPlain$$' -fuzztime $(FUZZTIME) ./node/specfile
	$(GO) test -run '^$$' -fuzz '^FuzzParseArgs$$' -fuzztime $(FUZZTIME) ./node/shim
	$(GO) test -run '^$$' -fuzz '^FuzzParseState$$' -fuzztime $(FUZZTIME) ./node/hook
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./docker/runargs
	$(GO) test -run '^$$' -fuzz '^FuzzInstall$$' -fuzztime $(FUZZTIME) ./engine/docker
	$(GO) test -run '^$$' -fuzz '^FuzzInstall$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./engine/containerd
	$(GO) test -run '^$$' -fuzz '^FuzzScan$$' -fuzztime $(FUZZTIME) ./diagnose/explain
	$(GO) test -run '^$$' -fuzz '^FuzzInsertFirst$$' -fuzztime $(FUZZTIME) ./compose/yamledit

# The chart in each mode, warnings as errors.
HELM_LINT_MODES = runtime-class default-runtime nri webhook
lint: $(HELM)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags '$(E2E_TAGS)' ./integration/...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags '$(E2E_TAGS)' ./integration/...
	set -e; for mode in $(HELM_LINT_MODES); do $(HELM) lint --strict --quiet --set mode=$$mode deploy/helm/gpurun; done

# make install also links kubectl's plugin (kubectl gpurun doctor pod/NAME)
# and its completion to gpurun.
install: build
	install -D -m 0755 bin/gpurun $(DESTDIR)$(BINDIR)/gpurun
	install -D -m 0755 bin/gpurun-full $(DESTDIR)$(BINDIR)/gpurun-full
	install -D -m 0755 bin/gpurun-runtime $(DESTDIR)$(BINDIR)/gpurun-runtime
	ln -sfn gpurun $(DESTDIR)$(BINDIR)/kubectl-gpurun
	ln -sfn gpurun $(DESTDIR)$(BINDIR)/kubectl_complete-gpurun

# Packages for workstations and Docker hosts (docs/packages.md): static
# binaries for each of DIST_ARCHES, and a .deb and an .rpm of each, with the
# man pages, shell completion and the default /etc/gpurun/config.toml that
# `gpurun-full __gendocs` generates from the code. nfpm is a tool, not a
# dependency of gpurun: it is built from the Go module proxy into $(TOOLS)
# (v2.46 and later need a module the proxy refuses).
.PHONY: dist docs docs-check
DIST         ?= dist
DIST_ARCHES  ?= amd64 arm64
NFPM_VERSION ?= v2.45.2
NFPM         ?= $(TOOLS)/nfpm-$(NFPM_VERSION)/nfpm
# The package version: tag v1.2.3 -> 1.2.3, v1.2.3-4-gabc -> 1.2.3+4.gabc,
# v1.2.3-rc.1 -> 1.2.3~rc.1, an untagged commit abc -> 0.0.0+abc.
PKG_VERSION  ?= $(shell echo '$(VERSION)' | sed -E -e 's/^v//' \
	-e 's/^([0-9]+\.[0-9]+\.[0-9]+)-([0-9]+)-g([0-9a-f]+)/\1+\2.g\3/' \
	-e 's/^([0-9]+\.[0-9]+\.[0-9]+)-/\1~/' -e '/^[0-9]+\.[0-9]+\.[0-9]+/!s/^/0.0.0+/' -e 's/-/./g')
# Man pages carry the last commit's date, not the build's.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# The released binaries, each the main package of its name under cmd/;
# release_build gives go build's arguments for one of them ($1, a shell
# word) into a directory ($2).
RELEASE_BINARIES = gpurun gpurun-full gpurun-runtime
release_build = -o $2/$1 ./cmd/$1

$(NFPM):
	GOBIN=$(@D) CGO_ENABLED=0 $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# What the integration tests and e2e build before they run, helm aside
# (make lint builds it): the tools from the Go module proxy, bin/, nfpm for
# TestDist, and the PyTorch image's root file system from Debian's
# packages. .ci/run builds them in the background while make lint runs,
# three at a time (make -j3), so that their downloads and single-threaded
# links overlap its compiles; each is a no-op once cached. The longest
# first: on a new machine Kubernetes takes about 20 minutes beside lint
# and the others, the PyTorch image 8 (mostly its download), everything
# else together 15.
.PHONY: test-tools e2e-image
test-tools: k8s-tools e2e-image build $(CONTAINERD2_TOOLS) $(COMPOSE_V2) nvidia-toolkit prev-release $(NFPM)
e2e-image:
	hack/build-torch-image.sh --tarball >/dev/null

dist: $(NFPM)
	rm -rf $(DIST)
	set -e; for arch in $(DIST_ARCHES); do for b in $(RELEASE_BINARIES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) $(call release_build,$$b,$(DIST)/gpurun_linux_$$arch); \
	done; done
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(DIST)/share/gendocs ./cmd/gpurun-full
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(DIST)/share/gendocs __gendocs --out $(DIST)/share
	rm $(DIST)/share/gendocs
	set -e; for arch in $(DIST_ARCHES); do for pkg in deb rpm; do \
		DIST=$(DIST) ARCH=$$arch PKG_VERSION=$(PKG_VERSION) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
			$(NFPM) package --config packaging/nfpm.yaml --packager $$pkg --target $(DIST)/; \
	done; done
	cd $(DIST) && sha256sum *.deb *.rpm gpurun_linux_*/* > SHA256SUMS
	@ls -l $(DIST)

# docs/config.md, the configuration reference, is generated from the policy
# package; docgen's unit test fails when it is stale.
docs:
	$(GO) run ./cmd/gpurun-full __gendocs --config-md docs/config.md

docs-check:
	$(GO) test -count=1 -run 'TestConfigMarkdownFresh' ./cmd/internal/docgen

# The Kubernetes DaemonSets' image (deploy/image/Dockerfile, FROM scratch):
# static binaries for each of IMAGE_ARCHS in bin/image/linux-<arch>/, then
# one docker build for this machine's architecture. For a multi-arch image
# run `make image-context IMAGE_ARCHS="amd64 arm64"` and docker buildx build
# --platform linux/amd64,linux/arm64 over bin/image (see the Dockerfile).
.PHONY: image image-context
IMAGE       ?= ghcr.io/gpurun/gpurun:$(VERSION)
IMAGE_ARCH  ?= $(shell $(GO) env GOARCH)
IMAGE_ARCHS ?= $(IMAGE_ARCH)
image-context:
	rm -rf bin/image
	set -e; for arch in $(IMAGE_ARCHS); do for b in $(RELEASE_BINARIES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) $(call release_build,$$b,bin/image/linux-$$arch); \
	done; done

image: image-context
	docker build --build-arg TARGETARCH=$(IMAGE_ARCH) --build-arg VERSION=$(VERSION) -t $(IMAGE) -f deploy/image/Dockerfile bin/image

clean:
	rm -rf bin dist
