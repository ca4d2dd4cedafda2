# Surge: the two commands a newcomer needs are `make demo` and `make test`
# (each sets the machine up first when it needs it); `make install` puts
# Surge under PREFIX.
CARGO ?= cargo
RELEASE := target/release
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all build ready setup demo test test-stages test-mpich conformance bench bench-mpiio install clean

all: build

# Forces the set-up (`ready` runs it only when needed).
setup:
	scripts/setup.sh

# Runs scripts/setup.sh when it never completed here (its stamp), changed
# since, or a tool it installs is gone.
SETUP_STAMP := target/.setup-done
SETUP_TOOLS := cargo cc pkg-config mpicc mpicc.mpich fio ip fusermount3 h5pcc redis-server
ready:
	@missing=""; for t in $(SETUP_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ] || [ ! -f $(SETUP_STAMP) ] || [ scripts/setup.sh -nt $(SETUP_STAMP) ]; then \
	  echo "make: setting this machine up first: scripts/setup.sh$${missing:+ (missing:$$missing)}"; \
	  scripts/setup.sh; \
	fi

build: ready
	$(CARGO) build --release --workspace
	$(MAKE) -C workloads

demo: build
	scripts/demo.sh

test: ready
	scripts/module-cycles.py
	scripts/doc-paths.py
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) build --workspace
	$(MAKE) -C workloads
	$(CARGO) test --workspace --no-fail-fast
	$(MAKE) test-stages
	python3 -m ruff check tuner
	python3 -m pytest -q tuner/tests scripts/tests
	$(MAKE) -C mpiio test
	$(MAKE) -C mpiio test-mpich

bench: build
	$(RELEASE)/surge bench core
	$(RELEASE)/surge bench fio
	$(RELEASE)/surge bench io500
	$(RELEASE)/surge bench copy
	$(RELEASE)/surge bench conns
	$(RELEASE)/surge bench bbos
	$(RELEASE)/surge bench autotune
	$(RELEASE)/surge tune bench accuracy --surge $(RELEASE)/surge

# POSIX conformance of the mount: pjdfstest, whole, on a fresh cluster and
# mount (as root); prints the tests passed and fails under 95% (docs/fuse.md).
conformance: build
	scripts/conformance.sh --bin $(RELEASE) --min 95

# The request-path suite (daemons spawned by surged's data, namespace and
# protocol tests) on every registered stage implementation that is not a
# default, as `surged --list-stages` lists them (docs/architecture.md,
# "Adding a stage"): a new registry entry is tested without an edit here.
# Round N runs the N-th such implementation of every kind together, so the
# suite runs as many times as the kind with the most implementations has
# non-default ones.
test-stages:
	$(CARGO) build -p surged
	@for stages in $$(target/debug/surged --list-stages | grep -v '(default)$$' | cut -f1 | \
	    awk -F= '{ round = ++seen[$$1]; set[round] = set[round] (set[round] ? "," : "") $$0 } \
	             END { for (r = 1; r in set; r++) print set[r] }'); do \
	  echo "make: the request-path suite with $$stages"; \
	  SURGED_STAGES=$$stages $(CARGO) test -p surged --test data --test namespace --test protocol || exit 1; \
	done

# The MPI-IO layer against MPICH's ROMIO (also part of `make test`; skips without MPICH).
test-mpich:
	$(MAKE) -C mpiio test-mpich

bench-mpiio:
	$(MAKE) -C mpiio bench

# bin/, lib/, include/ and lib/pkgconfig/surge.pc under PREFIX (DESTDIR for
# staged installs); see docs/install.md. No set-up: a packager's machine
# only needs Rust and an MPI compiler (for libsurge_mpiio).
install:
	$(CARGO) build --release --workspace
	$(MAKE) -C mpiio lib
	DESTDIR="$(DESTDIR)" scripts/install.sh --from $(RELEASE) --mpiio mpiio/build "$(PREFIX)"

clean:
	$(CARGO) clean
