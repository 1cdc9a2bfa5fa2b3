#!/usr/bin/env bash
# Event-log benchmark through real mounts (issue 7), self-contained; prints markdown table rows:
#   1. the metadata workload (create + stat + unlink of N files) with the log on vs -o log=off,
#      coordination on in both: the cost of logging every coordination step. A second log-off mount
#      is the control: its difference from the first is this machine's noise. Each round runs the
#      three in a rotated order; the result is the median of the per-round ratios;
#   2. event-to-screen latency of `coordfs watch`: from just before a create through the mount
#      to its record arriving on the watcher's stdout (a pipe), p50 / p99 / max.
# With --metrics, instead: the same workload with `-o metrics=127.0.0.1:0` (scraped every second
# meanwhile, as Prometheus would) against no metrics, the log on in both (docs/metrics.md).
#
# Usage: bench/eventlog.sh [--files N] [--rounds R] [--samples S] [--header] [--metrics]
# Environment: COORDFS_BIN (default .build/release/coordfs), BENCH_TMPDIR (default /tmp).
# Needs root (or fusermount3 rights), /dev/fuse and python3.
set -euo pipefail

files=10000 rounds=15 samples=200 header=0 metrics=0
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --header) header=1; shift ;;
    --metrics) metrics=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "eventlog.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${COORDFS_BIN:-$here/.build/release/coordfs}
