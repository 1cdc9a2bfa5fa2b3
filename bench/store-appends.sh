#!/usr/bin/env bash
# Appends to a presented file through a real mount: what the document store writes per append
# (docs/document-store.md, "A growing log under a presenter"). By hand, not part of `make bench`.
# Each run makes a sparse image (ext4, or XFS with reflink=1) on a loop device under WORK, mounts
# it, writes an MB MiB text file into a backing folder on it, mounts coordfs over that folder,
# registers the presenter, appends N lines and prints one line: what the store's folder grew by
# (du), what the file system's used blocks grew by (df; du counts each clone in full), the daemon's
# /proc/PID/io write_bytes, the versions `coordfs versions` lists, how many versions were made
# (the store's largest version id), the presenter's base state, the time per append, the store
# events the presenter was told, and the load average. Everything is unmounted and detached at exit.
#
# Usage: bench/store-appends.sh FS MODE PRESENTER
#   FS         ext4 | xfs
#   MODE       echo (`echo line >> file` per append: an open, a write, a close)
#              held (one O_APPEND descriptor held open for every append)
#   PRESENTER  none | folder (`coordfs present` of the mount's root) | plain (`coordfs present FILE`:
#              no unsaved changes, the store reloads it after each change) | unsaved (`--unsaved`)
# Environment: N (50 appends), MB (64), SLEEP (seconds between appends of MODE echo, none),
#   COORDFS_BIN (default .build/debug/coordfs), WORK (default /var/tmp/coordfs-store-appends).
# Needs root, /dev/fuse, a free loop device, mkfs.xfs, sqlite3 and bc.
set -u
FS=$1 MODE=$2 PRES=$3 N=${N:-50} MB=${MB:-64}
BIN=${COORDFS_BIN:-$(cd "$(dirname "$0")/.." && pwd)/.build/debug/coordfs}
W=${WORK:-/var/tmp/coordfs-store-appends}/$FS-$MODE-$PRES
rm -rf "$W"; mkdir -p "$W/fs" "$W/mnt"
truncate -s 3G "$W/img"
if [ "$FS" = xfs ]; then mkfs.xfs -q -m reflink=1 "$W/img"; else mkfs.ext4 -q "$W/img"; fi
LOOP=$(losetup -f --show "$W/img")
PP=
cleanup() {
  [ -n "$PP" ] && kill "$PP" 2>/dev/null; wait 2>/dev/null
  "$BIN" unmount "$W/mnt" >/dev/null 2>&1 || umount -l "$W/mnt" 2>/dev/null
  sleep 0.5; umount "$W/fs" 2>/dev/null || umount -l "$W/fs"; losetup -d "$LOOP"; rm -f "$W/img"
}
trap cleanup EXIT
mount "$LOOP" "$W/fs" && mkdir "$W/fs/backing" || exit 1
head -c $((MB*1024*1024)) /dev/urandom | base64 -w 100 | head -c $((MB*1024*1024)) > "$W/fs/backing/big.log"
"$BIN" mount "$W/fs/backing" "$W/mnt" >/dev/null || exit 1
DPID=$(pgrep -f "coordfs mount $W/fs/backing" | head -1)
case $PRES in
  folder) "$BIN" present "$W/mnt" > "$W/pres.out" 2>&1 & PP=$! ;;
  plain) "$BIN" present "$W/mnt/big.log" > "$W/pres.out" 2>&1 & PP=$! ;;
  unsaved) "$BIN" present --unsaved "$W/mnt/big.log" > "$W/pres.out" 2>&1 & PP=$! ;;
  none) ;;
  *) echo "unknown presenter $PRES" >&2; exit 2 ;;
esac
sleep 2; sync
du0=$(du -sk "$W/fs/backing/.coordfs" | cut -f1); df0=$(df -k --output=used "$W/fs" | tail -1)
wb0=$(awk '/^write_bytes/{print $2}' "/proc/$DPID/io")
t0=$(date +%s%N)
if [ "$MODE" = echo ]; then
  for i in $(seq "$N"); do echo "line $i" >> "$W/mnt/big.log"; [ -n "${SLEEP:-}" ] && sleep "$SLEEP"; done
else
  exec 3>>"$W/mnt/big.log"
  for i in $(seq "$N"); do echo "line $i" >&3; done
  exec 3>&-
fi
t1=$(date +%s%N)
sleep 3; sync
du1=$(du -sk "$W/fs/backing/.coordfs" | cut -f1); df1=$(df -k --output=used "$W/fs" | tail -1)
wb1=$(awk '/^write_bytes/{print $2}' "/proc/$DPID/io")
made=$(sqlite3 "file:$W/fs/backing/.coordfs/store/metadata.sqlite?mode=ro" "SELECT COALESCE(MAX(id), 0) FROM version")
bases=$(sqlite3 "file:$W/fs/backing/.coordfs/store/metadata.sqlite?mode=ro" "SELECT COALESCE(group_concat(baseState), '-') FROM interest")
listed=$("$BIN" versions "$W/mnt/big.log" 2>/dev/null | tail -n +2 | wc -l)
told=$(grep -c documentChanged "$W/pres.out" 2>/dev/null; true)
printf "%-4s %-4s %-7s MB=%d N=%d  store du +%d KiB  fs used +%d KiB  daemon write_bytes +%d KiB  versions listed %d made %d  base %s  per append %.1f ms (SLEEP included)  told %s  load %s\n" \
  "$FS" "$MODE" "$PRES" "$MB" "$N" $((du1-du0)) $((df1-df0)) $(((wb1-wb0)/1024)) "$listed" "$made" "$bases" \
  "$(echo "($t1-$t0)/$N/1000000" | bc -l)" "${told:-0}" "$(cut -d' ' -f1 /proc/loadavg)"
