# The two commands a newcomer needs, from a fresh clone of Ithbat on Debian 12, as root:
#   make demo   - install dependencies, build, and run the scenario lab: the four case files and a healthy
#                 control through the fleet simulator, each with real agents (DEMO_ARGS, default --quick)
#   make test   - install dependencies, build, and run every test group with timings
# Overrides: BUILD_DIR (default build), JOBS (default: all cores), BENCH=OFF to skip benchmarks.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
BENCH ?= ON
CMAKE_FLAGS ?=

STAGE := bash scripts/stage.sh
ITHBAT := $(BUILD_DIR)/ithbat

.PHONY: all deps configure build demo test bench metrics-doc package image lint format clean

all: build

deps:
	@$(STAGE) deps bash scripts/install-deps.sh

configure: deps
	@$(STAGE) configure cmake -S . -B $(BUILD_DIR) -G Ninja -DITHBAT_BUILD_BENCH=$(BENCH) $(CMAKE_FLAGS)

build: configure
	@$(STAGE) build cmake --build $(BUILD_DIR) -j $(JOBS)

# --quick: each file's CI configuration (about 15 minutes for the five on 2 cores); DEMO_ARGS= runs
# them at full length (about 90 minutes). A world this machine cannot keep the pace of is INVALID
# and run once more, slower; DEMO_ARGS='--quick --slowdown 2' runs every world twice as slow.
DEMO_ARGS ?= --quick
demo: configure
	@$(STAGE) build cmake --build $(BUILD_DIR) -j $(JOBS) --target ithbat ithbat_lab
	$(ITHBAT) demo $(DEMO_ARGS)

test: build
	@bash scripts/run-tests.sh $(BUILD_DIR) $(JOBS)

# Every benchmark program, then the agent measured on this machine (quiet, and beside a job
# printing 10,000 lines/s), then issue 28's figures beside their baselines from this same run
# (scripts/bench-summary.py). Each program's output stays in BENCH_OUT. Root (probes, eBPF).
BENCH_OUT ?= $(BUILD_DIR)/bench-results
BENCH_AGENT_SECONDS ?= 120
bench: BENCH := ON
bench: build
	@set -e; rm -rf $(BENCH_OUT); mkdir -p $(BENCH_OUT); found=0; \
	for b in $(BUILD_DIR)/bench/*_bench; do \
	  [ -x "$$b" ] || continue; found=1; n=$$(basename $$b); \
	  echo "---- $$b"; $(STAGE) "bench:$$n" bash -c 'set -o pipefail; "$$0" 2>&1 | tee "$$1"' "$$b" "$(BENCH_OUT)/$$n.txt"; \
	done; [ $$found -eq 1 ] || { echo "no benchmarks built"; exit 1; }
	@$(STAGE) bench:agent-quiet bash -c 'set -o pipefail; scripts/measure-agent-cost.sh $(BENCH_AGENT_SECONDS) 1s $(BUILD_DIR) 0 | tee $(BENCH_OUT)/agent-quiet.txt'
	@$(STAGE) bench:agent-job bash -c 'set -o pipefail; scripts/measure-agent-cost.sh $(BENCH_AGENT_SECONDS) 1s $(BUILD_DIR) 10000 | tee $(BENCH_OUT)/agent-job.txt'
	@python3 scripts/bench-summary.py $(BENCH_OUT)

# The Debian package (packaging/package.cmake): $(BUILD_DIR)/package/ithbat_<version>_<arch>.deb,
# stripped binary, systemd units (installed, not enabled), example config, dashboard and alerts.
package: configure
	@$(STAGE) build cmake --build $(BUILD_DIR) -j $(JOBS) --target ithbat
	cd $(BUILD_DIR) && cpack -G DEB

# The agent's OCI image (scripts/build-image.sh, docs/container.md): localhost/ithbat:<version> in
# this machine's podman storage (vfs; IMAGE_STORAGE_DRIVER=overlay where that storage holds
# overlay images) and $(BUILD_DIR)/package/ithbat-image_<version>_<arch>.oci.tar for podman load.
IMAGE_STORAGE_DRIVER ?= vfs
image: configure
	@$(STAGE) build cmake --build $(BUILD_DIR) -j $(JOBS) --target ithbat
	bash scripts/build-image.sh --storage-driver $(IMAGE_STORAGE_DRIVER) --archive $(BUILD_DIR)/package/ $(ITHBAT)

# docs/metrics.md is generated from the collectors' own descriptions; the cli group's
# cli.metrics_doc_current test fails when it is stale.
metrics-doc: configure
	@$(STAGE) build cmake --build $(BUILD_DIR) -j $(JOBS) --target ithbat
	$(ITHBAT) metrics-doc > docs/metrics.md
	@echo "wrote docs/metrics.md"

# Linting is not part of `make test` (clang-tidy over the tree takes long on 2 cores); it
# needs clang-tidy-19 (apt-get install clang-tidy-19), the one that understands C++23 and
# libstdc++ 12.
lint: configure
	run-clang-tidy-19 -p $(BUILD_DIR) -quiet '$(CURDIR)/src/.*\.cc$$'

format:
	find src tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
