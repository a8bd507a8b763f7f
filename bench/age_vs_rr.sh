#!/usr/bin/env bash
# age_vs_rr.sh: what AGE and the object catalog cost the proxy. Three
# dimmer-backends serve the demo site; one dimmer balances them with
# roundrobin, another with age (HTML scanned, sizes and pages learnt, potential
# load and in-flight work kept); wrk walks the site (pages then their objects,
# keep-alive) against each in turn, interleaved, and the medians are compared.
#   bench/age_vs_rr.sh [--build DIR] [--duration S] [--rounds R] [--conns C] [--pin]
# A third dimmer runs age with catalog.learn off, to isolate what the HTML
# scanner and the catalog cost. At the end, each server's share of the
# picks (with age's connection affinity, one per client connection) and of
# the requests is printed for every proxy, from its admin /stats: a policy
# that sends most of the load to one server shows there. Everything runs on
# 127.0.0.1 ports 18100-18109 and is stopped on exit.
set -u
BUILD=build DUR=5 ROUNDS=3 CONNS=50 PIN=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift ;; --duration) DUR=$2; shift ;; --rounds) ROUNDS=$2; shift ;;
    --conns) CONNS=$2; shift ;; --pin) PIN=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
HERE=$(cd "$(dirname "$0")" && pwd)
command -v wrk >/dev/null || { echo "missing: wrk (apt-get install wrk)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/agebench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SRV= WRK=
[ $PIN = 1 ] && SRV="taskset -c 1" WRK="taskset -c 0"
for i in 1 2 3; do
  $SRV "$BUILD/dimmer-backend" --listen 127.0.0.1:$((18100 + i)) --name b$i >/dev/null &
  PIDS+=($!)
done
conf() { # port balance [learn]
  cat <<C
workers: 1
listen: ["127.0.0.1:$1"]
admin: "127.0.0.1:$(($1 + 3))"
catalog: {learn: ${3:-true}}
pools:
  web:
    balance: $2
    servers:
      - {name: b1, address: "127.0.0.1:18101"}
      - {name: b2, address: "127.0.0.1:18102"}
      - {name: b3, address: "127.0.0.1:18103"}
C
}
conf 18104 roundrobin >"$TMP/rr.yaml"
conf 18105 age >"$TMP/age.yaml"
conf 18106 age false >"$TMP/age-nolearn.yaml"
$SRV "$BUILD/dimmer" -c "$TMP/rr.yaml" 2>"$TMP/rr.log" & PIDS+=($!)
$SRV "$BUILD/dimmer" -c "$TMP/age.yaml" 2>"$TMP/age.log" & PIDS+=($!)
$SRV "$BUILD/dimmer" -c "$TMP/age-nolearn.yaml" 2>"$TMP/age-nolearn.log" & PIDS+=($!)
for port in 18101 18104 18105 18106; do
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
done
# The walk: 50 pages, each followed by its objects.
for n in $(seq 0 49); do
  echo "/page/$n.html"
  curl -sf "http://127.0.0.1:18101/page/$n.objects"
done >"$TMP/paths"
export SITE_PATHS="$TMP/paths"
echo "site walk: $(wc -l <"$TMP/paths") paths; wrk -t1 -c$CONNS, ${DUR}s x $ROUNDS rounds"
run() { # port -> req/s
  $WRK wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$HERE/site.lua" "http://127.0.0.1:$1/" 2>&1 |
    awk '/^Requests\/sec/ { print $2 }'
}
run 18104 >/dev/null; run 18105 >/dev/null; run 18106 >/dev/null # warm-up: the age proxy learns here
RR=() AGE=() NOL=()
for r in $(seq "$ROUNDS"); do
  RR+=("$(run 18104)"); AGE+=("$(run 18105)"); NOL+=("$(run 18106)")
  echo "  round $r: roundrobin ${RR[-1]}, age ${AGE[-1]}, age without learning ${NOL[-1]} req/s"
done
med() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
m_rr=$(med "${RR[@]}") m_age=$(med "${AGE[@]}") m_nol=$(med "${NOL[@]}")
awk -v a="$m_age" -v r="$m_rr" -v n="$m_nol" 'BEGIN {
  printf "median req/s: roundrobin %.0f, age %.0f, age without learning %.0f\n", r, a, n
  printf "age / roundrobin %.3f; learning (HTML scan + catalog) costs %.1f%% of age throughput\n", a / r, (1 - a / n) * 100 }'
shares() { # name admin-port
  curl -sf "http://127.0.0.1:$2/stats" | python3 -c '
import json, sys
name = sys.argv[1]
s = json.load(sys.stdin)["pools"][0]["servers"]
for key in ("picks", "requests"):
    total = sum(x[key] for x in s) or 1
    print("  %-22s %-8s " % (name, key) + "  ".join(
        "%s %5.1f%%" % (x["name"], 100.0 * x[key] / total) for x in s) +
        "  (of %d)" % total)
' "$1"
}
echo "share of each server (all rounds and the warm-up):"
shares roundrobin 18107; shares age 18108; shares "age without learning" 18109
