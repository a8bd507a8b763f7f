#!/bin/sh
# scripts/build.sh DIR [cmake options...]: installs the build dependencies when
# missing, then configures and builds dimmer into DIR.
set -eu
cd "$(dirname "$0")/.."
dir=$1
shift
sh scripts/deps.sh gcc make libc6-dev cmake libuv1-dev libssl-dev libyaml-dev libcmocka-dev \
    node-llhttp libsystemd-dev
cmake -S . -B "$dir" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
