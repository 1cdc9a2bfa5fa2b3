#!/usr/bin/env bash
# make bench: the native folder, libfuse's own passthrough_ll example and coordfs, measured in
# one run on the same disk, written to docs/benchmarks.md.
#
# Extending it:
#   - a mount workload is a function `wl_NAME DIR` that prints one number, plus a line
#     "NAME|unit|higher-or-lower|description|target" in WORKLOADS below;
#   - a section is a function that prints markdown, listed in SECTIONS; every suite that
#     `coordfs-bench` lists in its usage line is run and included automatically.
#
# Environment (all optional): CONFIG (release), COORDFS_BIN, COORDFS_BENCH_BIN, BENCH_DIR (a
# folder on a real disk, not tmpfs; default ./bench-work), BENCH_OUT (docs/benchmarks.md),
# BENCH_SIZE_MB (1024), BENCH_RAND_SECONDS (10), BENCH_SMALL_FILES (10000),
# BENCH_LOOKUP_FILES (100000), BENCH_COORDFS_OPTS (extra -o options for coordfs),
# BENCH_TARGETS ("native passthrough_ll coordfs"), BENCH_ROUNDS (5, for the sequential workloads),
# BENCH_META_ROUNDS (5, for the metadata workloads, whose rounds vary most),
# BENCH_FRESH_FS (1: each target's folder is a fresh ext4 image of its own on the bench disk;
# 0: plain folders under BENCH_DIR), BENCH_LOW_NOFILE (1024: the descriptor limit of the second
# coordfs daemon the metadata workloads run on; 0: none).
# `bench/run.sh mount` runs only the mount workloads and prints the machine and mount sections;
# `bench/run.sh lowfd` runs only that comparison and prints its section; `bench/run.sh transport`
# the same for the comparison of the two transports (BENCH_TRANSPORT=0: none; BENCH_TRANSPORT_TARGETS,
# default "coordfs_dev coordfs_uring", may add coordfs_dev_fixed, coordfs_uring_fixed (spin_adapt=off)
# and passthrough_hp; BENCH_TRANSPORT_LOADS, default "quiet", may add "hog": BENCH_HOGS_PER_CPU (1)
# CPU-bound `yes` per CPU during those workloads, and "haltpoll": on a virtual machine whose idle
# driver is cpuidle-haltpoll, the guest's halt polling set to BENCH_HALTPOLL_NS (200000, the driver's
# own default) during those workloads and restored after, also on exit).
# Request kinds (section_kinds): BENCH_LSL_FILES (50000), BENCH_KINDS_ROUNDS (3), BENCH_GROWTH
# ("1000 10000 100000"), BENCH_LIBFUSE_SRC (a libfuse source tree, or a git directory holding the
# tag of the installed libfuse, for passthrough_hp; else that tag is cloned from GitHub).
# `bench/run.sh kinds` runs only that comparison and prints its section.
# The kernel's floor (section_floor): `coordfs-bench floor` on a fresh ext4 image of its own: the
# smallfiles (BENCH_SMALL_FILES files), tar, `ls -l` (BENCH_LSL_FILES) and `grep -r` workloads through
# a daemon that does no work, the same daemon storing the files in a real backing folder
# ("floor+backing": smallfiles and tar), coordfs and native, BENCH_FLOOR_ROUNDS (2) rounds, with
# BENCH_FLOOR_OPTS added (e.g. `--no-pin --workloads smallfiles,tar`); `bench/run.sh floor` runs
# only that and prints its section (it needs only coordfs-bench built).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=${CONFIG:-release}
BIN=${COORDFS_BIN:-$ROOT/.build/$CONFIG/coordfs}
BENCH_BIN=${COORDFS_BENCH_BIN:-$ROOT/.build/$CONFIG/coordfs-bench}
WORK=${BENCH_DIR:-$ROOT/bench-work}
OUT=${BENCH_OUT:-$ROOT/docs/benchmarks.md}
SIZE_MB=${BENCH_SIZE_MB:-1024}
RAND_SECONDS=${BENCH_RAND_SECONDS:-10}
SMALL_FILES=${BENCH_SMALL_FILES:-10000}
LOOKUP_FILES=${BENCH_LOOKUP_FILES:-100000}
COORDFS_OPTS=${BENCH_COORDFS_OPTS:-}
TARGETS=(${BENCH_TARGETS:-native passthrough_ll coordfs})
FRESH_FS=${BENCH_FRESH_FS:-1}
COMMAND="make bench"
[ "$(basename "$0")" = run.sh ] && [ -z "${MAKELEVEL:-}" ] && COMMAND="bench/run.sh"

# name|unit|better|what|target (coordfs speed relative to native; "-" for none)
WORKLOADS=(
  "seqwrite|MiB/s|higher|fio sequential write, 1 MiB blocks, ${SIZE_MB} MiB file, fsync at end|0.95"
  "seqread|MiB/s|higher|fio sequential read, 1 MiB blocks, ${SIZE_MB} MiB file, cold cache|0.95"
  "randread|IOPS|higher|fio random 4 KiB reads, ${RAND_SECONDS} s over the ${SIZE_MB} MiB file, cold cache|-"
  "randdirect|IOPS|higher|the same with O_DIRECT (every read from the disk)|-"
  "smallfiles|files/s|higher|create (100 B) + stat + unlink of ${SMALL_FILES} files|-"
  "tar|s|lower|unpack then delete a tarball of /usr/include|-"
)
SECTIONS=(section_machine section_mount section_kinds section_transport section_floor section_lowfd section_memory section_eventlog section_metrics section_suites section_how)
LOW_NOFILE=${BENCH_LOW_NOFILE:-1024}
TRANSPORT=${BENCH_TRANSPORT:-1}
URING_SWITCH=/sys/module/fuse/parameters/enable_uring
URING_SAVED=""
# A virtual machine's idle CPUs poll for this long before they halt (cpuidle-haltpoll); 0: they
# halt at once, and waking one takes an interrupt and an exit to the host.
HALTPOLL_SWITCH=/sys/module/haltpoll/parameters/guest_halt_poll_ns
HALTPOLL_NS=${BENCH_HALTPOLL_NS:-200000}
HALTPOLL_SAVED=""

say() { printf '%s\n' "$*" >&2; }
die() { say "bench: $*"; exit 1; }

# ---------------------------------------------------------------- set-up and clean-up

declare -A DIR_OF=()      # target -> folder the workloads run in
declare -A PID_OF=()      # target -> daemon pid
declare -A RESULT=()      # "workload:target" -> number
declare -A RSS=()         # "target:when" -> KiB
declare -A LOOKUP_ERRORS=()
MOUNTS=()
IMAGES=()      # loop-mounted ext4 images (fresh file systems), unmounted last
TMP=""

