#!/usr/bin/env bash
# One lane of `make test` (docs/testing.md, "How make test runs"): runs the tests of the built test
# bundle whose names match --filter and none of the --skip regular expressions, as
# `swift test --skip-build --filter ... --skip ...` would, but without SwiftPM: `swift test` holds
# the build's database locked for its whole run, so two of them cannot run at once.
#
#   scripts/test-lane.sh NAME [--filter RE] [--skip RE]...
#
# Names are matched as `swift test` matches them: `Module.Class/testMethod` (XCTest) and
# `Module.Suite/test()` (Swift Testing). The output is printed with `[NAME] ` in front of each line
# and kept, without it, in .build/test-NAME.log. Exits 0 when every selected test passed.
# TEST_BUNDLE: the test bundle (default .build/debug/coordfsPackageTests.xctest).
set -uo pipefail

name=${1:?usage: test-lane.sh NAME [--filter RE] [--skip RE]...}
shift
filter=""
skips=()
while [ $# -gt 0 ]; do
    case $1 in
        --filter) filter=${2:?--filter needs a regular expression}; shift 2 ;;
        --skip) skips+=("${2:?--skip needs a regular expression}"); shift 2 ;;
        *) echo "test-lane.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

bundle=${TEST_BUNDLE:-.build/debug/coordfsPackageTests.xctest}
log=.build/test-$name.log
[ -x "$bundle" ] || { echo "test-lane.sh: no test bundle at $bundle (swift build --build-tests)" >&2; exit 2; }

# The XCTest cases this lane runs, one `Module.Class/test` per line.
select_tests() {
    local tests
    tests=$("$bundle" --list-tests | grep -E '^[A-Za-z0-9_]+\.[A-Za-z0-9_]+/') || return 1
    [ -n "$filter" ] && { tests=$(grep -E -- "$filter" <<<"$tests") || true; }
    local skip
    for skip in "${skips[@]}"; do
        [ -n "$tests" ] || break
        tests=$(grep -vE -- "$skip" <<<"$tests") || true
    done
    printf '%s' "$tests"
}

run() {
    local status=0 tests
    tests=$(select_tests) || { echo "test-lane.sh: $bundle --list-tests failed"; return 2; }
    if [ -n "$tests" ]; then
        echo "$(wc -l <<<"$tests") XCTest cases"
        # One argument of comma-separated names per run of the bundle, as SwiftPM passes them, kept
        # well under the kernel's limit of 128 KiB for one argument.
        local chunk="" line
        while IFS= read -r line; do
            if [ $(( ${#chunk} + ${#line} )) -gt 60000 ]; then
                "$bundle" "$chunk" || status=1
                chunk=""
            fi
            chunk=${chunk:+$chunk,}$line
        done <<<"$tests"
        "$bundle" "$chunk" || status=1
    fi
    local args=(--testing-library swift-testing)
    [ -n "$filter" ] && args+=(--filter "$filter")
    local skip
    for skip in "${skips[@]}"; do args+=(--skip "$skip"); done
    NO_COLOR=1 "$bundle" "${args[@]}"
    case $? in
        0) ;;
        69) echo "(no Swift Testing tests in this lane)" ;;  # EX_UNAVAILABLE: none matched
        *) status=1 ;;
    esac
    return $status
}

# Whether the test process that made the temporary root of `$1` (its pid is the root's first part
# made of digits: coordfs-mounttests-PID-XXXXXX) still runs the test bundle: another lane's. Its
# dead mounts are its own to end: a test that killed its daemon on purpose unmounts the stale mount
# itself (once the lane "dev" ended during the lane "ring"'s MountCommandTests and unmounted the
# stale mount a test was about to look at).
owner_runs() {
    local top=${1#"$root"/} part parts
    top=${top%%/*}
    IFS=- read -ra parts <<<"$top"
    for part in "${parts[@]}"; do
        [[ $part =~ ^[0-9]+$ ]] || continue
        [ -r "/proc/$part/cmdline" ] && tr '\0' ' ' <"/proc/$part/cmdline" | grep -qF "$(basename "$bundle")"
        return
    done
    return 1
}

# A test process that crashed leaves the mounts of the daemons it ran in-process behind, dead (a
# stat gives ENOTCONN): unmount those under the tests' temporary roots, so no stale mount outlives
# the run. A live mount (another lane's, anyone else's) answers its stat and is left alone, and so
# is a dead one whose test process still runs (`owner_runs`).
unmount_dead() {
    local root=${COORDFS_TEST_TMPDIR:-/tmp} _dev mountpoint type _rest answer
    while read -r _dev mountpoint type _rest; do
        [ "$type" = fuse.coordfs ] || continue
        case $mountpoint in "$root"/coordfs-*) ;; *) continue ;; esac
        owner_runs "$mountpoint" && continue
        if ! answer=$(stat "$mountpoint" 2>&1) && [[ $answer == *"not connected"* ]]; then
            umount -l "$mountpoint" && echo "unmounted $mountpoint: its daemon died with a crashed test process"
        fi
    done </proc/mounts
}

described="$bundle"
[ -n "$filter" ] && described+=" --filter '$filter'"
for skip in "${skips[@]}"; do described+=" --skip '$skip'"; done
echo "[$name] $described"
run 2>&1 | tee "$log" | sed -u "s/^/[$name] /"
status=$?
unmount_dead | tee -a "$log" | sed -u "s/^/[$name] /"
exit $status
