# Thin wrapper over CMake for the two README commands.
#   make demo   install dependencies, build, train a small GPT on fortune text on the CPU
#   make test   build and run the whole test suite (what .ci/run calls)
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: deps build demo test bench clean

deps:
	./scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

demo: deps build
	./$(BUILD)/bin/cleave train examples/gpt_fortunes.json --set train.out_dir=runs/demo-$$(date +%Y%m%d-%H%M%S)

test: deps build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j$(JOBS) --timeout 600

bench: build
	./scripts/run-benchmarks.sh $(BUILD)

clean:
	rm -rf $(BUILD)
