#!/bin/bash
# Soak (issue 11): DURATION seconds of mixed load through dimmer in front of
# three dimmer-backend, one of them SIGKILLed every 30 s in turn and restarted
# on its port 5 s later, while dimmer's RSS and descriptors are sampled every
# second. The load, all at once: dimmer-load's rate mode on /bytes/4096 over
# keep-alive connections; dimmer-load sessions with --keepalive 0 (a new
# connection per page and its objects); uploads (POST /echo, Content-Length
# and chunked, 1 KiB to 1 MiB, echo verified); WebSocket echo sessions, some
# held 20-40 s; slow clients (heads sent a byte every 200 ms, some finishing
# under timeouts.client_header and some getting 408; readers of 4 MiB at a few
# KiB/s). bench/soak.py is the python half (clients, sampler, report).
#   bash bench/soak.sh [--duration 600] [--warmup 60] [--out DIR] [--workers 2]
#                      [--dimmer PATH] [--rate 800] [--quick] [--help]
# Writes DIR/access.json (dimmer's access log; a hang's report names its
# client port), DIR/samples.csv (t,rss_kib,fds,requests_per_s), DIR/events.csv (the
# kills and restarts), the clients' JSON summaries, DIR/summary.txt and
# DIR/soak.png (gnuplot-nox). Exit status 1 if an exchange hung, a response
# was wrong, or dimmer died or stopped answering. All traffic on 127.0.0.1.
set -u
DUR=600 WARMUP=60 OUT= WORKERS=2 RATE=800 FAULT_EVERY=30 RESTART_AFTER=5
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIMMER=$ROOT/build/dimmer
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --duration) DUR=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --dimmer) DIMMER=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --quick) DUR=60 WARMUP=15; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
for v in "$DUR" "$WARMUP" "$WORKERS" "$RATE"; do
  case $v in ''|*[!0-9]*) echo "not a whole number: $v" >&2; exit 2 ;; esac
