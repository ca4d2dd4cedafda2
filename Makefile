# Surge: the two commands a newcomer needs are `make demo` and `make test`.
CARGO ?= cargo
RELEASE := target/release

.PHONY: all build setup demo test bench clean

all: build

setup:
	scripts/setup.sh

build:
	$(CARGO) build --release --workspace --bins

demo: build
	scripts/demo.sh

test:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast

bench: build
	$(RELEASE)/surge bench core

clean:
	$(CARGO) clean
