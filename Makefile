# Surge: the two commands a newcomer needs are `make demo` and `make test`.
CARGO ?= cargo
RELEASE := target/release

.PHONY: all build setup demo test test-mpich bench bench-mpiio clean

all: build

setup:
	scripts/setup.sh

build:
	$(CARGO) build --release --workspace
	$(MAKE) -C workloads

demo: build
	scripts/demo.sh

test:
	scripts/module-cycles.py
	scripts/doc-paths.py
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) build --workspace
	$(MAKE) -C workloads
	$(CARGO) test --workspace --no-fail-fast
	python3 -m ruff check tuner
	python3 -m pytest -q tuner/tests
	$(MAKE) -C mpiio test
	$(MAKE) -C mpiio test-mpich

bench: build
	$(RELEASE)/surge bench core
	$(RELEASE)/surge bench fio
	$(RELEASE)/surge bench conns

# The MPI-IO layer against MPICH's ROMIO (also part of `make test`; skips without MPICH).
test-mpich:
	$(MAKE) -C mpiio test-mpich

bench-mpiio:
	$(MAKE) -C mpiio bench

clean:
	$(CARGO) clean
