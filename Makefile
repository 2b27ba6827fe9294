# deed: build, test, lint. Targets:
#   make build    bin/deed
#   make test     unit + in-process S3 tests, with the race detector (the
#                 simulation runs 200 seeds; its broken variants must be caught)
#   make sim      more seeds of the simulation: make sim SEEDS=5000 [SEEDBASE=1]
#   make test-s3  the same, plus every S3 table against versitygw (installed on first use)
#   make test-stores  the store tables and the end-to-end scenarios on gs:// and az://
#                 against fake-gcs-server and Azurite (installed on first use)
#   make fuzz     the .ltx fuzzers at length (300,000 runs each; make test runs 20,000)
#   make test-long  the end-to-end fleet runs that take most of a minute
#                 each (planned operations, exactly-once appends under
#                 faults); not in make test; CI runs it
#   make fault-run  a minute of faults on a fleet of 4 real daemons (pauses,
#                 kill -9, a partition, a forced claim, moves, a drain, a
#                 SIGTERM restart, a join and a leave): checks every answer
#                 against the log and prints the refusals by code and the
#                 longest unavailability per operation; not in make test.
#                 DEED_BIN=/path runs another build (default bin/deed)
#   make test-browser  the status page of a 3-node fleet in headless Chromium
#                 (Debian's chromium installed on first use, or the target
#                 fails; browsertest/ is its own Go module)
#   make lint     gofmt + go vet
#   make bench    benchmarks only
#   make bench-peers  deed, Litestream's S3 leaser and sets3lock side by side
#   make run      the node daemon on the embedded store (./deed-data)
#   make release  static binaries for every platform + SHA256SUMS in dist/
#                 (VERSION=v1.2.3; default: git describe)
#   make release-check  build a release and verify its artifacts and checksums
#   make image    OCI image of the linux binary, no Docker daemon needed
#                 (dist/deed-image.tar; deploy/image is its own Go module)
#   make image-check  build the image twice: same digest, config, binary runs
#   make deploy-check  the Grafana dashboard and alert rules query real series;
#                 the Kubernetes manifests decode strictly and use real flags
#   make man      man pages from the command tree into dist/man
#   make vuln     govulncheck (skipped, not failed, without its database;
#                 VULNDB=file:///path uses a local copy)
#   make vuln-selftest  make vuln fails on a finding, skips when offline
#   make clean    remove build output

GO ?= go
BIN := bin/deed

# CACHE holds tools the tests need (versitygw). Override: make test-s3 CACHE=/somewhere
CACHE ?= $(HOME)/.cache/deed-bin
VERSITYGW_VERSION := v1.8.0
VERSITYGW := $(abspath $(CACHE))/versitygw
FAKEGCS_VERSION := v1.56.1
FAKEGCS := $(abspath $(CACHE))/fake-gcs-server
# Azurite 3.35.0 is the newest that runs on Node 20.
AZURITE_VERSION := 3.35.0
AZURITE_DIR := $(abspath $(CACHE))/azurite-$(AZURITE_VERSION)
AZURITE := $(AZURITE_DIR)/node_modules/azurite/dist/src/blob/main.js

# VERSION, when set, is linked in and printed by `deed version`; otherwise
# deed derives it from the Go build info.
VERSION ?=
LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))

.PHONY: build test fuzz test-long fault-run test-s3 versitygw test-stores fakegcs azurite test-browser lint bench bench-peers run clean sim release release-check image image-check deploy-check man vuln vuln-selftest

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/deed

# The second line builds the deliberately broken protocol variants (the
# deedbroken tag: never in a release build) and checks that the
# simulation's checkers catch every one of them, and that replication's
# step-by-step races (and the daemon's handoff of a chain end) break under
# the variants they pin. The last two fuzz
# the .ltx decoder and encoder briefly (seeds: testdata/ltx and
# replication/testdata/fuzz); a failing input is written to
# replication/testdata/fuzz/ for `go test -run` to replay. FUZZTIME
# lengthens them: make test FUZZTIME=2000000x (or a duration, FUZZTIME=5m).
# The default is a count, not a duration: Go 1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" when a duration
# runs out while a starved worker is mid-call (go.dev/issue/75804, fixed in
# Go 1.27); a count has no deadline to race. make test runs 20,000 of
# each (a few seconds, after the instrumented build); make fuzz, which CI
# runs, 300,000.
FUZZTIME ?= 20000x
test:
	$(GO) test -race ./...
	$(GO) test -race -tags deedbroken -run '^TestBroken' ./replication/simulation ./replication ./daemon
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication
	$(GO) test -run '^$$' -fuzz '^FuzzEncode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication

# fuzz: the two .ltx fuzzers at length (CI runs it; FUZZTIME overrides).
fuzz: FUZZTIME = 300000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication
	$(GO) test -run '^$$' -fuzz '^FuzzEncode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication

# test-long: the end-to-end runs of a fleet of real processes that take
# most of a minute each (TestE2EPlannedOperations,
# TestE2EKeyedAppendsExactlyOnce), env-gated (DEED_E2E_LONG) so that make
# test stays within its budget; CI runs them, and make fault-run.
test-long:
	DEED_E2E_LONG=1 $(GO) test -race -count=1 -timeout 15m -run '^(TestE2EPlannedOperations|TestE2EKeyedAppendsExactlyOnce)$$' ./cmd/deed

