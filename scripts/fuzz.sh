#!/bin/sh
# Runs every libFuzzer driver for SECONDS (default 12) on a copy of its kept
# inputs (fuzz/corpus/<driver>/), in a clang build with ASan and UBSan
# (build-fuzz/). A crash, leak, timeout or broken invariant fails the run and
# leaves the input in build-fuzz/crashes/; copy it into fuzz/corpus/<driver>/
# and it is replayed by the test suite from then on (fuzz/README.md).
#   sh scripts/fuzz.sh            the short run of the test suite (60 s in all)
#   sh scripts/fuzz.sh 3600       an hour per driver (the long run, bench/README.md)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-12}
sh scripts/deps.sh gcc make libc6-dev cmake libuv1-dev libssl-dev libyaml-dev libcmocka-dev \
    node-llhttp libsystemd-dev clang libclang-rt-14-dev
mkdir -p build-fuzz
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDM_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz-http-request fuzz-http-response \
    fuzz-html-scan fuzz-conf fuzz-report >build-fuzz/build.log 2>&1 ||
    { cat build-fuzz/build.log; exit 1; }
mkdir -p build-fuzz/crashes
status=0
for d in http-request http-response html-scan conf report; do
    work=build-fuzz/corpus/$d
    mkdir -p "$work"
    cp fuzz/corpus/$d/* "$work"/
    log=build-fuzz/fuzz-$d.log
    # -timeout: one input over 10 s is a hang; conf may resolve host names.
    if ./build-fuzz/fuzz-$d -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/$d- "$work" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
        echo "fuzz-$d: ${runs:-?} inputs in ${secs} s, $cov, corpus $(ls "$work" | wc -l): no crash"
    else
        echo "fuzz-$d: FAILED (log: $log; input under build-fuzz/crashes/)"
        tail -40 "$log"
        status=1
    fi
done
exit $status
