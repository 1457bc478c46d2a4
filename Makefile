# gpuledger: the two commands a newcomer needs, and the steps behind them.
#   make demo   set up, start the local broker, build, run the demo
#   make test   set up, start the local broker, build, run every test

export CARGO_TARGET_DIR ?= $(HOME)/.cache/gpuledger-target
export GPULEDGER_PYTHON ?= $(HOME)/.cache/gpuledger/venv/bin/python
CARGO ?= cargo

.PHONY: demo test setup build broker broker-stop lint fmt clean

demo: setup build broker
	deploy/local/demo.sh

test: setup build broker
	@if [ -z "$$GPULEDGER_KAFKA_BOOTSTRAP" ]; then deploy/local/kafka.sh prune; fi
	$(CARGO) test --workspace --no-fail-fast

setup:
	deploy/local/setup.sh

build:
	$(CARGO) build --workspace

# A user with their own cluster sets GPULEDGER_KAFKA_BOOTSTRAP and skips this.
broker:
	@if [ -n "$$GPULEDGER_KAFKA_BOOTSTRAP" ]; then echo "using the broker at $$GPULEDGER_KAFKA_BOOTSTRAP"; \
	else deploy/local/kafka.sh start && deploy/local/kafka.sh topics; fi

broker-stop:
	deploy/local/kafka.sh stop

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

clean:
	deploy/local/kafka.sh reset
	rm -rf var