# fault-run: TestE2EFaultRun, env-gated (DEED_FAULT_RUN) so that make test
# stays fast. DEED_BIN defaults to bin/deed (no race detector: the numbers
# compare builds, not the detector's overhead); DEED_FAULT_TTL (default 2s),
# DEED_FAULT_REPORT (a file for the report), DEED_FAULT_LOGS (a directory
# for the daemons' logs) pass through.
DEED_BIN ?= $(abspath $(BIN))
fault-run: build
	DEED_FAULT_RUN=1 DEED_BIN='$(DEED_BIN)' $(GO) test -count=1 -v -timeout 10m -run '^TestE2EFaultRun$$' ./cmd/deed

# sim: SEEDS seeds of the simulation from SEEDBASE on; a failing seed prints
# the command that replays it. Then the exhaustive model of owner changes
# (replication/model) at its larger bound: three data owners and a
# lock-only claimer, about 95 million states over its three rules, 14
# minutes on a loaded 2-core machine (make test runs it at two data owners,
# about 400,000 states, a few seconds).
SEEDS ?= 1000
SEEDBASE ?= 1
sim:
	$(GO) test -race -count=1 -timeout 0 ./replication/simulation -run '^TestSimulation$$' -seeds=$(SEEDS) -seedbase=$(SEEDBASE)
	$(GO) test -count=1 -timeout 0 ./replication/model -model.large -v -run '^TestModel'

# versitygw is installed only when missing or a different version; the tests
# (fakes3/s3test) start it on 127.0.0.1 with a posix backend in a temp dir
# and stop it by PID when the test binary ends.
versitygw:
	@if $(GO) version -m '$(VERSITYGW)' 2>/dev/null | grep -q 'github.com/versity/versitygw[[:space:]]*$(VERSITYGW_VERSION)'; then \
		echo "versitygw $(VERSITYGW_VERSION): $(VERSITYGW)"; \
	else \
		echo "installing versitygw $(VERSITYGW_VERSION) into $(abspath $(CACHE))"; \
		mkdir -p '$(abspath $(CACHE))' && \
		GOBIN='$(abspath $(CACHE))' $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi

test-s3: versitygw
	DEED_REQUIRE_STORES=versitygw DEED_VERSITYGW='$(VERSITYGW)' $(GO) test -race -count=1 ./...

# fake-gcs-server and Azurite are installed only when missing or a
# different version, each reporting how long its install took; the tests
# (bucket/storetest) start one per test on 127.0.0.1 and stop it by PID.
fakegcs:
	@if $(GO) version -m '$(FAKEGCS)' 2>/dev/null | grep -q 'github.com/fsouza/fake-gcs-server[[:space:]]*$(FAKEGCS_VERSION)'; then \
		echo "fake-gcs-server $(FAKEGCS_VERSION): $(FAKEGCS)"; \
	else \
		echo "installing fake-gcs-server $(FAKEGCS_VERSION) into $(abspath $(CACHE))"; \
		start=$$(date +%s); mkdir -p '$(abspath $(CACHE))' && \
		GOBIN='$(abspath $(CACHE))' $(GO) install github.com/fsouza/fake-gcs-server@$(FAKEGCS_VERSION) && \
		echo "fake-gcs-server installed in $$(( $$(date +%s) - start ))s"; \
	fi

azurite:
	@if [ -f '$(AZURITE)' ] && grep -q '"version": "$(AZURITE_VERSION)"' '$(AZURITE_DIR)/node_modules/azurite/package.json'; then \
		echo "azurite $(AZURITE_VERSION): $(AZURITE)"; \
	else \
		command -v node >/dev/null && command -v npm >/dev/null || { echo "azurite needs node and npm"; exit 1; }; \
		echo "installing azurite $(AZURITE_VERSION) into $(AZURITE_DIR) (node $$(node --version))"; \
		start=$$(date +%s); mkdir -p '$(AZURITE_DIR)' && \
		npm install --prefix '$(AZURITE_DIR)' --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION) && \
		echo "azurite installed in $$(( $$(date +%s) - start ))s"; \
	fi

# test-stores: the contract, probe, ownership and replication tables and
# the end-to-end scenarios of deed run (claim, forced takeover, kill -9
# failover, drain) and deed bench on gs:// and az:// buckets.
test-stores: fakegcs azurite
	DEED_REQUIRE_STORES=fakegcs,azurite DEED_FAKEGCS='$(FAKEGCS)' DEED_AZURITE='$(AZURITE)' $(GO) test -race -count=1 \
		-run 'TestContract|TestProbeS3Targets|TestOwnershipOverS3|TestScenariosOverS3|TestE2EStores' \
		./bucket/... ./owner ./replication ./cmd/deed

