#!/bin/sh
# The whole test suite: cmocka unit tests and loopback integration tests, once
# in the normal build and once under AddressSanitizer + UndefinedBehaviorSanitizer.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh python3 curl
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build && ctest --output-on-failure -j2)
sh scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DDM_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j2)
