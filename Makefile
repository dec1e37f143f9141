# xfer: the two commands the README starts with.
#   make demo   set up, build, run the xfer-perf ping-pong on loopback (default provider)
#   make test   set up, build, run every test, lint
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test setup build lint bench vm install
PREFIX ?= /usr/local

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --locked --workspace --bins --examples

demo: build
	target/release/xfer-info
	XFER_TCP_ADDR=$${XFER_TCP_ADDR:-127.0.0.1} target/release/xfer-perf --test tag_lat,tag_bw

test: setup
	$(CARGO) build --locked --workspace --all-targets
	XFER_REQUIRE_VALGRIND=1 $(CARGO) test --locked --workspace --all-targets
	$(CARGO) test --locked --workspace --doc
	$(CARGO) test --locked --release --test conformance --test tcp_wire --test peer_death
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory vm

# The Soft-RoCE guest (tests/vm/): installs QEMU, a Debian kernel, rdma-core, perftest and
# virtme-ng if missing, then boots ONCE and runs everything that needs a real verbs stack:
# the rxe smoke checks (ibv_rc_pingpong, ib_send_lat) and the xfer-verbs tests.
vm:
	bash tests/vm/setup.sh
	bin=$$(tests/vm/build-verbs.sh) && tests/vm/run-guest.sh tests/vm/all.sh "$$bin"

# Lints run when the toolchain has the components (they cannot be fetched offline).
lint:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all --check; \
	 else echo "lint: rustfmt not installed, format check skipped"; fi
	@if $(CARGO) clippy --version >/dev/null 2>&1; then $(CARGO) clippy --locked --workspace --all-targets -- -D warnings; \
	 else echo "lint: clippy not installed, skipped"; fi

# Side-by-side loopback comparison with a raw TCP floor, UCX and libfabric (installs them).
bench: build
	bench/compare.sh

# libxfer.so/.a, include/xfer.h and xfer.pc under $(PREFIX) (DESTDIR honoured).
install:
	$(CARGO) build --release --locked -p xfer-capi
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" capi/install.sh
