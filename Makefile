# deed: build, test, lint. Targets:
#   make build    bin/deed
#   make test     unit + in-process S3 tests, with the race detector (the
#                 simulation runs 200 seeds; its broken variants must be caught)
#   make sim      more seeds of the simulation: make sim SEEDS=5000 [SEEDBASE=1]
#   make test-s3  the same, plus every S3 table against versitygw (installed on first use)
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

# VERSION, when set, is linked in and printed by `deed version`; otherwise
# deed derives it from the Go build info.
VERSION ?=
LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))

.PHONY: build test test-s3 versitygw lint bench run clean sim

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/deed

# The second line builds the deliberately broken protocol variants (the
# deedbroken tag: never in a release build) and checks that the
# simulation's checkers catch every one of them, and that replication's
# step-by-step races break under the variants they pin. The last two fuzz
# the .ltx decoder and encoder briefly (seeds: testdata/ltx and
# replication/testdata/fuzz); a failing input is written to
# replication/testdata/fuzz/ for `go test -run` to replay. FUZZTIME
# lengthens them: make test FUZZTIME=5m.
FUZZTIME ?= 10s
test:
	$(GO) test -race ./...
	$(GO) test -race -tags deedbroken -run '^TestBroken' ./replication/simulation ./replication
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication
	$(GO) test -run '^$$' -fuzz '^FuzzEncode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./replication

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