cleanup() {
  local m
  [ -z "$URING_SAVED" ] || echo "$URING_SAVED" > "$URING_SWITCH" 2>/dev/null || true
  stop_hogs
  stop_haltpoll
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m" 2>/dev/null || grep -q " $m fuse" /proc/mounts; then
      fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    fi
  done
  local p
  for p in "${PID_OF[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  for m in "${IMAGES[@]}"; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  [ -n "$TMP" ] && rm -rf "$TMP"
  # Only what this script made; never anything under a live mount.
  if ! grep -q " $WORK/" /proc/mounts; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

preflight() {
  local t
  for t in fio jq python3 cc pkg-config fusermount3 tar; do command -v "$t" >/dev/null || die "$t is missing (make deps installs it)"; done
  [ -x "$BIN" ] || [ "${1:-}" = floor ] || die "no coordfs binary at $BIN: run 'swift build -c $CONFIG' (make bench does)"
  [ -e /dev/fuse ] || die "/dev/fuse is missing"
  if grep -q " $WORK/" /proc/mounts; then die "something is still mounted under $WORK; unmount it first"; fi
  rm -rf "$WORK"
  mkdir -p "$WORK"
  local fs; fs=$(stat -f -c %T "$WORK")
  [ "$fs" != tmpfs ] || die "$WORK is on tmpfs; set BENCH_DIR to a folder on a disk"
  TMP=$(mktemp -d)
}

# passthrough_ll from the sources libfuse3-dev installs (possibly gzipped), built now.
build_passthrough() {
  local ex=/usr/share/doc/libfuse3-dev/examples f
  for f in passthrough_ll.c passthrough_helpers.h; do
    if [ -f "$ex/$f" ]; then cp "$ex/$f" "$TMP/"; elif [ -f "$ex/$f.gz" ]; then gunzip -c "$ex/$f.gz" > "$TMP/$f"; fi
  done
  [ -f "$TMP/passthrough_ll.c" ] || die "no passthrough_ll.c under $ex (install libfuse3-dev)"
  # shellcheck disable=SC2046
  cc -O2 -Wall -o "$TMP/passthrough_ll" "$TMP/passthrough_ll.c" $(pkg-config --cflags --libs fuse3) \
    || die "cannot build passthrough_ll"
}

# passthrough_hp (C++) from the libfuse sources of the installed version: BENCH_LIBFUSE_SRC (a
# source tree, or a git directory holding the tag), else a shallow clone of that tag.
build_passthrough_hp() {
  [ -x "$TMP/passthrough_hp" ] && return 0
  local v tag src=${BENCH_LIBFUSE_SRC:-} f
  v=$(pkg-config --modversion fuse3); tag="fuse-$v"
  if [ -n "$src" ] && [ -f "$src/example/passthrough_hp.cc" ]; then
    cp "$src/example/passthrough_hp.cc" "$src/example/cxxopts.hpp" "$TMP/"
  elif [ -n "$src" ] && git -C "$src" rev-parse -q --verify "$tag^{commit}" >/dev/null 2>&1; then
    for f in passthrough_hp.cc cxxopts.hpp; do git -C "$src" show "$tag:example/$f" > "$TMP/$f"; done
  elif git clone -q --depth 1 -b "$tag" https://github.com/libfuse/libfuse "$TMP/libfuse" 2>/dev/null; then
    cp "$TMP/libfuse/example/passthrough_hp.cc" "$TMP/libfuse/example/cxxopts.hpp" "$TMP/"
  else
    return 1
  fi
  # shellcheck disable=SC2046
  c++ -O2 -std=c++17 -o "$TMP/passthrough_hp" "$TMP/passthrough_hp.cc" $(pkg-config --cflags --libs fuse3) 2>>"$TMP/hp-build.log"
}

wait_mounted() {   # mountpoint
  for _ in $(seq 200); do grep -q " $1 fuse" /proc/mounts && return 0; sleep 0.05; done
  die "$1 did not mount"
}

# A fresh ext4 file system for one target's folder: an image file on the bench disk, every inode
# table written at mkfs (no lazy init running during the workloads). Each target gets its own, so
# each one's metadata workloads find the same history: ext4 skips inodes deleted in the last
# minute when allocating, and on a shared folder whichever target ran next paid for the others.
fresh_fs() {   # folder name
  mkdir -p "$1"
  [ "$FRESH_FS" = 1 ] || return 0
  local img="$WORK/$2.img"
  truncate -s "$(( SIZE_MB + 3072 ))M" "$img"
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img" || die "mkfs.ext4 failed (BENCH_FRESH_FS=0 to use plain folders)"
  mount -o loop "$img" "$1" || die "cannot loop-mount $img (root is needed; BENCH_FRESH_FS=0 to use plain folders)"
  IMAGES+=("$1")
}

start_target() {   # target: its folder (a fresh file system) and, for a FUSE target, its daemon
  case $1 in
    native)
      fresh_fs "$WORK/native" native; DIR_OF[native]=$WORK/native ;;
    passthrough_ll)
      build_passthrough
      fresh_fs "$WORK/pt/backing" pt; mkdir -p "$WORK/pt/mnt"
      MOUNTS+=("$WORK/pt/mnt")
      "$TMP/passthrough_ll" -f -o "source=$WORK/pt/backing" "$WORK/pt/mnt" 2>>"$TMP/pt.log" &
      PID_OF[passthrough_ll]=$!
      wait_mounted "$WORK/pt/mnt"
      DIR_OF[passthrough_ll]=$WORK/pt/mnt ;;
    passthrough_hp)
      build_passthrough_hp || die "cannot build passthrough_hp (set BENCH_LIBFUSE_SRC to a libfuse $(pkg-config --modversion fuse3) checkout)"
      fresh_fs "$WORK/hp/backing" hp; mkdir -p "$WORK/hp/mnt"
      MOUNTS+=("$WORK/hp/mnt")
      "$TMP/passthrough_hp" --foreground "$WORK/hp/backing" "$WORK/hp/mnt" 2>>"$TMP/hp.log" &
      PID_OF[passthrough_hp]=$!
      wait_mounted "$WORK/hp/mnt"
      DIR_OF[passthrough_hp]=$WORK/hp/mnt ;;
    coordfs)
      fresh_fs "$WORK/cf/backing" cf; mkdir -p "$WORK/cf/mnt"
      MOUNTS+=("$WORK/cf/mnt")
      "$BIN" mount "$WORK/cf/backing" "$WORK/cf/mnt" ${COORDFS_OPTS:+-o "$COORDFS_OPTS"} || die "coordfs mount failed"
      wait_mounted "$WORK/cf/mnt"
      PID_OF[coordfs]=$(pgrep -n -f "coordfs mount $WORK/cf/backing $WORK/cf/mnt" || true)
      [ -n "${PID_OF[coordfs]}" ] || die "cannot find the coordfs daemon's pid"
      DIR_OF[coordfs]=$WORK/cf/mnt ;;
    coordfs_lowfd)
      # The same daemon with RLIMIT_NOFILE at LOW_NOFILE, soft and hard, and no CAP_SYS_RESOURCE
      # to raise it again: past half of it, nodes keep only file handles.
      fresh_fs "$WORK/cflow/backing" cflow; mkdir -p "$WORK/cflow/mnt"
      MOUNTS+=("$WORK/cflow/mnt")
      setpriv --bounding-set=-sys_resource prlimit --nofile="$LOW_NOFILE:$LOW_NOFILE" \
        "$BIN" mount "$WORK/cflow/backing" "$WORK/cflow/mnt" ${COORDFS_OPTS:+-o "$COORDFS_OPTS"} || die "coordfs mount (low limit) failed"
      wait_mounted "$WORK/cflow/mnt"
      PID_OF[coordfs_lowfd]=$(pgrep -n -f "coordfs mount $WORK/cflow/backing $WORK/cflow/mnt" || true)
      [ -n "${PID_OF[coordfs_lowfd]}" ] || die "cannot find the low-limit coordfs daemon's pid"
      DIR_OF[coordfs_lowfd]=$WORK/cflow/mnt ;;
    coordfs_dev|coordfs_uring|coordfs_dev_fixed|coordfs_uring_fixed)
      # The transport comparison: each with a metrics endpoint to count requests; _fixed: spin_adapt=off.
      local v=${1#coordfs_} tr port=19464 extra=""
      tr=${v%_fixed}
      case $v in dev) port=19464 ;; uring) port=19465 ;; dev_fixed) port=19466 ;; uring_fixed) port=19467 ;; esac
      [ "$v" != "$tr" ] && extra=",spin_adapt=off"
      fresh_fs "$WORK/cf$v/backing" "cf$v"; mkdir -p "$WORK/cf$v/mnt"
      MOUNTS+=("$WORK/cf$v/mnt")
      "$BIN" mount "$WORK/cf$v/backing" "$WORK/cf$v/mnt" -o "transport=$tr,metrics=127.0.0.1:$port$extra${COORDFS_OPTS:+,$COORDFS_OPTS}" \
        || die "coordfs mount (transport=$tr$extra) failed"
      wait_mounted "$WORK/cf$v/mnt"
      PID_OF[$1]=$(pgrep -n -f "coordfs mount $WORK/cf$v/backing $WORK/cf$v/mnt" || true)
      [ -n "${PID_OF[$1]}" ] || die "cannot find the coordfs daemon's pid (transport=$tr$extra)"
      METRICS_PORT[$1]=$port
      DIR_OF[$1]=$WORK/cf$v/mnt ;;
    *) die "unknown target $1" ;;
  esac
}