[ -x "$bin" ] || { echo "eventlog.sh: no coordfs binary at $bin (make build, or set COORDFS_BIN)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "eventlog.sh: python3 is needed" >&2; exit 1; }

work=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/coordfs-bench-eventlog-XXXXXX")
watcher="" scraper=""
sides=(off on control)
# What "off" and "on" (and the control, as off) mount with.
if [ "$metrics" = 1 ]; then off_opts=() on_opts=(-o metrics=127.0.0.1:0); else off_opts=(-o log=off) on_opts=(); fi
cleanup() {
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null || true
  [ -n "$scraper" ] && kill "$scraper" 2>/dev/null || true
  for s in "${sides[@]}"; do
    m="$work/mnt-$s"
    if grep -q " $m fuse" /proc/mounts 2>/dev/null; then "$bin" unmount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
declare -A pid=()
for s in "${sides[@]}"; do
  mkdir -p "$work/back-$s" "$work/mnt-$s"
  if [ "$s" = on ]; then "$bin" mount "$work/back-$s" "$work/mnt-$s" "${on_opts[@]}"; else "$bin" mount "$work/back-$s" "$work/mnt-$s" "${off_opts[@]}"; fi
  pid[$s]=$(pgrep -n -f "coordfs mount $work/back-$s $work/mnt-$s")
  [ -n "${pid[$s]}" ] || { echo "eventlog.sh: cannot find the daemon of $work/mnt-$s" >&2; exit 1; }
done

# One round: N creates, then N stats, then N unlinks, in a fresh folder; prints seconds.
workload() {
  python3 - "$1" "$files" <<'PY'
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
d = os.path.join(root, "w%d" % os.getpid())
os.mkdir(d)
names = [os.path.join(d, "f%05d" % i) for i in range(n)]
t = time.perf_counter()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
for p in names:
    os.stat(p)
for p in names:
    os.unlink(p)
elapsed = time.perf_counter() - t
os.rmdir(d)
print("%.4f" % elapsed)
PY
}

# Before each run: nothing dirty and no cached inode-table blocks, so that ext4 does not scan past
# the inodes the previous round deleted (see bench/run.sh).
settle() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# CPU time (user + system, clock ticks) a daemon has used so far.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

if [ "$metrics" = 1 ]; then
  # Prometheus's part: a scrape every second while the rounds run.
  port=$(sed -n 's|.*metrics at http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$work/back-on/.coordfs/daemon.log" | tail -1)
  [ -n "$port" ] || { echo "eventlog.sh: the metrics daemon did not say its port" >&2; exit 1; }
  python3 - "$port" <<'PY' &
import socket, sys, time
while True:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
    time.sleep(1)
PY
  scraper=$!
fi

# Rounds of one run per mount, the order rotated each round, so that neither the position in a round
# nor a slow stretch of the host favours one side. Each run also measures its daemon's CPU time.
declare -A wall=() cpu=()
for s in "${sides[@]}"; do workload "$work/mnt-$s" >/dev/null; done   # warm-up
for r in $(seq "$rounds"); do
  for k in 0 1 2; do
    s=${sides[$(( (k + r) % 3 ))]}
    settle; t0=$(ticks "${pid[$s]}")
    wall[$s]+="$(workload "$work/mnt-$s") "
    cpu[$s]+="$(( $(ticks "${pid[$s]}") - t0 )) "
  done
done
records=$("$bin" log "$work/mnt-on" --info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nextSeq"] - 1)')

python3 - "$files" "$records" "$header" "$(getconf CLK_TCK)" "${wall[off]}" "${wall[on]}" "${wall[control]}" \
  "${cpu[off]}" "${cpu[on]}" "$metrics" <<'PY'
import statistics, sys
files, records, header, hz = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
off, on, control = ([float(x) for x in a.split()] for a in sys.argv[5:8])
cpu_off, cpu_on = ([int(x) / hz for x in a.split()] for a in sys.argv[8:10])
metrics = sys.argv[10] == "1"
if header:
    print("| measurement | result |")
    print("|---|---|")
def paired(a, b):  # median of the per-round ratios a/b, as a percentage
    return (statistics.median(x / y for x, y in zip(a, b)) - 1) * 100
n = len(off)
if metrics:
    print("| metadata workload, %s files create+stat+unlink, `-o metrics=` (scraped every second) vs none (%d rounds): "
          "median of the per-round ratios; best against best | **%+.1f%%**; %+.1f%% (best: none %.3f s, metrics %.3f s; median: none %.3f s, metrics %.3f s) |"
          % (format(files, ","), n, paired(on, off), (min(on) / min(off) - 1) * 100,
             min(off), min(on), statistics.median(off), statistics.median(on)))
    print("| the same for a second mount without metrics against the first (this machine's noise) | %+.1f%%; %+.1f%% |"
          % (paired(control, off), (min(control) / min(off) - 1) * 100))
    co, cn = statistics.median(cpu_off), statistics.median(cpu_on)
    print("| daemon CPU time per round (user + system, median of %d) | none %.2f s, metrics %.2f s, %+.1f%% |"
          % (n, co, cn, (cn / co - 1) * 100 if co else 0))
    sys.exit(0)
print("| metadata workload, %s files create+stat+unlink, log on vs `-o log=off` (%d rounds, %.1f records per file): "
      "median of the per-round ratios; best against best | **%+.1f%%**; %+.1f%% (best: off %.3f s, on %.3f s; median: off %.3f s, on %.3f s) |"
      % (format(files, ","), n, records / (files * (n + 1)), paired(on, off), (min(on) / min(off) - 1) * 100,
         min(off), min(on), statistics.median(off), statistics.median(on)))
print("| the same for a second `-o log=off` mount against the first (this machine's noise) | %+.1f%%; %+.1f%% |"
      % (paired(control, off), (min(control) / min(off) - 1) * 100))
co, cn = statistics.median(cpu_off), statistics.median(cpu_on)
per_record = (cn - co) / (records / (n + 1)) * 1e6 if records else 0
print("| daemon CPU time per round (user + system, median of %d) | off %.2f s, on %.2f s, %+.1f%%: %.1f µs per record |"
      % (n, co, cn, (cn / co - 1) * 100 if co else 0, per_record))
PY

[ "$metrics" = 1 ] && exit 0

# Latency: a watcher on a pipe, one create at a time.
python3 - "$bin" "$work/mnt-on" "$samples" <<'PY'
import os, select, subprocess, sys, time
bin, mnt, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = subprocess.Popen([bin, "watch", mnt, "--json", "--kind", "intentRequested"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
fd = w.stdout.fileno()
buf = b""
def wait_for(token, timeout=5.0):
    global buf
    end = time.perf_counter() + timeout
    while token not in buf:
        left = end - time.perf_counter()
        if left <= 0:
            return None
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            buf += chunk
    t = time.perf_counter()
    buf = buf[buf.index(token) + len(token):]
    return t
# The watcher shows only records appended after it opened: poke until it does.
for i in range(100):
    p = os.path.join(mnt, "poke%d" % i)
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)); os.unlink(p)
    if wait_for(b'"/poke%d"' % i, 0.1) is not None:
        break
lat = []
for i in range(samples):
    name = "lat%05d" % i
    t0 = time.perf_counter()
    os.close(os.open(os.path.join(mnt, name), os.O_CREAT | os.O_WRONLY, 0o644))
    t1 = wait_for(b'"/' + name.encode() + b'"')
    if t1 is not None:
        lat.append((t1 - t0) * 1000)
    os.unlink(os.path.join(mnt, name))
    time.sleep(0.01)
w.terminate(); w.wait()
lat.sort()
if not lat:
    print("| `coordfs watch` event-to-screen latency | no record arrived |")
else:
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
    print("| `coordfs watch` event-to-screen latency (create → line on a pipe), p50 / p99 / max of %d "
          "| %.2f / %.2f / %.2f ms%s |" % (len(lat), q(0.5), q(0.99), lat[-1],
          "" if len(lat) == samples else " (%d lost)" % (samples - len(lat))))
PY
