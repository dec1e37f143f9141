# xfer: the two commands the README starts with.
#   make demo   set up, build, run the xfer-perf ping-pong on loopback (default provider)
#   make test   set up, build, run every test, lint
SHELL := /bin/bash
CARGO ?= cargo
# A run starts from nothing on CI: incremental state (2.7 GB) and full debug
# information in test binaries (half of the rest) only cost disk and time
# there; line tables keep panics' and valgrind's file:line.
export CARGO_INCREMENTAL ?= 0
export CARGO_PROFILE_DEV_DEBUG ?= line-tables-only

.PHONY: demo test test-shm test-tcp test-shm-tcp setup build lint fuzz bench vm bench-vm install package
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
	@$(MAKE) --no-print-directory test-shm
	@$(MAKE) --no-print-directory test-tcp
	@$(MAKE) --no-print-directory test-shm-tcp
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory package
	@$(MAKE) --no-print-directory vm

# The suites that hold for every transport, over the shared-memory one (the
# RDM engine over xfer-shm): conformance (also with cross-memory attach off,
# so rendezvous and RMA take the two-copy path; and with single-threaded
# domains, XFER_THREADING=single), peer death, flow control,
# teardown, peer events and connections, the async layer, 64 local peers,
# a stopped peer (progress timeout), tarpc and tonic over xfer, the C suite, and
# the libfabric plug-in's C suite, fi_pingpong and Open MPI over its shm domain.
SHM_SUITES = --test conformance --test coalesce --test peer_death --test flow_control --test teardown \
	--test peer_close --test connection --test aio --test aio_connection --test scale --test tcp_stall \
	--test tcp_admission
test-shm:
	XFER_PROVIDER=shm XFER_SCALE_PEERS=64 $(CARGO) test --locked --release $(SHM_SUITES)
	XFER_PROVIDER=shm XFER_SHM_CMA=0 $(CARGO) test --locked --release --test conformance
	XFER_PROVIDER=shm XFER_THREADING=single $(CARGO) test --locked --release --test conformance --test threading
	XFER_PROVIDER=shm $(CARGO) test --locked -p xfer-tarpc --test tarpc -p xfer-tonic --test tonic
	XFER_PROVIDER=shm $(CARGO) test --locked -p xfer-capi --test c_suite c_suite_dynamically_linked
	XFER_PROVIDER=shm XFER_REQUIRE_VALGRIND=1 $(CARGO) test --locked -p xfer-ofi --test c_suite --test fi_pingpong --test mpi

# The same suites over TCP alone (`tcp`: every peer over TCP, this host's
# too), with the C suite and the plug-in's C suite, fi_pingpong and Open MPI
# over its tcp domain, and the tests that speak TCP's stream by hand (they
# skip on other providers). (The default, shm+tcp, runs them in `test` above.)
test-tcp:
	XFER_PROVIDER=tcp XFER_SCALE_PEERS=64 $(CARGO) test --locked --release $(SHM_SUITES) --test tcp_wire --test rx_memory
	XFER_PROVIDER=tcp $(CARGO) test --locked -p xfer-tarpc --test tarpc -p xfer-tonic --test tonic
	XFER_PROVIDER=tcp $(CARGO) test --locked -p xfer-capi --test c_suite c_suite_dynamically_linked
	XFER_PROVIDER=tcp $(CARGO) test --locked -p xfer-ofi --test c_suite --test fi_pingpong --test mpi

# The default (`shm+tcp`: shared memory to peers on this host, TCP to
# others) once more with shared memory off (every peer over TCP through the
# same provider), and the mixed test: one peer over each in real processes.
test-shm-tcp:
	XFER_PROVIDER=shm+tcp XFER_SHM_ENABLED=0 $(CARGO) test --locked --release --test conformance
	$(CARGO) test --locked --release --test mixed

# Every publishable crate packages and its package builds on its own (what
# `cargo publish` would upload: nothing missing from `include`, path
# dependencies with versions). Needs crates.io's index. The verification
# builds reuse target/package/, so after the first run it takes seconds.
# --allow-dirty: it checks the working tree as it is, uploads nothing.
# Cargo takes a registry crate of a given NAME-VERSION to be immutable: it reuses
# the packaged crates it unpacked into $CARGO_HOME/registry/src/-<hash>/ (the
# local overlay registry the dry run publishes into) and their compiled
# artefacts, so each run removes both or it would verify the first run's sources.
PACKAGE_TARGET = $${CARGO_TARGET_DIR:-target}/package-check
package:
	rm -rf "$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/-*/xfer*-[0-9]*
	$(CARGO) clean --quiet --target-dir "$(PACKAGE_TARGET)" -p xfer -p xfer-core -p xfer-tcp -p xfer-verbs -p xfer-shm -p xfer-tarpc -p xfer-tonic
	CARGO_TARGET_DIR="$(PACKAGE_TARGET)" $(CARGO) publish --workspace --dry-run --locked --allow-dirty