# The kernel offers FUSE over io_uring only while enable_uring is Y: the mount workloads and the
# transport comparison run with it on (coordfs's default transport, auto, then takes the ring); the
# first value seen is restored by cleanup, at exit.
uring_offered() {
  [ -f "$URING_SWITCH" ] || return 0
  [ -n "$URING_SAVED" ] || URING_SAVED=$(cat "$URING_SWITCH")
  echo Y > "$URING_SWITCH" 2>/dev/null || say "bench: cannot turn on $URING_SWITCH: coordfs runs on /dev/fuse"
}

# The transport a coordfs daemon says it uses (its daemon log under BACKING/.coordfs).
transport_of() {   # backing folder
  local line
  line=$(grep -rhos "requests come through [a-z/_]*" "$1/.coordfs" 2>/dev/null | tail -1)
  case $line in
    *io_uring*) echo "io_uring" ;;
    *dev/fuse*) echo "/dev/fuse" ;;
    *) echo "unknown" ;;
  esac
}

setup_targets() {
  local t
  uring_offered
  for t in "${TARGETS[@]}"; do start_target "$t"; done
}

# A metadata round on a file system with no history: the target's daemon stops, its image is made
# anew, and the daemon starts again on it (only with fresh file systems).
refresh_target() {   # target
  [ "$FRESH_FS" = 1 ] || return 0
  local t=$1 pid=${PID_OF[$1]:-} fs
  case $t in
    native) fs=$WORK/native ;;
    passthrough_ll) fs=$WORK/pt/backing; fusermount3 -u "$WORK/pt/mnt" || die "cannot unmount passthrough_ll" ;;
    coordfs) fs=$WORK/cf/backing; "$BIN" unmount "$WORK/cf/mnt" >/dev/null || die "cannot unmount coordfs" ;;
    coordfs_lowfd) fs=$WORK/cflow/backing; "$BIN" unmount "$WORK/cflow/mnt" >/dev/null || die "cannot unmount coordfs" ;;
    coordfs_dev|coordfs_uring|coordfs_dev_fixed|coordfs_uring_fixed) fs=$WORK/cf${t#coordfs_}/backing; "$BIN" unmount "${DIR_OF[$t]}" >/dev/null || die "cannot unmount coordfs" ;;
    passthrough_hp) fs=$WORK/hp/backing; fusermount3 -u "$WORK/hp/mnt" || die "cannot unmount passthrough_hp" ;;
  esac
  if [ -n "$pid" ]; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  umount "$fs" || die "cannot unmount $fs"
  start_target "$t"
}

