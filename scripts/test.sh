#!/bin/sh
# The whole test suite: cmocka unit tests and loopback integration tests, once
# in the normal build and once under AddressSanitizer + UndefinedBehaviorSanitizer.
# In between, a Release build (-O3, what packagers build) and its unit tests, so
# that a warning or a bug that only the optimiser shows fails here too, and the
# same with clang, whose warnings differ from gcc's (cheap, so before the long
# sanitizer run). Then every libFuzzer driver for 12 s on its kept inputs
# (scripts/fuzz.sh: 60 s in all), and the Debian packages built, linted,
# installed, run and purged (scripts/package.sh).
set -eu
cd "$(dirname "$0")/.."
# prometheus: promtool checks GET /metrics (tests/integration/test_metrics.py);
# openssl: the TLS tests make their CA and certificates with it.
sh scripts/deps.sh python3 curl prometheus openssl
# chromium: the dashboard's test drives it headless; without it that test says it skips.
sh scripts/deps.sh chromium || echo "test.sh: chromium could not be installed: the dashboard's browser test will skip" >&2
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build && ctest --output-on-failure -j2)
sh scripts/build.sh build-release -DCMAKE_BUILD_TYPE=Release
(cd build-release && ctest --output-on-failure -j2 -L unit)
sh scripts/deps.sh clang
CC=clang sh scripts/build.sh build-clang -DCMAKE_BUILD_TYPE=Release
(cd build-clang && ctest --output-on-failure -j2 -L unit)
sh scripts/fuzz.sh 12
sh scripts/package.sh
sh scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DDM_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j2)
