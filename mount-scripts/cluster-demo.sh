#!/usr/bin/env bash
# `make cluster-demo`: two coordfs nodes over one shared folder, coordinated through etcd
# (docs/cluster.md). Starts a one-member etcd on free loopback ports with a temporary data folder,
# mounts the demo folder twice (node a and node b, as two hosts over one NFS export would), shows
# `coordfs status --cluster`, then a presenter with unsaved changes on node A being asked when node B
# saves, and the conflict it raises on A. Then follows every node's steps (`watch --cluster`) until
# Ctrl-C; with CLUSTER_DEMO_NONINTERACTIVE=1 it ends there. Everything is unmounted and etcd
# stopped (its data removed) on exit, Ctrl-C or failure.
set -euo pipefail
CONFIG=${CONFIG:-release}
DEMO=${DEMO:-$PWD/demo-cluster}
BIN=${BIN:-$PWD/.build/$CONFIG/coordfs}
ETCD=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
shared=$DEMO/shared
mnt_a=$DEMO/node-a
mnt_b=$DEMO/node-b
[ -x "$BIN" ] || { echo "cluster-demo: no coordfs at $BIN (make build, or BIN=...)" >&2; exit 1; }
[ -x "$ETCD" ] || { echo "cluster-demo: no etcd (make deps installs etcd-server)" >&2; exit 1; }
mkdir -p "$shared" "$mnt_a" "$mnt_b"

etcd_pid=""
presenter_pid=""
etcd_data=$(mktemp -d /tmp/coordfs-cluster-demo-etcd.XXXXXX)
cleanup() {
  trap - EXIT INT TERM
  [ -n "$presenter_pid" ] && kill "$presenter_pid" 2>/dev/null || true
  for m in "$mnt_b" "$mnt_a"; do
    if grep -q " $m fuse.coordfs " /proc/mounts; then "$BIN" unmount "$m" 2>/dev/null || "$BIN" unmount --lazy "$m" 2>/dev/null || true; fi
  done
  if [ -n "$etcd_pid" ]; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  rm -rf "$etcd_data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Mounts left over from an earlier run are unmounted first.
for m in "$mnt_a" "$mnt_b"; do
  if grep -q " $m fuse.coordfs " /proc/mounts; then "$BIN" unmount --lazy "$m" || true; fi
done

# etcd: one member on two free loopback ports.
read -r client_port peer_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
endpoint=http://127.0.0.1:$client_port
"$ETCD" --name demo --data-dir "$etcd_data/member" \
  --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "demo=http://127.0.0.1:$peer_port" > "$etcd_data/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$endpoint" endpoint health >/dev/null 2>&1 && break
  kill -0 "$etcd_pid" 2>/dev/null || { echo "cluster-demo: etcd did not start:" >&2; cat "$etcd_data/etcd.log" >&2; exit 1; }
  sleep 0.1
done
echo "== etcd at $endpoint (pid $etcd_pid, data in $etcd_data)"

# Two nodes over one folder: each keeps its state in $shared/.coordfs/nodes/NODE. The backing
# watcher is off, as on network storage, where it sees no other host's writes: what node A learns
# of node B's writes comes from the cluster.
printf 'first draft\n' > "$shared/report.txt"
for node in a b; do
  m=$mnt_a; [ $node = b ] && m=$mnt_b
  "$BIN" mount "$shared" "$m" -o "cluster=$endpoint,node=$node,cluster_prefix=demo,backing_watcher=off"
  echo "== node $node: $shared on $m (state in $shared/.coordfs/nodes/$node)"
done

# A presenter on node A, with unsaved changes (an editor with a modified buffer).
presenter_out=$etcd_data/presenter.out
"$BIN" present "$mnt_a/report.txt" --unsaved > "$presenter_out" 2>&1 &
presenter_pid=$!
for _ in $(seq 100); do grep -q '^registered' "$presenter_out" && break; sleep 0.1; done
for _ in $(seq 100); do "$BIN" status "$mnt_b" --cluster | grep -q 'report.txt' && break; sleep 0.1; done

echo
echo "== coordfs status $mnt_b --cluster"
"$BIN" status "$mnt_b" --cluster

echo
echo "== node B saves report.txt: echo 'B's version' > $mnt_b/report.txt"
echo "B's version" > "$mnt_b/report.txt"
for _ in $(seq 100); do grep -q 'notification' "$presenter_out" && break; sleep 0.1; done
sleep 0.3
echo
echo "== what the presenter on node A heard (coordfs present $mnt_a/report.txt --unsaved):"
sed 's/^/   /' "$presenter_out"
echo
echo "== coordfs conflicts $mnt_a: B's save raised a conflict on A (A's store kept the version A's presenter had)"
"$BIN" conflicts "$mnt_a" || true
echo
echo "== node A shows B's bytes: $(cat "$mnt_a/report.txt")"

if [ "${CLUSTER_DEMO_NONINTERACTIVE:-0}" = 1 ]; then
  exit 0
fi
cat <<MSG

try, in another terminal:   echo hello > $mnt_a/notes.txt
                            $BIN present $mnt_b/notes.txt
                            $BIN status $mnt_a --cluster
every node's steps follow here (coordfs watch $mnt_b --cluster); Ctrl-C unmounts both and stops etcd.
MSG
"$BIN" watch "$mnt_b" --cluster || true