drop_caches() {
  sync
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || say "bench: cannot drop caches (not root?); reads may be warm"
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# ---------------------------------------------------------------- workloads (print one number)

fio_json() { fio --output-format=json "$@" 2>/dev/null; }

wl_seqwrite() {
  fio_json --name=seqwrite --filename="$1/fio-seq.dat" --rw=write --bs=1M --size="${SIZE_MB}M" \
    --ioengine=psync --end_fsync=1 | jq '.jobs[0].write.bw_bytes / 1048576'
}

wl_seqread() {
  drop_caches
  fio_json --name=seqread --filename="$1/fio-seq.dat" --rw=read --bs=1M --size="${SIZE_MB}M" \
    --ioengine=psync | jq '.jobs[0].read.bw_bytes / 1048576'
}

wl_randdirect() {
  drop_caches  # also the loop images' pages on the host file system, which O_DIRECT reads would hit
  fio_json --name=randdirect --filename="$1/fio-seq.dat" --rw=randread --bs=4k --size="${SIZE_MB}M" \
    --ioengine=psync --direct=1 --runtime="$RAND_SECONDS" --time_based --randrepeat=1 | jq '.jobs[0].read.iops'
}

wl_randread() {
  drop_caches
  fio_json --name=randread --filename="$1/fio-seq.dat" --rw=randread --bs=4k --size="${SIZE_MB}M" \
    --ioengine=psync --runtime="$RAND_SECONDS" --time_based --randrepeat=1 | jq '.jobs[0].read.iops'
}

wl_smallfiles() {   # bench/smallfiles.py: also what `coordfs-bench floor` runs
  python3 "$ROOT/bench/smallfiles.py" "$1/small" "$SMALL_FILES"
}

# Before a metadata workload: nothing dirty, the tarball in memory. With plain folders, also no
# cached inode-table blocks (ext4 then does not skip the inodes other targets just deleted).
settle_disk() {
  [ -f "$WORK/include.tar" ] || tar -C /usr -cf "$WORK/include.tar" include
  if [ "$FRESH_FS" = 1 ]; then sync; else drop_caches; fi
  cat "$WORK/include.tar" > /dev/null
}

wl_tar() {
  local start end
  start=$(date +%s.%N)
  mkdir "$1/tree"
  tar -C "$1/tree" -xf "$WORK/include.tar"
  rm -rf "$1/tree"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f\n", b - a}'
}

# The metadata workloads churn inodes, and ext4 then takes longer to allocate: it skips inodes
# deleted in the last minute while their inode-table block is still cached. Each target has a file
# system of its own (fresh_fs), made anew before each round of a metadata workload (refresh_target),
# each run starts from a settled disk (settle_disk), and they run ROUNDS times, the target order
# rotating each round, the best round counting. The sequential workloads
# repeat too: the native folder's fsync time alone varies by a third from run to run here.
ROUNDS=${BENCH_ROUNDS:-5}
META_ROUNDS=${BENCH_META_ROUNDS:-5}
declare -A ALL=()          # "workload:target" -> every round's value, space-separated
REPEATED=" seqwrite seqread randdirect smallfiles tar "
FRESH_ROUND=" smallfiles tar "   # each round of these on a new file system (refresh_target)

run_workloads() {
  local line name better t value r i n rounds
  for line in "${WORKLOADS[@]}"; do
    name=${line%%|*}
    better=$(cut -d'|' -f3 <<<"$line")
    rounds=1
    [[ "$REPEATED" == *" $name "* ]] && rounds=$ROUNDS
    [[ "$FRESH_ROUND" == *" $name "* ]] && rounds=$META_ROUNDS
    n=${#TARGETS[@]}
    for ((r = 0; r < rounds; r++)); do
      for ((i = 0; i < n; i++)); do
        t=${TARGETS[$(((i + r) % n))]}
        say "bench: $name on $t (round $((r + 1))/$rounds)"
        [[ "$FRESH_ROUND" == *" $name "* ]] && refresh_target "$t"
        [[ "$REPEATED" == *" $name "* ]] && settle_disk
        if ! value=$("wl_$name" "${DIR_OF[$t]}"); then value="error"; fi
        say "bench:   $value"
        [ "$value" != "error" ] && ALL[$name:$t]="${ALL[$name:$t]:-} $value"
        local prev=${RESULT[$name:$t]:-}
        if [ -z "$prev" ] || [ "$prev" = "error" ]; then
          RESULT[$name:$t]=$value
        elif [ "$value" != "error" ]; then
          RESULT[$name:$t]=$(awk -v a="$prev" -v b="$value" -v h="$better" 'BEGIN { if ((h == "higher") == (b > a)) print b; else print a }')
        fi
      done
    done
  done
  for t in "${TARGETS[@]}"; do rm -f "${DIR_OF[$t]}/fio-seq.dat"; done
  [[ " ${TARGETS[*]} " == *" coordfs "* ]] && COORDFS_TRANSPORT=$(transport_of "$WORK/cf/backing")
  return 0
}
COORDFS_TRANSPORT=""

# The metadata workloads on coordfs at its default descriptor limit and at LOW_NOFILE, each round
# on fresh file systems, the order alternating; the best round counts (medians in the section).
run_lowfd() {
  [ "$LOW_NOFILE" != 0 ] || return 0
  command -v setpriv >/dev/null && command -v prlimit >/dev/null || { say "bench: setpriv/prlimit missing: no low-limit run"; LOW_NOFILE=0; return 0; }
  [ -n "${DIR_OF[coordfs]:-}" ] || start_target coordfs
  start_target coordfs_lowfd
  LOWFD_LIMIT=$(awk '/^Max open files/ {print $4}' "/proc/${PID_OF[coordfs_lowfd]}/limits")
  DEFAULT_LIMIT=$(awk '/^Max open files/ {print $4}' "/proc/${PID_OF[coordfs]}/limits")
  local name better r t value pair
  for name in $FRESH_ROUND; do
    better=$(printf '%s\n' "${WORKLOADS[@]}" | awk -F'|' -v n="$name" '$1 == n {print $3}')
    for ((r = 0; r < META_ROUNDS; r++)); do
      pair="coordfs coordfs_lowfd"; (( r % 2 )) && pair="coordfs_lowfd coordfs"
      for t in $pair; do
        say "bench: $name on $t at $([ "$t" = coordfs ] && echo "the default limit" || echo "$LOW_NOFILE descriptors") (round $((r + 1))/$META_ROUNDS)"
        refresh_target "$t"
        settle_disk
        if ! value=$("wl_$name" "${DIR_OF[$t]}"); then value="error"; fi
        say "bench:   $value"
        [ "$value" != "error" ] && LOWFD_ALL[$name:$t]="${LOWFD_ALL[$name:$t]:-} $value"
        local prev=${LOWFD[$name:$t]:-}
        if [ -z "$prev" ] || [ "$prev" = "error" ]; then LOWFD[$name:$t]=$value
        elif [ "$value" != "error" ]; then
          LOWFD[$name:$t]=$(awk -v a="$prev" -v b="$value" -v h="$better" 'BEGIN { if ((h == "higher") == (b > a)) print b; else print a }')
        fi
      done
    done
  done
}
declare -A LOWFD=() LOWFD_ALL=()
LOWFD_LIMIT="" DEFAULT_LIMIT=""

# The metadata workloads on coordfs through /dev/fuse and through io_uring (`-o transport=`), each
# round on fresh file systems, the target order rotating; the best round counts (medians in the
# section). TRANSPORT_TARGETS may add the same daemons with `spin_adapt=off` (coordfs_dev_fixed,
# coordfs_uring_fixed: the reader polls for the whole spin after every request, as before the
# SpinGovernor) and passthrough_hp. TRANSPORT_LOADS: "quiet" (nothing of the bench's own) and/or
# "hog" (HOGS_PER_CPU `yes >/dev/null` per online CPU, not niced, running through that load's
# workloads and killed after); each round runs every load, so the loads are interleaved too.
# Daemon CPU (user + system, from /proc/PID/stat) and FUSE requests (the daemon's metrics endpoint,
# coordfs_fuse_requests_total) are summed over every round; the load average (1 min) is read before
# each workload.
TRANSPORT_TARGETS=(${BENCH_TRANSPORT_TARGETS:-coordfs_dev coordfs_uring})
TRANSPORT_LOADS=(${BENCH_TRANSPORT_LOADS:-quiet})
HOGS_PER_CPU=${BENCH_HOGS_PER_CPU:-1}
HOG_PIDS=()

start_hogs() {
  local i
  for ((i = 0; i < $(nproc) * HOGS_PER_CPU; i++)); do yes >/dev/null & HOG_PIDS+=($!); done
}

stop_hogs() {
  local p
  for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${HOG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  HOG_PIDS=()
}

# "haltpoll" load: the guest's idle CPUs poll HALTPOLL_NS before halting, for that load's workloads.
haltpoll_available() {
  [ "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null)" = haltpoll ] && [ -w "$HALTPOLL_SWITCH" ]
}

start_haltpoll() {
  [ -n "$HALTPOLL_SAVED" ] || HALTPOLL_SAVED=$(cat "$HALTPOLL_SWITCH")
  echo "$HALTPOLL_NS" > "$HALTPOLL_SWITCH"
}

stop_haltpoll() {
  [ -z "$HALTPOLL_SAVED" ] || echo "$HALTPOLL_SAVED" > "$HALTPOLL_SWITCH" 2>/dev/null || true
  HALTPOLL_SAVED=""
}

# The machine's idle driver and, under cpuidle-haltpoll, its polling: what a wake-up of an idle
# CPU costs, which moves every FUSE round trip (docs/benchmarks.md, "Idle CPUs that halt at once").
idle_description() {
  local driver; driver=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)
  if [ "$driver" = haltpoll ] && [ -r "$HALTPOLL_SWITCH" ]; then
    local ns; ns=$(cat "$HALTPOLL_SWITCH")
    if [ "$ns" = 0 ]; then echo "cpuidle-haltpoll with guest_halt_poll_ns 0 (a virtual machine whose idle CPUs halt at once: waking one is an interrupt and an exit to the host)"
    else echo "cpuidle-haltpoll, idle CPUs poll up to $ns ns before they halt"; fi
  else
    echo "$driver"
  fi
}

run_transport() {
  [ "$TRANSPORT" != 0 ] || return 0
  [ -f "$URING_SWITCH" ] || { say "bench: this kernel has no FUSE over io_uring: no transport comparison"; TRANSPORT=0; return 0; }
  uring_offered
  [ "$(cat "$URING_SWITCH")" = Y ] || { say "bench: cannot turn on $URING_SWITCH: no transport comparison"; TRANSPORT=0; return 0; }
  local t
  if [[ " ${TRANSPORT_LOADS[*]} " == *" haltpoll "* ]] && ! haltpoll_available; then
    say "bench: the idle driver is not cpuidle-haltpoll (or its polling cannot be set): no haltpoll load"
    local kept=() l
    for l in "${TRANSPORT_LOADS[@]}"; do [ "$l" = haltpoll ] || kept+=("$l"); done
    TRANSPORT_LOADS=("${kept[@]}")
  fi
  for t in "${TRANSPORT_TARGETS[@]}"; do start_target "$t"; done
  TRANSPORT_LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
  local name better r i n t value cpu0 req0 cpu1 req1 load k
  n=${#TRANSPORT_TARGETS[@]}
  for name in $FRESH_ROUND; do
    better=$(printf '%s\n' "${WORKLOADS[@]}" | awk -F'|' -v n="$name" '$1 == n {print $3}')
    for ((r = 0; r < META_ROUNDS; r++)); do
      for load in "${TRANSPORT_LOADS[@]}"; do
        for ((i = 0; i < n; i++)); do
          t=${TRANSPORT_TARGETS[$(((i + r) % n))]}
          k=$name:$load:$t
          say "bench: $name on $t, $load (round $((r + 1))/$META_ROUNDS)"
          refresh_target "$t"
          if [ -f "$WORK/cf${t#coordfs_}/backing/.coordfs/daemon.log" ]; then
            if grep -q "requests come through io_uring" "$WORK/cf${t#coordfs_}/backing/.coordfs/daemon.log"; then
              TRANSPORT_SEEN[$t]=uring; else TRANSPORT_SEEN[$t]=dev; fi
          fi
          settle_disk
          [ "$load" = hog ] && { start_hogs; sleep 1; }
          [ "$load" = haltpoll ] && start_haltpoll
          TRANSPORT_LOADAVG[$name:$load]="${TRANSPORT_LOADAVG[$name:$load]:-} $(cut -d' ' -f1 /proc/loadavg)"
          cpu0=$(daemon_cpu_ticks "${PID_OF[$t]}"); req0=$(daemon_requests "${METRICS_PORT[$t]:-}")
          if ! value=$("wl_$name" "${DIR_OF[$t]}"); then value="error"; fi
          cpu1=$(daemon_cpu_ticks "${PID_OF[$t]}"); req1=$(daemon_requests "${METRICS_PORT[$t]:-}")
          [ "$load" = hog ] && stop_hogs
          [ "$load" = haltpoll ] && stop_haltpoll
          say "bench:   $value ($((cpu1 - cpu0)) ticks, $((req1 - req0)) requests)"
          TRANSPORT_CPU[$k]=$(( ${TRANSPORT_CPU[$k]:-0} + cpu1 - cpu0 ))
          TRANSPORT_REQ[$k]=$(( ${TRANSPORT_REQ[$k]:-0} + req1 - req0 ))
          [ "$value" != "error" ] && TRANSPORT_ALL[$k]="${TRANSPORT_ALL[$k]:-} $value"
          local prev=${TRANSPORT_BEST[$k]:-}
          if [ -z "$prev" ] || [ "$prev" = "error" ]; then TRANSPORT_BEST[$k]=$value
          elif [ "$value" != "error" ]; then
            TRANSPORT_BEST[$k]=$(awk -v a="$prev" -v b="$value" -v h="$better" 'BEGIN { if ((h == "higher") == (b > a)) print b; else print a }')
          fi
        done
      done
    done
  done
  TRANSPORT_LOADAVG_END=$(cut -d' ' -f1-3 /proc/loadavg)
}
declare -A TRANSPORT_BEST=() TRANSPORT_ALL=() TRANSPORT_CPU=() TRANSPORT_REQ=() TRANSPORT_SEEN=() METRICS_PORT=() TRANSPORT_LOADAVG=()
TRANSPORT_LOADAVG_START="" TRANSPORT_LOADAVG_END=""

daemon_cpu_ticks() {   # pid -> user + system clock ticks so far
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

daemon_requests() {   # metrics port -> FUSE requests so far (0 without one)
  [ -n "$1" ] || { echo 0; return; }
  python3 -c '
import sys, urllib.request
try:
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
except Exception:
    print(0); sys.exit()
print(int(sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("coordfs_fuse_requests_total"))))
' "$1"
}

# Daemon memory: resident set after LOOKUP_FILES files were looked up through each mount.
run_memory() {
  local t dir
  for t in "${TARGETS[@]}"; do
    [ "$t" = native ] && continue
    case $t in passthrough_ll) dir=$WORK/pt ;; coordfs) dir=$WORK/cf ;; esac
    say "bench: $LOOKUP_FILES lookups on $t"
    python3 - "$dir/backing/lookup" "$LOOKUP_FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range((n + 999) // 1000):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for i in range(min(1000, n - d * 1000)):
        open(f"{root}/d{d}/f{i}", "w").close()
EOF
    RSS[$t:before]=$(rss_kib "${PID_OF[$t]}")
    LOOKUP_ERRORS[$t]=$(python3 - "$dir/mnt/lookup" "$LOOKUP_FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
errors = 0
for d in range((n + 999) // 1000):
    for i in range(min(1000, n - d * 1000)):
        try:
            os.lstat(f"{root}/d{d}/f{i}")
        except OSError:
            errors += 1
print(errors)
EOF
)
    RSS[$t:after]=$(rss_kib "${PID_OF[$t]}")
    rm -rf "$dir/backing/lookup"
  done
}

# ---------------------------------------------------------------- request kinds

# Request kinds a tool makes besides data and names (issue 23): `ls -l` of a big folder (a stat
# and two xattr reads per file: security.selinux, system.posix_acl_access), a recursive grep of a
# /usr/include copy (every file opened, read, closed) and a folder's listing as it grows. The
# trees are made directly in each target's backing folder (the same trees for every target); in
# each round, per target, the kernel's inodes are dropped, then each workload runs once untimed
# (caches warm) and once timed; best of KINDS_ROUNDS, the target order rotating each round. A
# failing command (the examples keep a descriptor per inode: past the limit they fail fast) is
# counted as failed, not as a time.
LSL_FILES=${BENCH_LSL_FILES:-50000}
KINDS_ROUNDS=${BENCH_KINDS_ROUNDS:-3}
GROWTH=(${BENCH_GROWTH:-1000 10000 100000})
KIND_TARGETS=(native passthrough_ll passthrough_hp coordfs)
declare -A KIND=() KIND_ALL=() KIND_ERRORS=()
KIND_LOAD_BEFORE="" KIND_LOAD_AFTER=""

backing_of() {   # target -> the folder on disk its mount shows
  case $1 in
    native) echo "$WORK/native" ;;
    passthrough_ll) echo "$WORK/pt/backing" ;;
    passthrough_hp) echo "$WORK/hp/backing" ;;
    coordfs) echo "$WORK/cf/backing" ;;
  esac
}

