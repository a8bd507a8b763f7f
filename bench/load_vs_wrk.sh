#!/bin/bash
# dimmer-load against wrk, same run, same origin: an nginx origin on 127.0.0.1
# (one worker, keep-alive, a 1 KiB file, as ../shared/bench/peers.sh's
# "direct" target) loaded in turns by wrk and by dimmer-load's closed mode,
# one thread and the same connections each, ROUNDS rounds; then dimmer-load's
# rate mode at 80% of its closed-mode median for RATE_SECONDS.
#   bash bench/load_vs_wrk.sh [--rounds 5] [--duration 6] [--conns 50]
#                             [--rate-seconds 30] [--pin] [--build build]
# Needs wrk and nginx (apt-get install wrk nginx). Prints a table of medians.
set -u
ROUNDS=5 DUR=6 CONNS=50 RATE_SECONDS=30 PIN=0 BUILD=build PORT=18100
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DUR=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --rate-seconds) RATE_SECONDS=$2; shift 2 ;;
    --pin) PIN=1; shift ;;
    --build) BUILD=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
LOAD=$BUILD/dimmer-load
for t in wrk nginx python3; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install wrk nginx)" >&2; exit 1; }
done
[ -x "$LOAD" ] || { echo "missing: $LOAD (build first)" >&2; exit 1; }
PIN_CLI= PIN_SRV=
[ "$PIN" = 1 ] && PIN_CLI="taskset -c 0" PIN_SRV="taskset -c 1"
TMP=$(mktemp -d)
NGINX_PID=
cleanup() { [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir -p "$TMP/www"
head -c 1024 /dev/zero | tr '\0' a >"$TMP/www/1k"
cat >"$TMP/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 9000; }
http {
  access_log off;
  client_body_temp_path $TMP/cb; proxy_temp_path $TMP/pt; fastcgi_temp_path $TMP/ft;
  uwsgi_temp_path $TMP/ut; scgi_temp_path $TMP/st;
  keepalive_timeout 75s; keepalive_requests 1000000;
  server { listen 127.0.0.1:$PORT; root $TMP/www; location / { } }
}
EOF
$PIN_SRV nginx -p "$TMP" -e "$TMP/error.log" -c "$TMP/nginx.conf" &
NGINX_PID=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break
  sleep 0.05
done
URL=http://127.0.0.1:$PORT/1k
us() { awk '{ v = $1; if (v ~ /us$/) print v + 0; else if (v ~ /ms$/) print v * 1000; else if (v ~ /s$/) print v * 1e6; else print v }'; }
echo "round,tool,rps,p50_us,p90_us,p99_us" >"$TMP/results.csv"
for r in $(seq "$ROUNDS"); do
  $PIN_CLI wrk -t1 -c"$CONNS" -d"$DUR"s --latency "$URL" >"$TMP/wrk.out" 2>&1
  rps=$(awk '/^Requests\/sec/ { print $2 }' "$TMP/wrk.out")
  p50=$(awk '$1 == "50%" { print $2 }' "$TMP/wrk.out" | us)
  p90=$(awk '$1 == "90%" { print $2 }' "$TMP/wrk.out" | us)
  p99=$(awk '$1 == "99%" { print $2 }' "$TMP/wrk.out" | us)
  echo "$r,wrk,$rps,$p50,$p90,$p99" >>"$TMP/results.csv"
  $PIN_CLI "$LOAD" --quiet --threads 1 -c "$CONNS" -d "$DUR" --json "$TMP/load.json" "$URL" >/dev/null
  python3 - "$TMP/load.json" "$r" >>"$TMP/results.csv" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); l = s["latency_ms"]
print("%s,dimmer-load,%.1f,%d,%d,%d" % (sys.argv[2], s["responses_per_s"], l["p50"] * 1000,
                                         l["p90"] * 1000, l["p99"] * 1000))
EOF
  tail -n 2 "$TMP/results.csv" >&2
done
python3 - "$TMP/results.csv" >"$TMP/summary.txt" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for tool in ("wrk", "dimmer-load"):
    rs = [r for r in rows if r["tool"] == tool]
    med[tool] = {k: statistics.median(float(r[k]) for r in rs) for k in ("rps", "p50_us", "p90_us", "p99_us")}
print("%-12s %10s %9s %9s %9s" % ("tool", "req/s", "p50 ms", "p90 ms", "p99 ms"))
for tool, m in med.items():
    print("%-12s %10.0f %9.3f %9.3f %9.3f" % (tool, m["rps"], m["p50_us"] / 1000, m["p90_us"] / 1000, m["p99_us"] / 1000))
w, d = med["wrk"], med["dimmer-load"]
print("dimmer-load / wrk: req/s %.3f, p50 %.3f, p90 %.3f, p99 %.3f" %
      (d["rps"] / w["rps"], d["p50_us"] / w["p50_us"], d["p90_us"] / w["p90_us"], d["p99_us"] / w["p99_us"]))
print("rate %.0f" % (0.8 * d["rps"]))
EOF
cat "$TMP/summary.txt"
RATE=$(awk '/^rate/ { print $2 }' "$TMP/summary.txt")
echo
echo "rate mode: $RATE requests/s (80% of the closed-mode median) for $RATE_SECONDS s"
$PIN_CLI "$LOAD" --quiet --threads 1 -c "$CONNS" --rate "$RATE" -d "$RATE_SECONDS" \
  --json "$TMP/rate.json" --csv "$TMP/rate.csv" "$URL" >/dev/null
python3 - "$TMP/rate.json" "$RATE" "$TMP/rate.csv" <<'EOF'
import csv, json, sys
s = json.load(open(sys.argv[1])); asked = float(sys.argv[2])
got = s["responses_per_s"]
secs = [int(r["responses"]) for r in csv.DictReader(open(sys.argv[3]))]
print("held %.1f/s of %.0f asked: %.3f%% off; per second min %d max %d; p99 %.3f ms" %
      (got, asked, 100 * abs(got - asked) / asked, min(secs), max(secs), s["latency_ms"]["p99"]))
EOF
