# coordfs: build, test, run, benchmark, install.
#   make run      install what is missing, build, mount a demo folder, print its page's URL (coordfs web)
#                 and show the live event log
#   make cluster-demo  two nodes over one folder through etcd: status --cluster, a cross-node ask and
#                 its conflict, then every node's steps live (mount-scripts/cluster-demo.sh)
#   make test     install what is missing, build, run every test
#   make scale    install what is missing, build, run the scale tests at full size (100,000 presenters)
#   make bench    benchmarks; results in docs/benchmarks.md
#   make fuzz     the control-protocol fuzzer, longer than in make test
#   make install  coordfs, mount.coordfs and the systemd unit under $(PREFIX) (DESTDIR-aware)

SHELL    := /bin/bash
PREFIX   ?= /usr/local
DESTDIR  ?=
SWIFT    ?= swift
CONFIG   ?= release
BIN      := .build/$(CONFIG)/coordfs
DEMO     ?= $(CURDIR)/demo

# System packages the build, the tests and the benchmarks need (Debian names).
APT_PACKAGES := libfuse3-dev liburing-dev fuse3 pkg-config libsqlite3-dev attr acl fio rsync vim git python3 jq xfsprogs btrfs-progs emacs-nox prometheus chromium chromium-driver \
                etcd-server etcd-client iproute2 tmux nano unzip

.PHONY: all deps build build-debug run cluster-demo test scale bench fuzz install install-files uninstall clean

all: build

# Install only what is missing; `apt-get update` once, and only when something is missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@test -e /dev/fuse || { echo "coordfs needs /dev/fuse (modprobe fuse)"; exit 1; }

build: deps
	$(SWIFT) build -c $(CONFIG) --product coordfs

build-debug: deps
	$(SWIFT) build

run: build
	@CONFIG=$(CONFIG) DEMO="$(DEMO)" ./mount-scripts/demo.sh

# Two nodes over one folder through a one-member etcd (docs/cluster.md); Ctrl-C cleans up.
cluster-demo: build
	@CONFIG=$(CONFIG) DEMO="$(DEMO)-cluster" ./mount-scripts/cluster-demo.sh

# One build of the products and the tests (`swift build --build-tests`; the tests drive the debug
# `coordfs` binary), then the suites run by `swift test --skip-build` (docs/testing.md, "How make
# test runs"). The kernel's FUSE over io_uring is turned on for the run (and put back after): every
# suite runs with the default transport (auto: io_uring), and the mount suites again with
# TEST_TRANSPORT (/dev/fuse), leaving out TRANSPORT_SKIP: suites that test what sits above the
# transport, and the classes that choose their transport themselves, which the first pass ran as
# they are (docs/testing.md, "Both transports").
# Most of a run is waiting (daemons, etcd, timers: a load of about 1 on two cores), so two lanes run
# at once, each running the built test bundle through scripts/test-lane.sh (`swift test` would hold
# the build's database locked for its whole run): lane "ring" runs LANE_RING_SUITES on io_uring;
# lane "dev" runs the /dev/fuse pass, then lane "rest" every other suite. Then the SERIAL_SUITES,
# which count CPU time or polling rounds and would be disturbed by a neighbour, run alone, on
# io_uring and then (those of them the /dev/fuse pass runs) on /dev/fuse. Each lane's
# output is printed with its name in front and kept in .build/test-LANE.log; .build/test.log has all
# of it; on failure the failing lines are printed again at the end, where a truncated CI log still
# shows them.
URING_SWITCH   := /sys/module/fuse/parameters/enable_uring
URING_ON       := saved=""; if [ -w $(URING_SWITCH) ]; then saved=$$(cat $(URING_SWITCH)); echo Y > $(URING_SWITCH); fi; \
                  trap 'if [ -n "$$saved" ]; then echo "$$saved" > $(URING_SWITCH); fi' EXIT
