# The two commands that do all set-up on a fresh Debian 12 machine:
#   make demo   install dependencies, build (release), run the demo against a local toclsd
#   make test   install dependencies, build (dev: debug, warnings as errors), run every test
#   make package  the Debian packages (release build, CPack): build/release/packages/*.deb
# Other targets: build, release, asan, tsan, bench, bench-peers, format, clean.

JOBS ?= $(shell nproc)
CTEST_JOBS ?= 2

.PHONY: deps demo test build release package asan tsan bench bench-peers format clean

deps:
	@bash deploy/install-deps.sh

build: deps
	cmake --preset dev >/dev/null
	cmake --build build/dev -j $(JOBS)

release: deps
	cmake --preset release >/dev/null
	cmake --build build/release -j $(JOBS)

# libtocl0, libtocl-dev and toclsd (cmake/TOCLPackage.cmake).
package: release
	cd build/release && cpack -G DEB

demo: release
	bash deploy/demo.sh build/release

test: build
	cd build/dev && ctest -j $(CTEST_JOBS) --output-on-failure --timeout 600

asan: deps
	cmake --preset asan >/dev/null
	cmake --build build/asan -j $(JOBS)
	# A small free-quarantine keeps RSS checks meaningful; leaks are still
	# reported (every daemon's exit status is checked).
	cd build/asan && ASAN_OPTIONS=quarantine_size_mb=16:detect_leaks=1 \
		ctest -j $(CTEST_JOBS) --output-on-failure --timeout 900

tsan: deps
	cmake --preset tsan >/dev/null
	cmake --build build/tsan -j $(JOBS)
	# Reports from inside Debian's uninstrumented gRPC/absl are suppressed
	# (tests/tsan.supp); races in tocl's own code are not.
	cd build/tsan && TSAN_OPTIONS=suppressions=$(CURDIR)/tests/tsan.supp:second_deadlock_stack=1 \
		ctest -j $(CTEST_JOBS) --output-on-failure --timeout 900

bench: release
	build/release/bench/tocl-bench directory

# tocl against UCX and Open MPI (issue #17): installs the peers
# (deploy/install-bench-peers.sh; nothing else needs them), configures the
# release build again so that it finds MPI, and runs the comparison.
bench-peers: deps
	@bash deploy/install-bench-peers.sh
	cmake --preset release >/dev/null
	cmake --build build/release -j $(JOBS)
	build/release/bench/tocl-bench msg --peers --cases latency,rate,bandwidth

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build
