#!/bin/sh
# Builds dimmer and runs it on the bundled default configuration
# (conf/dimmer.yaml): proxy on 127.0.0.1:8080 in front of three demo backends
# on 127.0.0.1:9001-9003, admin page on 127.0.0.1:9901. Ctrl-C stops it all.
set -eu
cd "$(dirname "$0")/.."
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
pids=""
cleanup() {
    trap - EXIT INT TERM
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for port in 9001 9002 9003; do
    build/dimmer-backend --listen "127.0.0.1:$port" --name "backend-$port" &
    pids="$pids $!"
done
echo "dimmer: http://127.0.0.1:8080/  admin: http://127.0.0.1:9901/stats" >&2
build/dimmer -c conf/dimmer.yaml &
pids="$pids $!"
wait "$!"