# The Soft-RoCE guest (tests/vm/): installs QEMU, a Debian kernel, rdma-core, perftest, UCX
# and virtme-ng if missing, builds the test binaries on the host, then boots ONCE and runs
# everything that needs a real verbs stack (tests/vm/all.sh): the rxe smoke checks, the
# xfer-verbs tests, and over XFER_PROVIDER=verbs (core's RDM engine over the verbs transport)
# the conformance suite, peer_death, scale, flow_control, tests/aio.rs, teardown, tarpc over
# xfer (examples/rpc), the C suite and C examples, libfabric's fi_pingpong and C suite and
# Open MPI (an MPI correctness program, NetPIPE) over libxfer_fi.so's verbs domain (ofi/);
# the engine's own cases (rendezvous READ chunks, a small SRQ, the progress timeout) and the
# conformance suite and tests/mixed.rs over shm+verbs; xfer-info; tests/tcp_faults.rs, whose
# netem case needs the guest kernel's sch_netem, and tests/verbs_faults.rs (two rxe devices
# on a veth pair: netem loss, link down).
vm:
	bash tests/vm/setup.sh
	bins=$$(tests/vm/build-verbs.sh --locked) && tests/vm/run-guest.sh tests/vm/all.sh $$bins

# xfer-perf over verbs against perftest and UCX in one Soft-RoCE guest run
# (bench/verbs-compare.sh); the report lands in bench/results/<date>-verbs.md.
BENCH_VM_REPS ?= 5
bench-vm:
	bash tests/vm/setup.sh
	@bins=$$(tests/vm/build-verbs.sh --only XFER_PERF,XFER_INFO --locked) || exit 1; \
	perf=$$(sed -n 's/^XFER_PERF=//p' <<<"$$bins"); \
	res=$$(mktemp -d /tmp/xfer-bench-vm.XXXXXX); \
	note="host: load average $$(cut -d' ' -f1-3 /proc/loadavg) at start, $$(nproc) CPUs, $$(pgrep -c qemu-system || true) other QEMU process(es) running"; \
	echo "bench-vm: $$note"; \
	XFER_VM_RESULTS=$$res tests/vm/run-guest.sh bench/verbs-compare.sh --xfer-perf "$$perf" --reps $(BENCH_VM_REPS) \
		--commit "$$(git describe --always --dirty 2>/dev/null || echo unknown)" --note "$$note"; \
	rc=$$?; \
	out=bench/results/$$(date +%F)-verbs.md; n=2; \
	while [ -e "$$out" ]; do out=bench/results/$$(date +%F)-verbs-$$n.md; n=$$((n + 1)); done; \
	if [ -s "$$res/verbs.md" ]; then cp "$$res/verbs.md" "$$out" && echo "bench-vm: report written to $$out"; \
	else echo "bench-vm: the guest wrote no report (exit status $$rc)"; fi; \
	rm -rf "$$res"; \
	exit $$rc

# cargo-fuzz targets over the decoders of peer bytes (docs/FUZZING.md): replays the
# committed corpus and regression inputs, then fuzzes each target FUZZ_SECONDS (10).
fuzz:
	scripts/fuzz.sh

# Lints run when the toolchain has the components (they cannot be fetched offline);
# the API docs build without a warning (no broken or private links).
lint:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all --check; \
	 else echo "lint: rustfmt not installed, format check skipped"; fi
	@if $(CARGO) clippy --version >/dev/null 2>&1; then $(CARGO) clippy --locked --workspace --all-targets -- -D warnings; \
	 else echo "lint: clippy not installed, skipped"; fi
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --locked --no-deps --workspace

# Side-by-side loopback comparison with a raw TCP floor, UCX and libfabric (installs them).
bench: build
	bench/compare.sh

# libxfer.so/.a, include/xfer.h and xfer.pc under $(PREFIX) (DESTDIR and CARGO_TARGET_DIR honoured).
install:
	$(CARGO) build --release --locked -p xfer-capi
	CARGO="$(CARGO)" PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" capi/install.sh