make_kind_trees() {   # backing folder
  python3 - "$1" "$LSL_FILES" "${GROWTH[@]}" <<'EOF'
import os, sys
root, n, sizes = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
for name, count in [("lsl", n)] + [(f"grow{k}", k) for k in sizes]:
    d = os.path.join(root, name)
    os.mkdir(d)
    for i in range(count):
        os.close(os.open(os.path.join(d, f"file-{i:06d}"), os.O_CREAT | os.O_WRONLY, 0o644))
EOF
  mkdir "$1/inc"
  tar -C "$1/inc" -xf "$WORK/include.tar"
}

elapsed() {   # worst-good-status command...: the seconds it took (output discarded), or "error"
  local ok=$1 start end rc=0
  shift
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || rc=$?
  end=$(date +%s.%N)
  # A daemon out of descriptors (EMFILE) answers fast and wrong: never a time.
  if [ "$rc" -gt "$ok" ]; then echo error; return; fi
  awk -v a="$start" -v b="$end" 'BEGIN {printf "%.4f\n", b - a}'
}

kind_run() {   # kind dir
  case $1 in
    lsl) elapsed 0 ls -l "$2/lsl" ;;
    grep) elapsed 1 grep -r -l --binary-files=text 'coordfs-bench: no such text' "$2/inc" ;;   # 1: no match
    grow*) elapsed 0 ls -U -1 "$2/$1" ;;
  esac
}

KIND_NAMES=(grep)
for k in "${GROWTH[@]}"; do KIND_NAMES+=("grow$k"); done
KIND_NAMES+=(lsl)   # last: it makes the examples, a descriptor per inode, pass their limit

