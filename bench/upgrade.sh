#!/usr/bin/env bash
# upgrade.sh - what wrk sees while a proxy replaces itself under load.
#
# One nginx origin on loopback; in front of it dimmer, HAProxy and nginx,
# each told to replace itself --reloads times during every wrk run:
#   dimmer   SIGUSR2: a new dimmer takes the listening sockets over, the old
#            one drains (man dimmer(8), SIGNALS)
#   haproxy  master-worker (-W) with its listeners exposed to the new worker
#            (stats socket ... expose-fd listeners), SIGUSR2 to the master:
#            HAProxy's documented seamless reload
#   nginx    SIGHUP to the master: new workers, the old ones drain
# Runs are interleaved (dimmer, haproxy, nginx, dimmer, ...); printed per
# target: the median req/s, and wrk's socket errors (connect, read, write,
# timeout) and non-2xx answers summed over the rounds. Needs wrk, haproxy and
# nginx (apt-get install wrk haproxy nginx); benchmarks only, never CI.
#
#   bench/upgrade.sh DIMMER_BINARY [--rounds R] [--duration S] [--reloads K]
#                    [--conns C] [--close]
# --close: a new connection for every request (wrk -H "Connection: close").
set -u

DIMMER=${1:?usage: upgrade.sh DIMMER_BINARY [--rounds R] [--duration S] [--reloads K] [--conns C] [--close]}
shift
ROUNDS=5 DUR=8 RELOADS=3 CONNS=50 CLOSE=0 BASE=${BASE:-18100}
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift ;;  --duration) DUR=$2; shift ;;
    --reloads) RELOADS=$2; shift ;; --conns) CONNS=$2; shift ;;
    --close) CLOSE=1 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done
for t in wrk haproxy nginx timeout; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install wrk haproxy nginx)" >&2; exit 1; }
done
TMP=$(mktemp -d)
chmod 755 "$TMP" # nginx's workers (nobody, when started as root) read the files
PIDS=()
# The pid that serves now: dimmer's changes at each SIGUSR2 (the ready line names it).
dimmer_pid() {
  local last
  last=$(grep -o 'the new process (pid [0-9]*) is ready' "$TMP/dimmer.log" | tail -1 | grep -o '[0-9]*')
  echo "${last:-$(head -1 "$TMP/dimmer.pid")}"
}
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  # dimmer's replacement is no child of ours: the one that serves now.
  [ -f "$TMP/dimmer.log" ] && kill "$(dimmer_pid)" 2>/dev/null
  pkill -P $$ 2>/dev/null
  sleep 0.5
  rm -rf "$TMP"
}
trap cleanup EXIT

ORIGIN=$BASE DPORT=$((BASE + 1)) HPORT=$((BASE + 2)) NPORT=$((BASE + 3))
for p in $ORIGIN $DPORT $HPORT $NPORT; do
  if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p" 2>/dev/null; then
    echo "port $p is in use: another run left something behind? (BASE=... picks others)" >&2
    exit 1
  fi
done
nginx_conf() { # dir http-block-body
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 9000; }
http {
  access_log off;
  client_body_temp_path $1/cb; proxy_temp_path $1/pt; fastcgi_temp_path $1/ft;
  uwsgi_temp_path $1/ut; scgi_temp_path $1/st;
  keepalive_timeout 75s; keepalive_requests 1000000;
  $2
}
EOF
}
mkdir -p "$TMP/www"
head -c 1024 /dev/zero | tr '\0' a >"$TMP/www/1k"
nginx_conf "$TMP/origin" "server { listen 127.0.0.1:$ORIGIN; root $TMP/www; location / { } }"
nginx -p "$TMP/origin" -e "$TMP/origin/error.log" -c "$TMP/origin/nginx.conf" &
PIDS+=($!)

cat >"$TMP/dimmer.yaml" <<EOF
workers: 1
listen: [127.0.0.1:$DPORT]
timeouts: {shutdown: 10s}
pools:
  web:
    servers:
      - {name: o, address: "127.0.0.1:$ORIGIN"}
