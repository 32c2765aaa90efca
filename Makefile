# Thin wrapper over CMake for the two README commands.
#   make demo   install dependencies, build the cleave binary only, train a small GPT on fortune text on the CPU
#               (examples/demo_fortunes.json), print a sample (the test suite and benchmarks are built by
#               `make test`, into the same build/; docs/building.md)
#   make test   build everything and run the whole test suite (what .ci/run calls)
BUILD ?= build
JOBS  ?= $(shell nproc)
# Extra scripts/install-deps.sh flags, e.g. DEPS_FLAGS=--with-slurm (CI: the `slurm` test label).
DEPS_FLAGS ?=

.PHONY: deps configure build build-cleave demo test bench clean

deps:
	./scripts/install-deps.sh $(DEPS_FLAGS)

configure:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# Only what `make demo` runs: the cleave binary and the libraries it links (no test or benchmark objects).
build-cleave: configure
	cmake --build $(BUILD) -j$(JOBS) --target cleave

demo: deps build-cleave
	run=runs/demo-$$(date +%Y%m%d-%H%M%S) && \
	./$(BUILD)/bin/cleave train examples/demo_fortunes.json --set train.out_dir=$$run && \
	echo "--- a sample from the model it trained (cleave generate $$run/checkpoints):" && \
	./$(BUILD)/bin/cleave generate $$run/checkpoints --prompt "A " --tokens 200 --temperature 0.8 --top-k 40 --seed 1

# OMP_WAIT_POLICY=passive: ctest runs tests side by side on the same cores, the oversubscribed case where the
# thread rule (engine/train/threads.hpp, docs/ops.md) chooses passive too.
test: deps build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j$(JOBS) --timeout 600

bench: build
	./scripts/run-benchmarks.sh $(BUILD)

clean:
	rm -rf $(BUILD)
