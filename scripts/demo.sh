#!/bin/sh
# Builds dimmer and runs the whole power loop on one machine, on the bundled
# default configuration (conf/dimmer.yaml): dimmer on 127.0.0.1:8080 with the
# boot-aware power policy, in front of four dimmer-backends on 9001-9004 that
# are nodes of a power-managed cluster (a 5 s boot delay, a power model, a
# sleep/wake control on 9101-9104, an agent reporting to 127.0.0.1:9902), and,
# unless --no-load is given, dimmer-load playing a rise and fall of users over
# and over (conf/demo-pattern.csv), so that servers are drained, slept, woken
# and brought back within a minute or two. The admin pages: the dashboard
# (GET /), GET /stats, GET /power and GET /metrics on 127.0.0.1:9901.
# Ctrl-C stops it all.
set -eu
cd "$(dirname "$0")/.."
load=1
for a in "$@"; do
    case "$a" in
    --no-load) load=0 ;;
    *)
        echo "usage: scripts/demo.sh [--no-load]" >&2
        exit 2
        ;;
    esac
done
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
pids=""
cleanup() {
    trap - EXIT INT TERM
    # The load first, then dimmer (it drains what is in flight), then the
    # backends, so that no request of the demo's ends in a 502 at the stop.
    rev=""
    for p in $pids; do rev="$p $rev"; done
    for p in $rev; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Ctrl-C signals the terminal's whole process group: the backends run in
# sessions of their own, so that they outlive dimmer's drain (the cleanup
# stops them, last) instead of dying with it and failing what it drains.
detach=""
if command -v setsid >/dev/null 2>&1; then
    detach=setsid
fi
for i in 1 2 3 4; do
    $detach build/dimmer-backend --listen "127.0.0.1:900$i" --name "backend-900$i" \
        --control "127.0.0.1:910$i" --capacity 50 --service-ms 20 --boot-ms 5000 \
        --idle-w 30 --full-w 70 --asleep-w 3 --booting-w 60 \
        --agent-to 127.0.0.1:9902 --agent-key-file conf/demo-agent.key >/dev/null &
    pids="$pids $!"
done
rm -f build/demo.ports
build/dimmer -c conf/dimmer.yaml --ports-file build/demo.ports &
dimmer=$!
pids="$pids $dimmer"
# The ports file is written once everything listens.
n=0
until [ -s build/demo.ports ]; do
    kill -0 "$dimmer" 2>/dev/null || exit 1
    n=$((n + 1))
    [ "$n" -gt 300 ] && { echo "demo: dimmer did not start" >&2; exit 1; }
    sleep 0.1
done
cat >&2 <<EOF

demo: http://127.0.0.1:8080/  admin: http://127.0.0.1:9901/stats  power: http://127.0.0.1:9901/power
      dimmer's log below shows each power decision with its inputs.
EOF
if [ "$load" = 1 ]; then
    echo "demo: load: dimmer-load sessions from conf/demo-pattern.csv, over and over (build/demo-load.log)" >&2
    (
        child=""
        trap 'kill $child 2>/dev/null; exit 0' TERM
        while :; do
            build/dimmer-load --pattern conf/demo-pattern.csv --think 2000 --quiet \
                http://127.0.0.1:8080/ &
            child=$!
            wait "$child" || sleep 1
        done
    ) >build/demo-load.log 2>&1 &
    pids="$pids $!"
fi
wait "$dimmer"
