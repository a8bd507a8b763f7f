#!/bin/sh
# Runs the test suite of each build directory N times in a row (ctest -j2, as
# scripts/test.sh does) and stops at the first failing run, printing its log.
#   sh tests/repeat.sh N [BUILD_DIR...]      (default: build build-asan)
# A flaky test shows up here long before it shows up in CI.
set -u
cd "$(dirname "$0")/.."
n=${1:-50}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- build build-asan
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for dir in "$@"; do
    [ -f "$dir/CTestTestfile.cmake" ] || { echo "$dir: not a build directory" >&2; exit 2; }
    start=$(date +%s)
    i=1
    while [ "$i" -le "$n" ]; do
        if ! (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
              ctest --output-on-failure -j2) >"$log" 2>&1; then
            echo "$dir: run $i of $n FAILED:"
            grep -E "Failed|\*\*\*|Error|assert" "$log" | head -40
            echo "(full log kept in $dir/repeat-failure.log)"
            cp "$log" "$dir/repeat-failure.log"
            exit 1
        fi
        i=$((i + 1))
    done
    echo "$dir: $n of $n runs passed in $(($(date +%s) - start)) s"
done