run_kinds() {
  [ -f "$WORK/include.tar" ] || tar -C /usr -cf "$WORK/include.tar" include
  local t r i n=${#KIND_TARGETS[@]} name value
  for t in "${KIND_TARGETS[@]}"; do
    [ -n "${DIR_OF[$t]:-}" ] || start_target "$t"
    say "bench: request-kind trees on $t"
    make_kind_trees "$(backing_of "$t")"
  done
  sync
  KIND_LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
  for ((r = 0; r < KINDS_ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
      t=${KIND_TARGETS[$(((i + r) % n))]}
      # The kernel forgets every inode first (the FUSE daemons close their descriptors), then each
      # workload runs once untimed (caches warm) and once timed.
      sync; echo 2 > /proc/sys/vm/drop_caches 2>/dev/null || true
      for name in "${KIND_NAMES[@]}"; do
        kind_run "$name" "${DIR_OF[$t]}" >/dev/null
        value=$(kind_run "$name" "${DIR_OF[$t]}")
        say "bench: $name on $t (round $((r + 1))/$KINDS_ROUNDS): $value s"
        [ "$value" = error ] && { KIND_ERRORS[$name:$t]=1; continue; }
        KIND_ALL[$name:$t]="${KIND_ALL[$name:$t]:-} $value"
        if [ -z "${KIND[$name:$t]:-}" ] || awk -v a="$value" -v b="${KIND[$name:$t]}" 'BEGIN {exit !(a < b)}'; then
          KIND[$name:$t]=$value
        fi
      done
    done
  done
  KIND_LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
}

meets() {   # ratio target
  [[ $1 =~ ^[0-9.]+$ ]] || { echo "not shown"; return; }
  awk -v r="$1" -v t="$2" 'BEGIN {print (r >= t) ? "met" : "missed"}'
}

section_kinds() {
  [ -n "${KIND[lsl:coordfs]:-}" ] || return 0
  echo "## Request kinds: ls -l, grep -r, a growing folder"
  echo
  echo "\`bench/run.sh kinds\`. Seconds, best of $KINDS_ROUNDS rounds (medians in brackets), caches warm (each workload"
  echo "run once untimed just before), the target order rotating each round; ratios are"
  echo "coordfs's speed over the other's (above 1: coordfs is faster), best against best. passthrough_ll"
  echo "and passthrough_hp are libfuse $(pkg-config --modversion fuse3)'s examples with their default options (passthrough_hp"
  echo "caches attributes and names for a day); coordfs runs with its defaults (coordination, event log,"
  echo "store and watcher on; a single-user mount). Load average (1, 5, 15 min) at the start of the"
  echo "rounds: $KIND_LOAD_BEFORE; at the end: $KIND_LOAD_AFTER ($(nproc) cores)."
  echo
  echo "| workload | native | passthrough_ll | passthrough_hp | coordfs | coordfs / native | / passthrough_ll | / passthrough_hp | target |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
  local name what rn rl rh verdict k t cells row
  local files; files=$(tar -tf "$WORK/include.tar" | grep -vc '/$')
  local rows=("lsl|\`ls -l\` of a $LSL_FILES-file folder" "grep|\`grep -r\` of a /usr/include copy ($files files)")
  for k in "${GROWTH[@]}"; do rows+=("grow$k|\`ls -U\` of a $k-entry folder"); done
  for row in "${rows[@]}"; do
    IFS='|' read -r name what <<<"$row"
    rn=$(speed_ratio "${KIND[$name:coordfs]:-}" "${KIND[$name:native]:-}" lower)
    rl=$(speed_ratio "${KIND[$name:coordfs]:-}" "${KIND[$name:passthrough_ll]:-}" lower)
    rh=$(speed_ratio "${KIND[$name:coordfs]:-}" "${KIND[$name:passthrough_hp]:-}" lower)
    case $name in
      lsl) verdict="≥ 0.5 of native: $(meets "$rn" 0.5)" ;;
      grep) verdict="≥ 0.33 of native: $(meets "$rn" 0.33); ≥ 1.5× passthrough_hp: $(meets "$rh" 1.5)" ;;
      *) verdict="-" ;;
    esac
    cells=""
    for t in native passthrough_ll passthrough_hp coordfs; do
      if [ -n "${KIND[$name:$t]:-}" ]; then
        cells="$cells | $(printf '%.3f' "${KIND[$name:$t]}") ($(printf '%.3f' "$(median_of "${KIND_ALL[$name:$t]:-}")"))${KIND_ERRORS[$name:$t]:+, a round failed}"
      else
        cells="$cells | failed"
      fi
    done
    echo "| $what$cells | $rn | $rl | $rh | $verdict |"
  done
  echo
  echo "The growing folder's listing per entry (best round, microseconds): flat means the cost of an"
  echo "entry does not grow with the folder."
  echo
  echo "| entries | native | passthrough_ll | passthrough_hp | coordfs |"
  echo "|---:|---:|---:|---:|---:|"
  for k in "${GROWTH[@]}"; do
    cells=""
    for t in native passthrough_ll passthrough_hp coordfs; do
      cells="$cells | $([ -n "${KIND[grow$k:$t]:-}" ] && awk -v s="${KIND[grow$k:$t]}" -v n="$k" 'BEGIN {printf "%.2f", s * 1e6 / n}' || echo failed)"
    done
    echo "| $k$cells |"
  done
  echo
}

# ---------------------------------------------------------------- report

# Speed of coordfs relative to another target: >1 means coordfs is faster.
ratio() {   # workload other-target better
  speed_ratio "${RESULT[$1:coordfs]:-}" "${RESULT[$1:$2]:-}" "$3"
}

speed_ratio() {   # coordfs-value other-value better: coordfs's speed over the other's
  local a=$1 b=$2
  [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]] || { echo "n/a"; return; }
  if [ "$3" = higher ]; then awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}'; else awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}'; fi
}

median() {   # workload:target -> the median of its rounds
  median_of "${ALL[$1]:-}"
}