done
[ "$WARMUP" -lt "$DUR" ] || { echo "--warmup must be below --duration" >&2; exit 2; }
BUILD=$(dirname "$DIMMER")
BACKEND=$BUILD/dimmer-backend LOAD=$BUILD/dimmer-load
for b in "$DIMMER" "$BACKEND" "$LOAD"; do
  [ -x "$b" ] || { echo "missing: $b (build first)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "missing: python3" >&2; exit 1; }
[ -n "$OUT" ] || OUT=./soak-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
PY="python3 $ROOT/bench/soak.py"

PIDS=() BPID=() BPORT=()
cleanup() {
  trap '' INT TERM
  local p live
  for p in "${BPID[@]}" "${PIDS[@]}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null
  done
  for _ in $(seq 50); do  # at most 5 s for everything to stop, then SIGKILL
    live=0
    for p in "${BPID[@]}" "${PIDS[@]}"; do
      [ -n "$p" ] && kill -0 "$p" 2>/dev/null && live=1
    done
    [ $live = 0 ] && break
    sleep 0.1
  done
  for p in "${BPID[@]}" "${PIDS[@]}"; do
    [ -n "$p" ] && kill -9 "$p" 2>/dev/null
  done
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'echo "soak: interrupted" >&2; exit 130' INT TERM

now() { echo "$EPOCHREALTIME"; }
us() { local t=${1/./}; echo $((10#$t)); }  # seconds.micro as microseconds
since() { local d=$(($(us "$EPOCHREALTIME") - $(us "$1"))); printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }
# sleep_until T0 S: sleeps until S (whole) seconds after T0
sleep_until() {
  local d=$(($(us "$1") + $2 * 1000000 - $(us "$EPOCHREALTIME")))
  [ $d -gt 0 ] && sleep "$(printf '%d.%06d' $((d / 1000000)) $((d % 1000000)))"
}

# start_backend I PORT: dimmer-backend bI on PORT (0: a free one); sets BPID[I], BPORT[I]
start_backend() {
  local i=$1 port=$2 log=$OUT/backend$1.out
  : >"$log.now"
  "$BACKEND" --listen 127.0.0.1:"$port" --name b"$i" >"$log.now" 2>>"$OUT/backend$i.err" &
  BPID[i]=$!
  for _ in $(seq 100); do
    grep -q 'listening on' "$log.now" && break
    kill -0 "${BPID[i]}" 2>/dev/null || break
    sleep 0.05
  done
  cat "$log.now" >>"$log"
  BPORT[i]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log.now" | head -n 1)
  [ -n "${BPORT[i]}" ] && { [ "$port" = 0 ] || [ "${BPORT[i]}" = "$port" ]; }
}

for i in 1 2 3; do
  start_backend $i 0 || { echo "soak: backend b$i did not start" >&2; exit 1; }
done
cat >"$OUT/dimmer.yaml" <<EOF
workers: $WORKERS
listen: 127.0.0.1:0
admin: 127.0.0.1:0
error_log: $OUT/dimmer.err
access_log: {path: $OUT/access.json, format: json}
timeouts:
  connect: 1s
  client_header: 10s
  client_keepalive: 30s
  server_response: 10s
  client_send: 60s
  shutdown: 3s
limits:
  max_conns: 10000
pools:
  web:
    balance: roundrobin
    health_check: {path: /healthz, interval: 500ms, timeout: 300ms, rise: 2, fall: 1}
    passive: {max_fails: 1, fail_timeout: 2s}
    servers:
      - {name: b1, address: "127.0.0.1:${BPORT[1]}"}
      - {name: b2, address: "127.0.0.1:${BPORT[2]}"}
      - {name: b3, address: "127.0.0.1:${BPORT[3]}"}
EOF
"$DIMMER" -c "$OUT/dimmer.yaml" --ports-file "$OUT/ports" 2>>"$OUT/dimmer.err" &
DPID=$!
PIDS+=("$DPID")
for _ in $(seq 100); do
  [ -s "$OUT/ports" ] && break
  kill -0 "$DPID" 2>/dev/null || break
  sleep 0.05
done
PORT=$(awk '$1 == "listen" { sub(/.*:/, "", $3); print $3 }' "$OUT/ports" 2>/dev/null)
ADMIN=$(awk '$1 == "admin" { sub(/.*:/, "", $3); print $3 }' "$OUT/ports" 2>/dev/null)
[ -n "$PORT" ] && [ -n "$ADMIN" ] || { echo "soak: dimmer did not start ($OUT/dimmer.err)" >&2; exit 1; }
sleep 1  # the first health checks
echo "soak: dimmer pid $DPID on 127.0.0.1:$PORT (admin $ADMIN), backends ${BPORT[*]}, $DUR s, warm-up $WARMUP s, out $OUT"

# t = 0 is the start of the load; the sampler runs from -3 s (the idle
# baseline) to 15 s after the load (what is left once it is gone).
T0=$(awk -v a="$(now)" 'BEGIN { printf "%.6f", a + 3 }')
END=$(awk -v a="$T0" -v d="$DUR" 'BEGIN { printf "%.3f", a + d + 15 }')
$PY sample --pid "$DPID" --admin "$ADMIN" --t0 "$T0" --start -3 --until "$END" \
  --csv "$OUT/samples.csv" &
SAMPLER=$!
PIDS+=("$SAMPLER")
sleep_until "$T0" 0
URL=http://127.0.0.1:$PORT
printf '0,30\n%d,30\n' "$DUR" >"$OUT/sessions.csv"
LOADS=()
"$LOAD" --quiet --rate "$RATE" -c 20 -d "$DUR" --timeout 15000 \
  --json "$OUT/load_keepalive.json" --csv "$OUT/load_keepalive.csv" "$URL/bytes/4096" \
  >"$OUT/load_keepalive.out" 2>&1 &
LOADS+=($!)
"$LOAD" --quiet --pattern "$OUT/sessions.csv" --keepalive 0 --think 1000 --timeout 15000 \
  --json "$OUT/load_close.json" --csv "$OUT/load_close.csv" "$URL/" \
  >"$OUT/load_close.out" 2>&1 &
LOADS+=($!)
$PY uploads --port "$PORT" --duration "$DUR" --threads 4 --json "$OUT/uploads.json" \
  >"$OUT/uploads.out" 2>&1 &
LOADS+=($!)
$PY ws --port "$PORT" --duration "$DUR" --threads 8 --json "$OUT/ws.json" \
  >"$OUT/ws.out" 2>&1 &
LOADS+=($!)
$PY slow --port "$PORT" --duration "$DUR" --threads 8 --json "$OUT/slow.json" \
  >"$OUT/slow.out" 2>&1 &
LOADS+=($!)
PIDS+=("${LOADS[@]}")

# Backend faults: at FAULT_EVERY, 2 FAULT_EVERY, ... SIGKILL the next backend;
# RESTART_AFTER seconds later the same one again on its port.
echo "t,event,backend" >"$OUT/events.csv"
victim=0 down=0 killed_at=0 kills=0
for s in $(seq "$DUR"); do
  sleep_until "$T0" "$s"
  kill -0 "$DPID" 2>/dev/null || { echo "soak: dimmer died at ${s}s" >&2; break; }
  if [ "$down" != 0 ] && [ $((s - killed_at)) -ge "$RESTART_AFTER" ]; then
    ok=0
    for _ in 1 2 3 4 5; do
      start_backend "$down" "${BPORT[down]}" && { ok=1; break; }
      kill "${BPID[down]}" 2>/dev/null; wait "${BPID[down]}" 2>/dev/null
      sleep 0.5
    done
    [ $ok = 1 ] && ev=restart || ev=restart_failed
    echo "$(since "$T0"),$ev,b$down" >>"$OUT/events.csv"
    down=0
  fi
  if [ $((s % FAULT_EVERY)) = 0 ] && [ "$s" -lt "$DUR" ] && [ "$down" = 0 ]; then
    victim=$((victim % 3 + 1))
    kill -9 "${BPID[victim]}" 2>/dev/null
    wait "${BPID[victim]}" 2>/dev/null
    echo "$(since "$T0"),kill,b$victim" >>"$OUT/events.csv"
    down=$victim killed_at=$s kills=$((kills + 1))
  fi
  [ $((s % 60)) = 0 ] && echo "soak: ${s}s, $kills backend kills, $(tail -n 1 "$OUT/samples.csv")"
done
if [ "$down" != 0 ]; then
  start_backend "$down" "${BPORT[down]}" && ev=restart || ev=restart_failed
  echo "$(since "$T0"),$ev,b$down" >>"$OUT/events.csv"
fi

# The load ends by itself: every client is bounded; wait at most 150 s more.
for _ in $(seq 1500); do
  live=0
  for p in "${LOADS[@]}"; do kill -0 "$p" 2>/dev/null && live=1; done
  [ $live = 0 ] && break
  sleep 0.1
done
ALIVE=()
for p in "${LOADS[@]}"; do
  kill -0 "$p" 2>/dev/null && ALIVE+=("FAIL: a load process (pid $p) still running 150 s after the end")
done
wait "$SAMPLER" 2>/dev/null  # its tail: the descriptors once the load is gone
if kill -0 "$DPID" 2>/dev/null; then
  if probe=$($PY probe --port "$PORT" --admin "$ADMIN"); then
    ALIVE+=("dimmer: alive after the soak, answering ($probe)")
  else
    ALIVE+=("FAIL: dimmer alive but not answering ($probe)")
  fi
else
  wait "$DPID"
  ALIVE+=("FAIL: dimmer died (exit status $?; $OUT/dimmer.err)")
fi
args=()
for l in "${ALIVE[@]}"; do args+=(--alive "$l"); done
$PY report --dir "$OUT" --warmup "$WARMUP" --duration "$DUR" \
  --note "$WORKERS workers, rate $RATE/s, dimmer $DIMMER" "${args[@]}"
rc=$?
echo "soak: $OUT/summary.txt, $OUT/soak.png"
exit $rc
