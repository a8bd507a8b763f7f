#!/bin/sh
# Builds the Debian packages (dpkg-buildpackage -us -uc -b in build-deb/),
# checks them with lintian (no error allowed), installs them on this
# machine, runs the service (through systemd when it is PID 1, else the way
# the unit does: the installed binary on the installed config, as root,
# dropping to the dimmer user), scrapes /metrics, and purges the packages.
#   sh scripts/package.sh           all of it
#   sh scripts/package.sh --build   the .debs and lintian only
set -eu
cd "$(dirname "$0")/.."
only_build=0
[ "${1:-}" = "--build" ] && only_build=1
sh scripts/deps.sh dpkg-dev debhelper lintian fakeroot adduser curl python3 gcc make libc6-dev cmake \
    libuv1-dev libssl-dev libyaml-dev libcmocka-dev node-llhttp libsystemd-dev

# A copy of the tree (what is checked out, edits included, no build folders):
# dpkg-buildpackage writes the .debs next to the source directory.
rm -rf build-deb
mkdir -p build-deb/dimmer-0.1.0
tar --exclude='./build*' --exclude='./.git' -cf - . | tar -C build-deb/dimmer-0.1.0 -xf -
(cd build-deb/dimmer-0.1.0 && dpkg-buildpackage -us -uc -b -j"$(nproc)") >build-deb/build.log 2>&1 ||
    { tail -60 build-deb/build.log; echo "package.sh: dpkg-buildpackage failed" >&2; exit 1; }
ls build-deb/*.deb
# Errors fail; warnings and the rest are printed for whoever reads the log.
lintian --fail-on error --info build-deb/*.changes
echo "package.sh: lintian: no error"
[ $only_build = 1 ] && exit 0

pids=""
tmp=$(mktemp -d)
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    if [ "${started_unit:-0}" = 1 ]; then systemctl stop dimmer.service || true; fi
    dpkg --purge dimmer dimmer-agent dimmer-tools >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

dpkg --purge dimmer dimmer-agent dimmer-tools >/dev/null 2>&1 || true
dpkg -i build-deb/dimmer_*.deb build-deb/dimmer-agent_*.deb build-deb/dimmer-tools_*.deb
for f in /usr/sbin/dimmer /usr/sbin/dimmer-agent /usr/bin/dimmer-load /usr/bin/dimmer-sim \
    /usr/bin/dimmer-backend /etc/dimmer/dimmer.yaml /lib/systemd/system/dimmer.service \
    /usr/share/man/man8/dimmer.8.gz /usr/share/man/man5/dimmer.yaml.5.gz \
    /etc/logrotate.d/dimmer; do
    [ -e "$f" ] || { echo "package.sh: $f not installed" >&2; exit 1; }
done
getent passwd dimmer >/dev/null || { echo "package.sh: no dimmer user" >&2; exit 1; }
/usr/sbin/dimmer -t -c /etc/dimmer/dimmer.yaml
man -l /usr/share/man/man8/dimmer.8.gz 2>/dev/null | head -3 || true

# A backend for the installed configuration's pool.
/usr/bin/dimmer-backend --listen 127.0.0.1:0 --name app1 >"$tmp/backend.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 100); do grep -q "listening on" "$tmp/backend.out" && break; sleep 0.05; done
bport=$(sed -n 's/.* listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/backend.out" | head -1)
[ -n "$bport" ] || { echo "package.sh: the backend did not start" >&2; exit 1; }

if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then
    # The real thing: the installed config as it is (its fixed ports must be free).
    sed -i "s/127.0.0.1:8000/127.0.0.1:$bport/" /etc/dimmer/dimmer.yaml
    systemctl restart dimmer.service
    started_unit=1
    systemctl is-active dimmer.service
    admin=127.0.0.1:9901
    front=127.0.0.1:8080
    pid=$(systemctl show -p MainPID --value dimmer.service)
else
    # No systemd here: what the unit's ExecStart does, on the installed config
    # with its ports made free ones (port 0) and read back from a ports file.
    echo "package.sh: systemd is not PID 1 here: running ExecStart by hand"
    sed -e "s/127.0.0.1:8000/127.0.0.1:$bport/" -e 's/127.0.0.1:8080/127.0.0.1:0/' \
        -e 's/127.0.0.1:9901/127.0.0.1:0/' /etc/dimmer/dimmer.yaml >"$tmp/dimmer.yaml"
    /usr/sbin/dimmer -t -c "$tmp/dimmer.yaml"
    /usr/sbin/dimmer -c "$tmp/dimmer.yaml" --ports-file "$tmp/ports" >"$tmp/dimmer.out" 2>&1 &
    pid=$!
    pids="$pids $pid"
    for _ in $(seq 100); do [ -s "$tmp/ports" ] && break; sleep 0.05; done
    front=$(awk '$1 == "listen" {print $3; exit}' "$tmp/ports")
    admin=$(awk '$1 == "admin" {print $3; exit}' "$tmp/ports")
    [ -n "$front" ] && [ -n "$admin" ] || { cat "$tmp/dimmer.out"; exit 1; }
fi
for _ in $(seq 100); do grep -q "running as user dimmer" /var/log/dimmer/error.log && break; sleep 0.05; done
grep "running as user dimmer" /var/log/dimmer/error.log
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" = "$(id -u dimmer)" ] || { echo "package.sh: dimmer runs as uid $uid" >&2; exit 1; }
curl -sf "http://$front/bytes/10" >/dev/null
curl -sf "http://$admin/metrics" >"$tmp/metrics"
grep -E '^dimmer_build_info\{version="0.1.0"\} 1$' "$tmp/metrics"
grep -E '^dimmer_server_requests_total\{pool="web",server="app1"\} 1$' "$tmp/metrics"
if command -v promtool >/dev/null; then
    promtool check metrics <"$tmp/metrics"
    echo "package.sh: promtool check metrics: ok"
fi
for _ in $(seq 100); do grep -q '"GET /bytes/10 HTTP/1.1" 200 10' /var/log/dimmer/access.log && break; sleep 0.05; done
tail -1 /var/log/dimmer/access.log
echo "package.sh: installed, served, scraped; purging"