# test-browser: three `deed run` daemons on one `deed fakes3`, and node-1's
# status page (GET /) loaded in headless Chromium, driven by chromedp: it
# must show the three nodes and the node's cells, with no console error,
# exception, or failed request. Debian's chromium is installed when it is
# not on PATH (apt-get; through sudo when not root); if it cannot be, the
# target fails, and the test itself fails rather than skips without a
# browser (DEED_REQUIRE_BROWSER=1), whatever CI says: a green target means
# the page was loaded. (`go test` in browsertest/ by hand skips without
# one.) browsertest/ is a Go module of its own, so the browser driver never
# becomes deed's dependency.
# DEED_BROWSER_SCREENSHOT=/tmp/page.png saves a picture of the page.
test-browser: build
	@if ! command -v chromium >/dev/null 2>&1; then \
		sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		echo "installing chromium (Debian package)"; start=$$(date +%s); \
		if $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q chromium; then \
			echo "chromium installed in $$(( $$(date +%s) - start ))s"; \
		else \
			echo "chromium could not be installed: the browser test cannot run"; exit 1; \
		fi; \
	fi
	cd browsertest && DEED_REQUIRE_BROWSER=1 DEED_BIN='$(abspath $(BIN))' $(GO) test -count=1 -v ./...

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-peers: acquisition cost of deed, Litestream's S3 leaser and sets3lock
# through one latency proxy in front of deed's fakes3 server, all on
# 127.0.0.1. bench/peers is a Go module of its own, so the peers never
# become deed's dependencies. PEERS_FLAGS="-delay 20ms -n 25 -ttl 10s".
PEERS_FLAGS ?=
bench-peers:
	cd bench/peers && $(GO) run . $(PEERS_FLAGS)

# run: the node daemon on its embedded store (data in ./deed-data), API on
# 127.0.0.1:7480, the store itself on 127.0.0.1:7481 for the CLI to share.
run: build
	$(BIN) run --data-dir ./deed-data

# release: static (CGO_ENABLED=0), path-free (-trimpath) binaries with the
# version linked in, one per platform, and their SHA-256 sums. windows/amd64
# is included: exec's process-group handling is unix-only and builds a
# plain fallback there (exec_other.go).
DIST ?= dist
RELEASE_VERSION = $(or $(VERSION),$(shell git describe --tags --always --dirty 2>/dev/null),dev)
PLATFORMS := linux/amd64 linux/arm64 darwin/arm64 windows/amd64
release:
	rm -rf '$(DIST)/release' && mkdir -p '$(DIST)/release'
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
		out='$(DIST)/release/deed-$(RELEASE_VERSION)-'$$os-$$arch$$ext; \
		echo "build $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w -X main.version=$(RELEASE_VERSION)' -o "$$out" ./cmd/deed; \
	done
	cd '$(DIST)/release' && sha256sum deed-* > SHA256SUMS
	@cat '$(DIST)/release/SHA256SUMS'

release-check:
	./deploy/release-check.sh

# image: the OCI image of the static linux binary, built FROM scratch by a Go
# program (no daemon, no base image to pull), written as a tarball that
# `podman load` / `docker load` read, plus an OCI layout directory.
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
# CA certificates for TLS to the store, copied from this machine (there is
# no base image to take them from); empty when the machine has none.
CA_CERTS ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
IMAGE_DIR := $(DIST)/image
image:
	mkdir -p '$(IMAGE_DIR)'
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '-s -w -X main.version=$(RELEASE_VERSION)' -o '$(IMAGE_DIR)/deed-linux-$(IMAGE_ARCH)' ./cmd/deed
	cd deploy/image && $(GO) run . -binary '$(abspath $(IMAGE_DIR))/deed-linux-$(IMAGE_ARCH)' -arch $(IMAGE_ARCH) \
		-version '$(RELEASE_VERSION)' -tag 'deed:$(RELEASE_VERSION)' -ca-certs '$(CA_CERTS)' \
		-tarball '$(abspath $(IMAGE_DIR))/deed-image.tar' -oci-layout '$(abspath $(IMAGE_DIR))/oci'

# image-check builds the image twice in its own module's test and checks
# the digest is the same, the config (entrypoint, non-root user) and that
# the binary taken out of the layer runs.
image-check:
	cd deploy/image && $(GO) test -count=1 ./...

# deploy-check also decodes deploy/kubernetes's manifests strictly into the
# k8s.io/api types and checks their wiring against deed run's flags
# (deploy/kubernetes is its own Go module, so k8s.io/api never becomes
# deed's dependency).
deploy-check:
	$(GO) test -count=1 -run 'TestDeploy|TestMetricsMatchDocs' ./daemon
	cd deploy/kubernetes && $(GO) test -count=1 ./...

# man: one page per command, generated from the cobra command tree.
man:
	$(GO) run -tags deedman ./cmd/deed man --dir '$(DIST)/man'

# vuln: govulncheck against the vulnerability database. Installed on first
# use; when the database cannot be reached the step says so and is skipped.
vuln:
	./deploy/vuln.sh

# vuln-selftest: make vuln fails on a finding (a fake entry in a local
# database) and skips when the database cannot be reached.
vuln-selftest:
	./deploy/vuln-selftest.sh

# clean removes build output only; ./deed-data (make run's store) is data.
clean:
	rm -rf bin '$(DIST)'