TEST_TRANSPORT ?= dev
TRANSPORT_SUITES ?= ^(MountTests|CoordinatedMountTests)\.
TRANSPORT_SKIP ?= ^CoordinatedMountTests\.(SelfCoordinatingProgramsTests|ClusterEtcdMountTests|StoreSaveStyleTests|StoreResolutionTests|Ring[A-Za-z]*Tests|DeviceTransportTests|SharedMountTransportTests|PrivateMountTransportTests|EndedDaemonTests|FloorFileSystemTests|DeviceReaderTests|ClusterMoveTests|StoreReflinkMountTests)|^MountTests\.IdleDaemonTests
LANE_RING_SUITES ?= ^(MountTests|CoordinatedMountTests|CoordFSClientTests)\.|^CLITests\.(DurabilityTests|WebConflictTests|WebPageTests)/
SERIAL_SUITES ?= ^(CoordinatedMountTests\.(RingPollingThreadTests|DeviceReaderTests)|MountTests\.IdleDaemonTests)/
test: deps
	$(SWIFT) build --build-tests
	@set -o pipefail; $(URING_ON); rm -f .build/test*.log; \
	scripts/test-lane.sh ring --filter '$(LANE_RING_SUITES)' --skip '$(SERIAL_SUITES)' & ring=$$!; \
	COORDFS_TEST_TRANSPORT=$(TEST_TRANSPORT) scripts/test-lane.sh dev --filter '$(TRANSPORT_SUITES)' --skip '$(TRANSPORT_SKIP)' --skip '$(SERIAL_SUITES)'; dev=$$?; \
	scripts/test-lane.sh rest --skip '$(LANE_RING_SUITES)'; rest=$$?; \
	wait $$ring; ring=$$?; \
	scripts/test-lane.sh serial --filter '$(SERIAL_SUITES)'; serial=$$?; \
	COORDFS_TEST_TRANSPORT=$(TEST_TRANSPORT) scripts/test-lane.sh serial-dev --filter '$(SERIAL_SUITES)' --skip '$(TRANSPORT_SKIP)'; serialdev=$$?; \
	cat .build/test-ring.log .build/test-dev.log .build/test-rest.log .build/test-serial.log .build/test-serial-dev.log > .build/test.log; \
	echo "make test: lanes ring $$ring, dev $$dev, rest $$rest, serial $$serial, serial-dev $$serialdev (0: passed)"; \
	if [ $$ring$$dev$$rest$$serial$$serialdev != 00000 ]; then \
	  echo "== make test failed; the failing lines (the whole output is in .build/test.log):"; \
	  grep -E "error: |Fatal error|Exited with (signal|unexpected)|✘|' failed \(" .build/test.log | head -n 80; exit 1; fi

# The scale tests at full size: ScaleTests with SCALE_PRESENTERS presenters (make test runs them with
# 20,000), built as make test builds; several minutes in a debug build on two cores (docs/testing.md).
SCALE_PRESENTERS ?= 100000
scale: deps
	$(SWIFT) build --build-tests
	@set -o pipefail; $(URING_ON); \
	echo "COORDFS_SCALE_PRESENTERS=$(SCALE_PRESENTERS) $(SWIFT) test --skip-build --filter 'CoordFSClientTests\.ScaleTests'"; \
	COORDFS_SCALE_PRESENTERS=$(SCALE_PRESENTERS) $(SWIFT) test --skip-build --filter 'CoordFSClientTests\.ScaleTests' 2>&1 | tee .build/scale.log

fuzz: deps
	COORDFS_FUZZ_CASES=$${COORDFS_FUZZ_CASES:-5000000} $(SWIFT) test --filter ControlProtocolTests.FuzzTests

bench: deps
	$(SWIFT) build -c release --product coordfs
	$(SWIFT) build -c release --product coordfs-bench
	./bench/run.sh

# mount(8) looks for /sbin/mount.fuse.coordfs (type fuse.coordfs) and /sbin/mount.coordfs (type coordfs).
MOUNT_HELPER_DIR ?= /sbin

install: build install-files

# Installs $(BIN) as built (no build step): `make install-files BIN=.build/debug/coordfs DESTDIR=/tmp/x`.
install-files:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/coordfs
	install -d $(DESTDIR)$(PREFIX)/share/coordfs/web
	install -m 0644 Sources/CoordFSWeb/Assets/index.html Sources/CoordFSWeb/Assets/app.js Sources/CoordFSWeb/Assets/app.css $(DESTDIR)$(PREFIX)/share/coordfs/web/
	sed 's|@BINDIR@|$(PREFIX)/bin|g' mount-scripts/mount.coordfs > $(DESTDIR)$(PREFIX)/sbin/mount.coordfs
	chmod 0755 $(DESTDIR)$(PREFIX)/sbin/mount.coordfs
	ln -sf mount.coordfs $(DESTDIR)$(PREFIX)/sbin/mount.fuse.coordfs
	sed 's|@BINDIR@|$(PREFIX)/bin|g' mount-scripts/coordfs@.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/coordfs@.service
	@if [ -z "$(DESTDIR)" ] && [ "$$(readlink -f $(PREFIX)/sbin)" != "$$(readlink -f $(MOUNT_HELPER_DIR))" ]; then \
	  for n in mount.coordfs mount.fuse.coordfs; do ln -sf $(PREFIX)/sbin/mount.coordfs $(MOUNT_HELPER_DIR)/$$n; done; \
	  echo "linked $(MOUNT_HELPER_DIR)/mount.coordfs and $(MOUNT_HELPER_DIR)/mount.fuse.coordfs"; fi

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/share/coordfs/web
	rm -f $(DESTDIR)$(PREFIX)/bin/coordfs $(DESTDIR)$(PREFIX)/sbin/mount.coordfs $(DESTDIR)$(PREFIX)/sbin/mount.fuse.coordfs
	rm -f $(DESTDIR)$(PREFIX)/lib/systemd/system/coordfs@.service
	@if [ -z "$(DESTDIR)" ]; then for n in mount.coordfs mount.fuse.coordfs; do \
	  if [ -L $(MOUNT_HELPER_DIR)/$$n ] && [ "$$(readlink $(MOUNT_HELPER_DIR)/$$n)" = "$(PREFIX)/sbin/mount.coordfs" ]; then rm -f $(MOUNT_HELPER_DIR)/$$n; fi; done; fi

clean:
	rm -rf .build
