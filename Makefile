# deed: build, test, lint. Targets:
#   make build    bin/deed
#   make test     unit + in-process S3 tests, with the race detector (the
#                 simulation runs 200 seeds; its broken variants must be caught)
#   make sim      more seeds of the simulation: make sim SEEDS=5000 [SEEDBASE=1]
#   make test-s3  the same, plus every S3 table against versitygw (installed on first use)
#   make test-stores  the store tables and the end-to-end scenarios on gs:// and az://
#                 against fake-gcs-server and Azurite (installed on first use)
#   make lint     gofmt + go vet
#   make bench    benchmarks only
#   make run      the node daemon on the embedded store (./deed-data)
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

.PHONY: build test test-s3 versitygw test-stores fakegcs azurite lint bench run clean sim

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/deed

# The second line builds the deliberately broken protocol variants (the
# deedbroken tag: never in a release build) and checks that the
# simulation's checkers catch every one of them, and that replication's
# step-by-step races break under the variants they pin.
test:
	$(GO) test -race ./...
	$(GO) test -race -tags deedbroken -run '^TestBroken' ./replication/simulation ./replication

# sim: SEEDS seeds of the simulation from SEEDBASE on; a failing seed prints
# the command that replays it.
SEEDS ?= 1000
SEEDBASE ?= 1
sim:
	$(GO) test -race -count=1 -timeout 0 ./replication/simulation -run '^TestSimulation$$' -seeds=$(SEEDS) -seedbase=$(SEEDBASE)

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
	DEED_VERSITYGW='$(VERSITYGW)' $(GO) test -race -count=1 ./...

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
	DEED_FAKEGCS='$(FAKEGCS)' DEED_AZURITE='$(AZURITE)' $(GO) test -race -count=1 \
		-run 'TestContract|TestProbeS3Targets|TestOwnershipOverS3|TestScenariosOverS3|TestE2EStores' \
		./bucket/... ./owner ./replication ./cmd/deed

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# run: the node daemon on its embedded store (data in ./deed-data), API on
# 127.0.0.1:7480, the store itself on 127.0.0.1:7481 for the CLI to share.
run: build
	$(BIN) run --data-dir ./deed-data

# clean removes build output only; ./deed-data (make run's store) is data.
clean:
	rm -rf bin