median_of() {   # space-separated values -> their median
  tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

median_ratio() {   # workload better: coordfs's median speed relative to passthrough_ll's
  speed_ratio "$(median "$1:coordfs")" "$(median "$1:passthrough_ll")" "$2"
}

fmt() { [[ $1 =~ ^[0-9.]+$ ]] && printf '%.1f' "$1" || printf '%s' "${1:-n/a}"; }

section_machine() {
  echo "## Machine"
  echo
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "- memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "- kernel: $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "- idle CPUs: $(idle_description)"
  if [ "$FRESH_FS" = 1 ]; then
    echo "- disk: $(df --output=source "$WORK" | tail -1); each target's folder is a fresh ext4 file system of its own, an image file of $(( SIZE_MB + 3072 )) MiB on that disk (loop device), made at the start of the run"
  else
    echo "- disk: $(stat -f -c %T "$WORK") on $(df --output=source "$WORK" | tail -1) (the same folder for every target: $WORK)"
  fi
  echo "- libfuse $(pkg-config --modversion fuse3), $(fio --version), $(swift --version 2>/dev/null | head -1 || echo 'swift ?')"
  echo "- coordfs: $BIN${COORDFS_OPTS:+, -o $COORDFS_OPTS} (default options otherwise); passthrough_ll built from /usr/share/doc/libfuse3-dev/examples with -O2, default options"
  echo
}

section_mount() {
  echo "## Mount: native vs passthrough_ll vs coordfs"
  echo
  echo "Ratios are speeds: coordfs's throughput divided by the other's (for timed workloads, the"
  echo "other's time divided by coordfs's), so 1.00 means as fast and above 1 means faster."
  echo "Sequential write and read, the O_DIRECT random reads and the metadata workloads (smallfiles, tar)"
  echo "are the best of $ROUNDS rounds ($META_ROUNDS for the metadata workloads; their medians are"
  echo "below the table), the target order rotating each round; each metadata round starts on a new file system"
  echo "(a daemon's file system is made anew under it). coordfs runs with its defaults: coordination, event log, document store and backing"
  echo "watcher on, kernel passthrough for open files (the kernel reads and writes the backing file"
  echo "itself; passthrough_ll, built against libfuse 3.14, cannot) and no FLUSH at close(2) for files on"
  echo "a local file system (passthrough_ll flushes every close); a single-user mount, so without"
  echo "\`default_permissions\` (with \`allow_other\` the kernel re-reads a directory's attributes after each"
  echo "create or unlink in it: two more requests per file)."
  [ -n "$COORDFS_TRANSPORT" ] && echo "Requests reach coordfs through $COORDFS_TRANSPORT (its daemon log; the run sets \`enable_uring\` to Y, so \`transport=auto\` takes the ring where the kernel has it)."
  echo
  echo "| workload | unit | native | passthrough_ll | coordfs | coordfs / native | coordfs / passthrough_ll | target |"
  echo "|---|---|---:|---:|---:|---:|---:|---|"
  local line name unit better what target r1 r2 verdict
  for line in "${WORKLOADS[@]}"; do
    IFS='|' read -r name unit better what target <<<"$line"
    r1=$(ratio "$name" native "$better"); r2=$(ratio "$name" passthrough_ll "$better")
    verdict=""
    if [ "$target" != "-" ] && [[ $r1 =~ ^[0-9.]+$ ]]; then
      verdict=$(awk -v r="$r1" -v t="$target" 'BEGIN {print (r >= t) ? "met" : "missed"}')
      verdict="≥ $target of native: $verdict"
    fi
    if [[ $r2 =~ ^[0-9.]+$ ]]; then
      verdict="${verdict:+$verdict; }≥ passthrough_ll: $(awk -v r="$r2" 'BEGIN {print (r >= 1) ? "met" : "missed"}')"
    fi
    echo "| $name: $what | $unit | $(fmt "${RESULT[$name:native]:-}") | $(fmt "${RESULT[$name:passthrough_ll]:-}") | $(fmt "${RESULT[$name:coordfs]:-}") | $r1 | $r2 | $verdict |"
  done
  echo
  local m
  for name in $FRESH_ROUND; do
    better=$(printf '%s\n' "${WORKLOADS[@]}" | awk -F'|' -v n="$name" '$1 == n {print $3}')
    m="Medians of $META_ROUNDS rounds, $name: native $(fmt "$(median "$name:native")"),"
    m="$m passthrough_ll $(fmt "$(median "$name:passthrough_ll")"), coordfs $(fmt "$(median "$name:coordfs")");"
    echo "$m coordfs / passthrough_ll $(median_ratio "$name" "$better")."
    echo
  done
  echo "fio asks for random access (\`POSIX_FADV_RANDOM\`), so the native folder reads exactly the 4 KiB"
  echo "asked for. That advice reaches no backing file through FUSE: passthrough_ll's daemon and"
  echo "coordfs's passthrough backing file read ahead, and within the run the whole file may be in the"
  echo "page cache (randread above native). The O_DIRECT row compares the reads themselves."
  echo
}

section_transport() {
  [ "$TRANSPORT" != 0 ] || return 0
  echo "## Metadata through /dev/fuse and through io_uring"
  echo
  echo "coordfs with \`-o transport=dev\` (read and write on /dev/fuse) beside \`-o transport=uring\`"
  echo "(FUSE over io_uring: one commit-and-fetch per request; \`docs/architecture.md\`, \"The transport\"),"
  echo "each with a metrics endpoint (to count the requests), enable_uring set to Y for the run; \`_fixed\`:"
  echo "the same with \`spin_adapt=off\` (the reader polls for the whole spin after every request, as"
  echo "before the spin became adaptive). Loads: quiet (nothing of the bench's own running), hog"
  echo "($HOGS_PER_CPU \`yes >/dev/null\` per CPU, not niced, through the workload) and haltpoll (the guest's idle"
  echo "CPUs polling up to $HALTPOLL_NS ns before they halt, set for the workload and restored after; idle"
  echo "CPUs in the other loads: $(idle_description)); each round runs every"
  echo "load, the target order rotating. Best of $META_ROUNDS rounds each, on fresh file systems; medians in"
  echo "brackets; ratios against the first column. Daemon CPU per request: the daemon's user and system"
  echo "time over every round, divided by the FUSE requests it served in them (\`coordfs_fuse_requests_total\`)."
  echo "The load average (1 min) before the workloads: min-max over the rounds; over the whole run"
  echo "${TRANSPORT_LOADAVG_START:-?} at the start and ${TRANSPORT_LOADAVG_END:-?} at the end. The transport each mount used,"
  echo "from its daemon.log:$(for t in "${TRANSPORT_TARGETS[@]}"; do [ -n "${TRANSPORT_SEEN[$t]:-}" ] && printf ' %s: %s,' "${t#coordfs_}" "${TRANSPORT_SEEN[$t]}"; done | sed 's/,$//')."
  echo
  local t header="| workload | load | load average |" rule="|---|---|---|" first=${TRANSPORT_TARGETS[0]}
  for t in "${TRANSPORT_TARGETS[@]}"; do header+=" ${t#coordfs_} |"; rule+="---:|"; done
  for t in "${TRANSPORT_TARGETS[@]:1}"; do header+=" ${t#coordfs_} / ${first#coordfs_} |"; rule+="---:|"; done
  for t in "${TRANSPORT_TARGETS[@]}"; do [[ $t == coordfs_* ]] && { header+=" CPU per request, ${t#coordfs_} |"; rule+="---:|"; }; done
  header+=" requests per round (coordfs) |"; rule+="---:|"
  echo "$header"
  echo "$rule"
  local line name unit better what target hz load row k la; hz=$(getconf CLK_TCK)
  for line in "${WORKLOADS[@]}"; do
    IFS='|' read -r name unit better what target <<<"$line"
    [[ "$FRESH_ROUND" == *" $name "* ]] || continue
    for load in "${TRANSPORT_LOADS[@]}"; do
      la=$(tr ' ' '\n' <<<"${TRANSPORT_LOADAVG[$name:$load]:-}" | grep . | sort -g | sed -n '1p;$p' | paste -sd- -)
      row="| $name: $what ($unit) | $load | ${la:-?} |"
      for t in "${TRANSPORT_TARGETS[@]}"; do
        k=$name:$load:$t
        row+=" $(fmt "${TRANSPORT_BEST[$k]:-}") ($(fmt "$(median_of "${TRANSPORT_ALL[$k]:-}")")) |"
      done
      for t in "${TRANSPORT_TARGETS[@]:1}"; do
        row+=" $(speed_ratio "${TRANSPORT_BEST[$name:$load:$t]:-}" "${TRANSPORT_BEST[$name:$load:$first]:-}" "$better") |"
      done
      for t in "${TRANSPORT_TARGETS[@]}"; do
        k=$name:$load:$t
        [[ $t == coordfs_* ]] && row+=" $(per_request "${TRANSPORT_CPU[$k]:-0}" "${TRANSPORT_REQ[$k]:-0}" "$hz") |"
      done
      for t in "${TRANSPORT_TARGETS[@]}"; do [[ $t == coordfs_* ]] && break; done
      row+=" $(( ${TRANSPORT_REQ[$name:$load:$t]:-0} / META_ROUNDS )) |"
      echo "$row"
    done
  done
  echo
}

per_request() {   # ticks requests hz -> microseconds of daemon CPU per request
  awk -v t="$1" -v n="$2" -v hz="$3" 'BEGIN { if (n > 0) printf "%.1f µs", t / hz * 1e6 / n; else print "-" }'
}

section_lowfd() {
  [ "$LOW_NOFILE" != 0 ] || return 0
  echo "## Metadata at a ${LOW_NOFILE}-descriptor limit"
  echo
  echo "coordfs as above (RLIMIT_NOFILE ${DEFAULT_LIMIT:-?}) beside the same daemon started with RLIMIT_NOFILE"
  echo "${LOWFD_LIMIT:-?} (\`setpriv --bounding-set=-sys_resource prlimit --nofile=$LOW_NOFILE:$LOW_NOFILE\`). Its node"
  echo "budget is half the limit: past it, nodes (directories too) keep only their file handles and are"
  echo "reopened for each use (\`docs/architecture.md\`, \"Inodes beyond the descriptor limit\"). Best of"
  echo "$META_ROUNDS rounds each, on fresh file systems, the order alternating; medians in brackets."
  echo
  echo "| workload | unit | coordfs, default limit | coordfs, $LOW_NOFILE descriptors | low limit / default |"
  echo "|---|---|---:|---:|---:|"
  local line name unit better what target
  for line in "${WORKLOADS[@]}"; do
    IFS='|' read -r name unit better what target <<<"$line"
    [[ "$FRESH_ROUND" == *" $name "* ]] || continue
    echo "| $name: $what | $unit | $(fmt "${LOWFD[$name:coordfs]:-}") ($(fmt "$(median_of "${LOWFD_ALL[$name:coordfs]:-}")")) | $(fmt "${LOWFD[$name:coordfs_lowfd]:-}") ($(fmt "$(median_of "${LOWFD_ALL[$name:coordfs_lowfd]:-}")")) | $(speed_ratio "${LOWFD[$name:coordfs_lowfd]:-}" "${LOWFD[$name:coordfs]:-}" "$better") |"
  done
  echo
}

section_memory() {
  echo "## Daemon memory"
  echo
  echo "Resident set (VmRSS) of each daemon before and after looking up $LOOKUP_FILES files (lstat of"
  echo "every file, 1,000 per folder). Target for coordfs: under 64 MiB after the lookups."
  echo
  echo "| daemon | RSS before | RSS after | failed lookups | target |"
  echo "|---|---:|---:|---:|---|"
  local t after verdict
  for t in "${TARGETS[@]}"; do
    [ "$t" = native ] && continue
    after=${RSS[$t:after]:-0}
    verdict="-"
    if [ "$t" = coordfs ]; then
      if [ "${LOOKUP_ERRORS[$t]:-1}" != 0 ]; then verdict="< 64 MiB: not shown (lookups failed)"
      elif [ "$after" -lt 65536 ]; then verdict="< 64 MiB: met"
      else verdict="< 64 MiB: missed"; fi
    fi
    echo "| $t | $(awk -v k="${RSS[$t:before]:-0}" 'BEGIN {printf "%.1f MiB", k/1024}') | $(awk -v k="$after" 'BEGIN {printf "%.1f MiB", k/1024}') | ${LOOKUP_ERRORS[$t]:-n/a} | $verdict |"
  done
  echo
  echo "RSS includes the clean, file-backed pages of the Swift libraries the daemon has run (about"
  echo "20 MiB, shared and reclaimable; a daemon started with \`coordfs mount\` faults them in itself)."
  echo
  echo "Open-file limit of this run: $(ulimit -n). A daemon that keeps a descriptor per looked-up inode"
  echo "fails lookups with EMFILE beyond it (failed lookups column)."
  echo
}

# Every suite `coordfs-bench` knows prints its own markdown section.
section_eventlog() {
  echo "## Event log through a real mount"
  echo
  echo "\`bench/eventlog.sh\`: the metadata workload with the log on against \`-o log=off\` (coordination on in"
  echo "both; three mounts, log off, log on and a second log-off mount as the control, run in a rotated order"
  echo "each round; the median of the per-round ratios), and event-to-screen latency of \`coordfs watch\`."
  echo "Target: log on costs at most 5% more; latency under 50 ms."
  echo
  # On a fresh file system of its own too: after the other workloads' deletions, ext4's inode
  # allocation (not the log) decided the times.
  fresh_fs "$WORK/eventlog" eventlog
  if ! BENCH_TMPDIR="$WORK/eventlog" COORDFS_BIN="$BIN" timeout 900 "$ROOT/bench/eventlog.sh" --header --rounds 15; then
    echo; echo "(bench/eventlog.sh failed)"
  fi
  echo
}

# The Prometheus endpoint's cost (docs/metrics.md): the same workload and method, metrics on vs off.
section_metrics() {
  echo "## Metrics endpoint through a real mount"
  echo
  echo "Target: at most 1% on the metadata workload. Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  fresh_fs "$WORK/metrics" metrics
  echo "\`coordfs-bench metrics\`: the nanoseconds the daemon's metrics recording takes per FUSE request (tight"
  echo "loops over the real recording code, best of 5, the workload's own mix of operations and events"
  echo "replayed), divided by the time per FUSE request of the metadata workload through an in-process"
  echo "mount with coordination, log and metrics on, in the same run: load cannot hide a cost this way."
  echo
  if [ -x "$BENCH_BIN" ]; then
    timeout 600 "$BENCH_BIN" metrics --dir "$WORK/metrics" 2>/dev/null || { echo; echo "(coordfs-bench metrics failed)"; }
  else
    echo "(coordfs-bench not built at $BENCH_BIN)"
  fi
  echo
  echo "\`bench/eventlog.sh --metrics\`: the metadata workload on a mount with \`-o metrics=127.0.0.1:0\`"
  echo "(scraped every second meanwhile) against mounts without (three mounts in a rotated order each round;"
  echo "the median of the per-round ratios; the second mount without is the noise row)."
  echo
  if ! BENCH_TMPDIR="$WORK/metrics" COORDFS_BIN="$BIN" timeout 900 "$ROOT/bench/eventlog.sh" --header --rounds 15 --metrics; then
    echo; echo "(bench/eventlog.sh --metrics failed)"
  fi
  echo
}

# A FUSE daemon that does no work against native and coordfs (`coordfs-bench floor`): what any
# daemon can reach on this kernel and machine for each of issue 23's targets (smallfiles, tar,
# `ls -l`, `grep -r`), on a file system of its own, and (floor+backing) what a daemon that stores
# the files in a real folder can reach for smallfiles and tar.
FLOOR_ROUNDS=${BENCH_FLOOR_ROUNDS:-2}
FLOOR_OPTS=${BENCH_FLOOR_OPTS:-}
section_floor() {
  if [ ! -x "$BENCH_BIN" ]; then echo "## The kernel's floor: a FUSE daemon that does no work"; echo; echo "(coordfs-bench not built at $BENCH_BIN)"; echo; return; fi
  fresh_fs "$WORK/floor" floor
  uring_offered
  say "bench: coordfs-bench floor"
  # shellcheck disable=SC2086
  if ! timeout 1200 "$BENCH_BIN" floor --dir "$WORK/floor" --files "$SMALL_FILES" --lsl-files "$LSL_FILES" --rounds "$FLOOR_ROUNDS" --script "$ROOT/bench/smallfiles.py" $FLOOR_OPTS; then
    echo; echo "(coordfs-bench floor failed)"
  fi
  echo
}

section_suites() {
  [ -x "$BENCH_BIN" ] || { echo "## Module benchmarks"; echo; echo "(coordfs-bench not built at $BENCH_BIN)"; echo; return; }
  local usage suites s
  usage=$("$BENCH_BIN" 2>&1 || true)
  suites=$(sed -n 's/^usage: coordfs-bench \([a-z|_-]*\).*/\1/p' <<<"$usage" | tr '|' ' ')
  for s in $suites; do
    [ "$s" = metrics ] && continue  # in section_metrics
    [ "$s" = floor ] && continue    # in section_floor
    say "bench: coordfs-bench $s"
    if ! timeout 300 "$BENCH_BIN" "$s"; then echo; echo "(coordfs-bench $s failed)"; fi
    echo
  done
}

section_how() {
  echo "## How to reproduce"
  echo
  echo "\`$COMMAND\` (it builds with \`swift build -c release\` first; \`bench/run.sh\` alone uses the"
  echo "existing build). Knobs: BENCH_DIR, BENCH_SIZE_MB, BENCH_RAND_SECONDS, BENCH_SMALL_FILES,"
  echo "BENCH_LOOKUP_FILES, BENCH_COORDFS_OPTS, BENCH_TARGETS, BENCH_ROUNDS, BENCH_META_ROUNDS, BENCH_FRESH_FS, BENCH_LOW_NOFILE, BENCH_TRANSPORT, BENCH_FLOOR_ROUNDS. Every target"
  echo "runs on the same disk (by default each on a fresh ext4 image of its own there), one after the"
  echo "other, with the page cache dropped before each read workload. \`bench/run.sh mount\`, \`kinds\`,"
  echo "\`transport\`, \`lowfd\` or \`floor\` runs one part alone and prints its sections."
  echo
}

main() {
  local started; started=$(date +%s)
  preflight "${1:-}"
  if [ "${1:-}" = floor ]; then   # only the kernel's floor, its section on stdout
    section_floor
    return
  fi
  if [ "${1:-}" = mount ]; then   # only the mount workloads, the machine and mount sections on stdout
    setup_targets
    run_workloads
    section_machine
    section_mount
    return
  fi
  if [ "${1:-}" = lowfd ]; then   # only the low-limit comparison, its section on stdout
    run_lowfd
    section_lowfd
    return
  fi
  if [ "${1:-}" = transport ]; then   # only the transport comparison, its section on stdout
    run_transport
    section_transport
    return
  fi
  if [ "${1:-}" = kinds ]; then   # only the request kinds, their section on stdout
    run_kinds
    section_kinds
    return
  fi
  setup_targets
  run_workloads
  run_kinds
  run_transport
  run_lowfd
  run_memory
  {
    echo "# Benchmarks"
    echo
    echo "Written by \`$COMMAND\` on $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); do not edit by hand."
    echo
    local s
    for s in "${SECTIONS[@]}"; do "$s"; done
    echo "_Run time: $(( $(date +%s) - started )) s._"
  } > "$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
  say "bench: wrote $OUT"
}

main "$@"
