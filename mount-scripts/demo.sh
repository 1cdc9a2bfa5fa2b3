#!/usr/bin/env bash
# `make run`: mount a demo folder and follow its live event log. Ctrl-C unmounts.
set -euo pipefail
CONFIG=${CONFIG:-release}
DEMO=${DEMO:-$PWD/demo}
BIN=${BIN:-$PWD/.build/$CONFIG/coordfs}
backing=$DEMO/backing
mnt=$DEMO/mnt
mkdir -p "$backing" "$mnt"
if [ ! -e "$backing/README.txt" ]; then
  printf 'This folder is shared through coordfs.\nEdit files under %s with any tool.\n' "$mnt" > "$backing/README.txt"
  mkdir -p "$backing/notes"
  printf 'first note\n' > "$backing/notes/todo.txt"
fi
# A mount left over from an earlier run (or a crashed one) is unmounted or cleaned first.
if grep -q " $mnt fuse.coordfs " /proc/mounts; then "$BIN" unmount --lazy "$mnt" || true; fi
"$BIN" mount "$backing" "$mnt"
web=""
# (Each step may fail, as when Ctrl-C reached `coordfs web` first: under set -e a failing kill
# would end the cleanup before the unmount.)
cleanup() { if [ -n "$web" ]; then kill "$web" 2>/dev/null || true; fi; "$BIN" unmount --lazy "$mnt" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
# The page (coordfs web): its launcher file (which keeps the token off a browser's command line)
# and its URL, with its token, to paste into a running browser, are printed beside the mount.
weblog=$(mktemp)
"$BIN" web "$mnt" > "$weblog" 2>&1 &
web=$!
url=""
launcher=""
for _ in $(seq 100); do launcher=$(grep -o 'file://[^ ]*' "$weblog" || true); [ -n "$launcher" ] && break; sleep 0.1; done
url=$(grep -o 'http://[^ ]*' "$weblog" || true)
rm -f "$weblog"
cat <<MSG
coordfs: $backing is mounted on $mnt
  the page:                   ${launcher:-(coordfs web did not start)}
                              (open that file in a browser; or paste ${url:-its URL} into a running one)
  try, in another terminal:   echo hello > $mnt/notes/todo.txt
                              $BIN present $mnt/notes/todo.txt
  the event log follows here; Ctrl-C unmounts.
MSG
if "$BIN" help watch >/dev/null 2>&1; then
  "$BIN" watch "$mnt"
else
  # Until the event log exists: keep the mount up until Ctrl-C.
  while grep -q " $mnt fuse.coordfs " /proc/mounts; do sleep 1; done
fi