EOF
"$DIMMER" -c "$TMP/dimmer.yaml" >"$TMP/dimmer.log" 2>&1 &
PIDS+=($!)
echo $! >"$TMP/dimmer.pid"

cat >"$TMP/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 9000
  stats socket $TMP/haproxy.sock mode 600 expose-fd listeners level admin
defaults
  mode http
  maxconn 9000
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$HPORT
  default_backend be
backend be
  server o 127.0.0.1:$ORIGIN
EOF
haproxy -W -db -f "$TMP/haproxy.cfg" -p "$TMP/haproxy-master.pid" >"$TMP/haproxy.log" 2>&1 &
PIDS+=($!)
HMASTER=$!

nginx_conf "$TMP/px" "upstream be { server 127.0.0.1:$ORIGIN; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$NPORT; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
nginx -p "$TMP/px" -e "$TMP/px/error.log" -c "$TMP/px/nginx.conf" &
PIDS+=($!)
NMASTER=$!

for p in $ORIGIN $DPORT $HPORT $NPORT; do
  for _ in $(seq 100); do
    timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p" 2>/dev/null && break
    sleep 0.1
  done
done

reload() { # target
  case $1 in
    dimmer) kill -USR2 "$(dimmer_pid)" ;;
    haproxy) kill -USR2 "$HMASTER" ;;
    nginx) kill -HUP "$NMASTER" ;;
  esac
}
port_of() { case $1 in dimmer) echo $DPORT ;; haproxy) echo $HPORT ;; nginx) echo $NPORT ;; esac; }

hdr=()
[ "$CLOSE" = 1 ] && hdr=(-H "Connection: close")
printf 'target,round,rps,connect,read,write,timeout,non2xx\n' >"$TMP/results.csv"
for r in $(seq "$ROUNDS"); do
  for t in dimmer haproxy nginx; do
    timeout $((DUR + 30)) wrk -t1 -c"$CONNS" -d"$DUR"s "${hdr[@]}" \
      "http://127.0.0.1:$(port_of $t)/1k" >"$TMP/wrk.out" 2>&1 &
    w=$!
    for k in $(seq "$RELOADS"); do
      sleep "$(awk -v d="$DUR" -v k="$RELOADS" 'BEGIN {print d / (k + 1)}')"
      reload $t
    done
    wait $w
    rps=$(awk '/Requests\/sec/ {print $2}' "$TMP/wrk.out")
    errs=$(awk '/Socket errors/ {gsub(",",""); print $4","$6","$8","$10}' "$TMP/wrk.out")
    non2xx=$(awk '/Non-2xx/ {print $NF}' "$TMP/wrk.out")
    printf '%s,%s,%s,%s,%s\n' "$t" "$r" "${rps:-0}" "${errs:-0,0,0,0}" "${non2xx:-0}" >>"$TMP/results.csv"
    sleep 1 # the last reload's old process drains
  done
done
cat "$TMP/results.csv"
echo
printf '%-8s %12s %8s %6s %6s %8s %7s   (%d reloads a run, %d runs of %d s, %d conns%s)\n' \
  target 'median req/s' connect read write timeout non2xx "$RELOADS" "$ROUNDS" "$DUR" "$CONNS" \
  "$([ "$CLOSE" = 1 ] && echo ', Connection: close')"
for t in dimmer haproxy nginx; do
  med=$(awk -F, -v t=$t '$1==t {print $3}' "$TMP/results.csv" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  sums=$(awk -F, -v t=$t '$1==t {c+=$4; r+=$5; w+=$6; o+=$7; n+=$8} END {print c, r, w, o, n}' "$TMP/results.csv")
  # shellcheck disable=SC2086
  printf '%-8s %12s %8s %6s %6s %8s %7s\n' "$t" "$med" $sums
done
echo "replacements done: dimmer $(grep -c 'is ready: this one drains' "$TMP/dimmer.log") of $((ROUNDS * RELOADS)); haproxy $(grep -c 'Reloading HAProxy' "$TMP/haproxy.log") of $((ROUNDS * RELOADS))"
