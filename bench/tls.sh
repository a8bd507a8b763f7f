#!/usr/bin/env bash
# tls.sh - TLS termination benchmark on loopback: HAProxy, nginx (and optionally
# dimmer) in front of one plain-HTTP nginx origin, each terminating TLS with the
# same ECDSA P-256 and RSA 2048 certificates made at run time. A copy of
# ../shared/bench/peers.sh extended for TLS; see the "TLS" section of
# bench/README.md. Needs build/dimmer-tlsload (cmake --build build --target
# dimmer-tlsload), wrk, haproxy, nginx, openssl, python3.
#
# Cases, each for every certificate of --certs:
#   handshake-new     dimmer-tlsload --mode new: connect, full handshake, GET /1k
#                     with Connection: close, close; handshakes/s
#   handshake-resume  the same, each connection resuming its slot's session
#                     (tickets, as each peer issues them by default); handshakes/s
#                     and the share really resumed
#   1k-keepalive      wrk over https://, keep-alive, GET /1k; requests/s
#
# TLS parameters: no peer sets ciphers or groups, so each uses its defaults over
# the same OpenSSL 3.0 library; the resumption check at the start prints what was
# negotiated. On Debian 12 (OpenSSL 3.0, HAProxy 2.6, nginx 1.22) that is, for
# both peers, TLS 1.3 TLS_AES_256_GCM_SHA384 over X25519, and for TLS 1.2
# ECDHE-{ECDSA,RSA}-AES256-GCM-SHA384 over X25519:
#   HAProxy: ssl-default-bind-ciphers/-ciphersuites unset = OpenSSL's defaults;
#            no "curves"/"ecdhe" = OpenSSL's default groups; ssl-min-ver TLSv1.2;
#            tickets on and a 20000-entry session cache (tune.ssl.cachesize), both
#            defaults; "alpn http/1.1" so that it answers ALPN as nginx does.
#   nginx:   ssl_ciphers HIGH:!aNULL:!MD5 (its default; TLS 1.3 suites are
#            OpenSSL's), ssl_ecdh_curve auto (OpenSSL's default groups),
#            ssl_session_tickets on, ssl_session_cache shared:SSL:10m, and
#            ssl_protocols TLSv1.2 TLSv1.3 as HAProxy's: nginx 1.22's default
#            (TLSv1 TLSv1.1 TLSv1.2) has no TLS 1.3.
#   dimmer:  whatever its config template says (bench/tls-dimmer.yaml: defaults).
set -u

usage() {
  cat <<'EOF'
Usage: tls.sh [options]
  --rounds R       interleaved rounds per case (default 3; 0 = no load runs)
  --duration S     seconds per run (default 5)
  --warmup S       seconds of warm-up per target and certificate (default 1)
  --conns C        connections at once, wrk and dimmer-tlsload (default 50)
  --cases LIST     comma list from handshake-new,handshake-resume,1k-keepalive
                   (default: all three)
  --certs LIST     comma list from ecdsa,rsa (default: both)
  --tls LIST       TLS versions for the handshake cases, comma list from 1.2,1.3
                   (default 1.3; wrk always negotiates, which is 1.3 here)
  --targets LIST   comma list from haproxy,nginx (default: both)
  --base-port P    origin P; haproxy P+1 (ecdsa) P+2 (rsa); nginx P+3, P+4
                   (default 18100)
  --cmd 'CMD'      also bench the project's proxy as target "project", started
                   once per certificate. CMD runs in the foreground, terminates
                   TLS on 127.0.0.1:{port} and forwards to 127.0.0.1:{backend_port};
                   {cert} and {key} are the certificate and key PEM files, {pem}
                   both in one file, {tmp} a scratch dir, {conf} the --conf file
                   with the same placeholders substituted. Use exec-style commands
                   so that the started PID is the proxy itself.
  --conf FILE      config template for --cmd (e.g. bench/tls-dimmer.yaml)
  --port N         project ports: N for ecdsa, N+1 for rsa (default base+5)
  --pin            taskset: clients (dimmer-tlsload, wrk, tls_idle.py) on CPU 0,
                   origin and proxies on CPU 1 (override with WRK_CPU / SRV_CPU)
  --cap PCT        server-bound runs: each proxy (not the origin) in a cgroup of
                   its own limited to PCT % of one CPU (CFS quota; cgroup v1 or
                   v2, needs root), so that the proxy and not the client bounds
                   the rate; `srv %` in the table shows the proxy at its cap
  --max-steal PCT  run a case again (twice at most) when the hypervisor took
                   more than PCT % of the CPUs during it (steal, /proc/stat):
                   on a shared machine such a run measured a slower machine
  --idle N         before the load runs, hold N idle TLS keep-alive connections
                   (handshake, one GET /1k) on each proxy and certificate and
                   report the RSS growth per connection (python3)
  --reuse WHICH    handshake-resume offers each slot's latest session (default
                   latest: every TLS 1.3 ticket once, as browsers do) or always
                   its first one (first; HAProxy takes a TLS 1.3 ticket only once)
  --tlsload PATH   dimmer-tlsload (default: build/dimmer-tlsload of this repo)
  --out FILE       raw results CSV (default ./tls-YYYYmmdd-HHMMSS.csv)
  -h, --help       this text
Env: HX_REUSE = HAProxy http-reuse mode (default always, as in peers.sh).
Prints per case and certificate: median handshakes/s or req/s, ratio to
haproxy, the target's own CPU time per handshake or request and its CPU share
(srv %, of one CPU), the share of handshakes resumed, the client's CPU share,
and errors; then how much CPU time the hypervisor took (steal) during the runs.
EOF
}

ROUNDS=3 DUR=5 WARM=1 CONNS=50 BASE=18100 PIN=0 IDLE=0 CAP=0 MAXSTEAL=0 REPEATED=0
CASES=handshake-new,handshake-resume,1k-keepalive CERTS=ecdsa,rsa TLSV=1.3 TARGETS=haproxy,nginx
CMD= CONF= PPORT= TLSLOAD= REUSE=latest OUT="tls-$(date +%Y%m%d-%H%M%S).csv"
WRK_CPU=${WRK_CPU:-0} SRV_CPU=${SRV_CPU:-1} HX_REUSE=${HX_REUSE:-always}
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift ;;     --duration) DUR=$2; shift ;;
    --warmup) WARM=$2; shift ;;       --conns) CONNS=$2; shift ;;
    --cases) CASES=$2; shift ;;       --certs) CERTS=$2; shift ;;
    --tls) TLSV=$2; shift ;;          --targets) TARGETS=$2; shift ;;
    --base-port) BASE=$2; shift ;;    --cmd) CMD=$2; shift ;;
    --conf) CONF=$2; shift ;;         --port) PPORT=$2; shift ;;
    --idle) IDLE=$2; shift ;;         --tlsload) TLSLOAD=$2; shift ;;
    --reuse) REUSE=$2; shift ;;       --out) OUT=$2; shift ;;
    --pin) PIN=1 ;;                   --cap) CAP=$2; shift ;;
    --max-steal) MAXSTEAL=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
HERE=$(cd "$(dirname "$0")" && pwd)
TLSLOAD=${TLSLOAD:-$HERE/../build/dimmer-tlsload}
for t in wrk haproxy nginx openssl python3 timeout; do
  command -v $t >/dev/null || { echo "missing: $t (apt-get install wrk haproxy nginx openssl python3)" >&2; exit 1; }
done
[ -x "$TLSLOAD" ] || { echo "missing $TLSLOAD: cmake --build build --target dimmer-tlsload" >&2; exit 1; }
for v in "$ROUNDS" "$DUR" "$WARM" "$CONNS" "$BASE" "$IDLE" "$CAP" "$MAXSTEAL"; do
  case $v in ''|*[!0-9]*) echo "not a whole number: $v" >&2; exit 2 ;; esac
done
[ "$DUR" -ge 1 ] || { echo "--duration must be at least 1" >&2; exit 2; }
[ "$CAP" -le 100 ] || { echo "--cap: a share of one CPU, 1-100" >&2; exit 2; }
case $REUSE in first|latest) ;; *) echo "--reuse: first or latest" >&2; exit 2 ;; esac
for c in ${CERTS//,/ }; do case $c in ecdsa|rsa) ;; *) echo "unknown cert: $c" >&2; exit 2 ;; esac; done
for v in ${TLSV//,/ }; do case $v in 1.2|1.3) ;; *) echo "unknown TLS version: $v" >&2; exit 2 ;; esac; done
for t in ${TARGETS//,/ }; do case $t in haproxy|nginx) ;; *) echo "unknown target: $t" >&2; exit 2 ;; esac; done
for c in ${CASES//,/ }; do
  case $c in handshake-new|handshake-resume|1k-keepalive) ;; *) echo "unknown case: $c" >&2; exit 2 ;; esac
done
BP=$BASE PPORT=${PPORT:-$((BASE + 5))}
[ -n "$CMD" ] && TARGETS="$TARGETS,project"
PIN_WRK= PIN_SRV=
[ $PIN = 1 ] && PIN_WRK="taskset -c $WRK_CPU" PIN_SRV="taskset -c $SRV_CPU"
ulimit -n "$(ulimit -Hn)" 2>/dev/null    # proxies below need ~2 x 9000 descriptors

TMP=$(mktemp -d /tmp/tlsbench.XXXXXX) && chmod 755 "$TMP" || exit 1
PIDS=() CLIENT_PID= CGROUPS=()
cleanup() {
  trap - EXIT INT TERM
  [ -n "$CLIENT_PID" ] && kill "$CLIENT_PID" 2>/dev/null
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 50); do                          # up to 5 s for a clean exit
    alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for g in "${CGROUPS[@]}"; do
    for _ in $(seq 20); do rmdir "$g" 2>/dev/null && break; sleep 0.1; done
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# An instance is TARGET-CERT (haproxy-ecdsa, ...); the origin is "origin".
port_of() {
  local t=${1%-*} c=${1##*-} off=0
  [ "$c" = rsa ] && off=1
  case $t in origin) echo $BP ;; haproxy) echo $((BASE + 1 + off)) ;;
    nginx) echo $((BASE + 3 + off)) ;; project) echo $((PPORT + off)) ;; esac
}
var_of() { echo "PID_${1//-/_}"; }

# --- certificates: one CA (ECDSA P-256), an ECDSA P-256 and an RSA 2048 server
# certificate for localhost. Every server sends the same chain, leaf + CA: two
# certificates, as long as a production leaf + intermediate chain, and complete,
# which dimmer checks at startup (it refuses a chain whose issuer it cannot find) ---
PKI=$TMP/pki
mkdir -p "$PKI"
mkcerts() {
  local ext="subjectAltName=DNS:localhost,IP:127.0.0.1
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth"
  printf '%s\n' "$ext" >"$PKI/ext.cnf"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=dimmer-bench-ca -keyout "$PKI/ca.key" -out "$PKI/ca.crt" || return 1
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$PKI/ecdsa.key" -out "$PKI/ecdsa.csr" || return 1
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
    -keyout "$PKI/rsa.key" -out "$PKI/rsa.csr" || return 1
  for c in ecdsa rsa; do
    openssl x509 -req -in "$PKI/$c.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -days 2 \
      -set_serial "0x$(openssl rand -hex 8)" -extfile "$PKI/ext.cnf" -out "$PKI/$c.leaf" || return 1
    cat "$PKI/$c.leaf" "$PKI/ca.crt" >"$PKI/$c.crt"
    cat "$PKI/$c.crt" "$PKI/$c.key" >"$PKI/$c.pem"   # HAProxy wants both in one file
  done
}
mkcerts >"$TMP/openssl.log" 2>&1 || { echo "certificate generation failed:" >&2; cat "$TMP/openssl.log" >&2; exit 1; }
chmod 644 "$PKI"/*

# fetch /1k over plain HTTP/1.0 (the origin); prints the byte count or 0
probe_plain() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf 'GET /1k HTTP/1.0\r\nHost: b\r\n\r\n' >&3 && cat <&3" 2>/dev/null | wc -c; }
# one verified TLS request (chain against our CA, name localhost)
probe_tls() { timeout 3 "$TLSLOAD" --port "$1" --conns 1 --count 1 --duration 1 --timeout-ms 900 --sni localhost --cafile "$PKI/ca.crt" >/dev/null 2>&1; }
wait_ready() { # instance port; gives up after about 10 s
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 10 ]; do
    if [ "$1" = origin ]; then [ "$(probe_plain "$2")" -gt 1024 ] && return 0
    else probe_tls "$2" && return 0; fi
    sleep 0.2
  done
  echo "$1 did not come up on port $2; logs in $TMP:" >&2; tail -n 5 "$TMP"/*.log >&2
  [ "$1" = origin ] || timeout 5 "$TLSLOAD" --port "$2" --conns 1 --count 1 --duration 1 --timeout-ms 900 \
    --sni localhost --cafile "$PKI/ca.crt" >&2
  exit 1
}
# --cap: a cgroup per proxy with a CPU quota (v1 cpu controller, else v2 cpu.max);
# prints the file to write a PID to, so that it and its children are capped
cap_group() { # instance
  local g
  if [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
    g=/sys/fs/cgroup/cpu/tlsbench-$$-$1
    mkdir "$g" && echo 100000 >"$g/cpu.cfs_period_us" && echo $((CAP * 1000)) >"$g/cpu.cfs_quota_us" || return 1
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control || return 1
    g=/sys/fs/cgroup/tlsbench-$$-$1
    mkdir "$g" && echo "$((CAP * 1000)) 100000" >"$g/cpu.max" || return 1
  else
    return 1
  fi
  echo "$g/cgroup.procs"
}
start() { # instance command...  (runs in background, remembers the PID)
  local name=$1; shift
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$(port_of "$name")" 2>/dev/null &&
    { echo "port $(port_of "$name") already in use" >&2; exit 1; }
  if [ "$CAP" -gt 0 ] && [ "$name" != origin ]; then
    local procs_file
    procs_file=$(cap_group "$name") && CGROUPS+=("${procs_file%/cgroup.procs}") ||
      { echo "--cap: cannot make a CPU-limited cgroup (root, cgroup v1 cpu or v2 cpu.max)" >&2; exit 1; }
    set -- sh -c 'echo $$ >"$0" && exec "$@"' "$procs_file" "$@"
  fi
  "$@" >"$TMP/$name.log" 2>&1 &
  PIDS+=($!); eval "$(var_of "$name")=$!"
  wait_ready "$name" "$(port_of "$name")"
}

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
  default_type application/octet-stream;
  client_body_temp_path $1/cb; proxy_temp_path $1/pt; fastcgi_temp_path $1/ft;
  uwsgi_temp_path $1/ut; scgi_temp_path $1/st;
  keepalive_timeout 75s; keepalive_requests 1000000;
  $2
}
EOF
}
haproxy_conf() { # file port cert
  { printf 'global\n  nbthread 1\n  maxconn 9000\n'
    printf 'defaults\n  mode http\n  maxconn 9000\n  option http-keep-alive\n  http-reuse %s\n' "$HX_REUSE"
    printf '  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n'
    printf 'frontend fe\n  bind 127.0.0.1:%s ssl crt %s alpn http/1.1\n  default_backend be\n' "$2" "$PKI/$3.pem"
    printf 'backend be\n  server s1 127.0.0.1:%s\n' "$BP"; } >"$1"
}

# --- origin: nginx, 1 worker, plain HTTP, keep-alive, /1k and /64k ---
mkdir -p "$TMP/www"
head -c 1024 /dev/zero | tr '\0' a >"$TMP/www/1k"
head -c 65536 /dev/zero | tr '\0' b >"$TMP/www/64k"
nginx_conf "$TMP/origin" "server { listen 127.0.0.1:$BP; root $TMP/www; sendfile on; tcp_nopush on; location / { } }"
start origin $PIN_SRV nginx -p "$TMP/origin" -e "$TMP/origin/error.log" -c "$TMP/origin/nginx.conf"

# --- proxies under test, one process per certificate ---
IFS=, read -r -a TLIST <<<"$TARGETS"
IFS=, read -r -a CLIST <<<"$CASES"
IFS=, read -r -a KLIST <<<"$CERTS"
IFS=, read -r -a VLIST <<<"$TLSV"
has() { case ",$TARGETS," in *",$1,"*) return 0 ;; esac; return 1; }
for k in "${KLIST[@]}"; do
  if has haproxy; then
    haproxy_conf "$TMP/haproxy-$k.cfg" "$(port_of "haproxy-$k")" "$k"
    start "haproxy-$k" $PIN_SRV haproxy -db -f "$TMP/haproxy-$k.cfg"
  fi
  if has nginx; then
    nginx_conf "$TMP/nginx-$k" "upstream be { server 127.0.0.1:$BP; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$(port_of "nginx-$k") ssl;
    ssl_certificate $PKI/$k.crt; ssl_certificate_key $PKI/$k.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
    start "nginx-$k" $PIN_SRV nginx -p "$TMP/nginx-$k" -e "$TMP/nginx-$k/error.log" -c "$TMP/nginx-$k/nginx.conf"
  fi
  if [ -n "$CMD" ]; then
    subst() { sed -e "s|{port}|$(port_of "project-$k")|g" -e "s|{backend_port}|$BP|g" -e "s|{tmp}|$TMP|g" \
      -e "s|{conf}|$TMP/project-$k.conf|g" -e "s|{cert}|$PKI/$k.crt|g" -e "s|{key}|$PKI/$k.key|g" \
      -e "s|{pem}|$PKI/$k.pem|g"; }
    [ -n "$CONF" ] && subst <"$CONF" >"$TMP/project-$k.conf"
    start "project-$k" $PIN_SRV sh -c "exec $(printf '%s' "$CMD" | subst)"
  fi
done
echo "targets: $TARGETS  certs: $CERTS  cases: $CASES  TLS (handshake cases): $TLSV"
echo "rounds: $ROUNDS x ${DUR}s  conns: $CONNS  pinned: $PIN  cap: ${CAP:-0} % of a CPU per proxy (0: none)  handshake-resume: --reuse $REUSE"

procs() { # PIDs that do the instance's work: the nginx worker, else the started PID + children
  local p; eval "p=\$$(var_of "$1")"
  case $1 in origin|nginx-*) pgrep -P "$p" | head -n 1 ;; *) echo "$p"; pgrep -P "$p" ;; esac
}
cpu_ticks() { # user+system clock ticks of procs(), summed
  local n=0 p f
  for p in $(procs "$1"); do read -r -a f <"/proc/$p/stat" 2>/dev/null && n=$((n + f[13] + f[14])); done
  echo $n
}
jget() { # key <json  -> the value of a flat key (number or string)
  sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\).*/\1/p"
}
tlsload() { # port mode tls seconds extra... -> JSON line in $TMP/tl.out, exit status in $TMP/tl.rc
  local port=$1 mode=$2 v=$3 secs=$4; shift 4
  local vopt=()
  [ "$v" != - ] && vopt=(--tls "$v")
  timeout $((secs + 30)) $PIN_WRK "$TLSLOAD" --port "$port" --mode "$mode" "${vopt[@]}" --conns "$CONNS" \
    --duration "$secs" --sni localhost --json "$@" >"$TMP/tl.out" 2>"$TMP/tl.err" &
  CLIENT_PID=$!; wait "$CLIENT_PID"; echo $? >"$TMP/tl.rc"; CLIENT_PID=
}

# --- resumption check: does each peer really resume, in TLS 1.2 and 1.3, when a
# client offers a session again (first) or each new ticket once (latest)? ---
echo; echo "resumption check (dimmer-tlsload --mode resume, 2 slots, 40 handshakes, chain verified):"
check() { # instance tls reuse -> "resumed/offered verdict"; the JSON stays in $TMP/tl.out
  timeout 20 "$TLSLOAD" --port "$(port_of "$1")" --mode resume --tls "$2" --reuse "$3" --conns 2 --count 40 \
    --duration 5 --sni localhost --cafile "$PKI/ca.crt" --json >"$TMP/tl.out" 2>"$TMP/tl.err"
  local j; j=$(cat "$TMP/tl.out")
  printf '%s/%s %s' "$(jget resumed <<<"$j")" "$(jget offered <<<"$j")" "$(jget resumption <<<"$j")"
}
for k in "${KLIST[@]}"; do
  for t in "${TLIST[@]}"; do
    for v in 1.2 1.3; do
      f=$(check "$t-$k" $v first); l=$(check "$t-$k" $v latest); j=$(cat "$TMP/tl.out")
      printf '  %-14s TLS %s  first: %-14s latest: %-14s %s %s %s, ALPN %s, key %s\n' "$t-$k" $v "$f" "$l" \
        "$(jget protocol <<<"$j")" "$(jget cipher <<<"$j")" "$(jget group <<<"$j")" "$(jget alpn <<<"$j")" \
        "$(jget cert <<<"$j")"
      case $l in *' ok') ;; *) echo "  ^ RESUMPTION DID NOT WORK: $(tr '\n' ' ' <"$TMP/tl.err")" ;; esac
    done
  done
done

# --- memory per idle TLS keep-alive connection ---
if [ "$IDLE" -gt 0 ]; then
  echo
  for k in "${KLIST[@]}"; do
    for t in "${TLIST[@]}"; do
      printf '%-14s ' "$t-$k"
      timeout 300 $PIN_WRK python3 "$HERE/tls_idle.py" --port "$(port_of "$t-$k")" \
        --pid "$(procs "$t-$k" | paste -sd,)" -n "$IDLE" --cafile "$PKI/ca.crt" || echo "idle test failed"
    done
  done
fi

# --- load runs ---
run_wrk() { # port seconds -> wrk output in $TMP/wrk.out
  timeout $(($2 + 30)) $PIN_WRK wrk -t1 -c"$CONNS" -d"$2"s --latency "https://127.0.0.1:$1/1k" >"$TMP/wrk.out" 2>&1 &
  CLIENT_PID=$!; wait "$CLIENT_PID"; CLIENT_PID=
}
parse_wrk() { # -> ops,p50_us,p99_us,errors,resumed_pct,client_cpu_pct
  awk 'function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1e6; return v }
    $1 == "50%" { p50 = us($2) } $1 == "99%" { p99 = us($2) } /^Requests\/sec/ { rps = $2 }
    /Socket errors/ { gsub(/,/, ""); e = $4 + $6 + $8 + $10 } /Non-2xx/ { n = $NF }
    END { printf "%.1f,%d,%d,%d,,\n", rps, p50, p99, e + n }' "$TMP/wrk.out"
}
parse_tl() { # -> ops,p50_us,p99_us,errors,resumed_pct,client_cpu_pct
  local j; j=$(cat "$TMP/tl.out")
  printf '%s,0,0,%s,%s,%s\n' "$(jget handshakes_per_s <<<"$j")" "$(jget errors <<<"$j")" \
    "$(jget resumed_pct <<<"$j")" "$(jget client_cpu_pct <<<"$j")"
}
run_case() { # case instance tls seconds -> CSV tail in $TMP/row
  case $1 in
    handshake-new) tlsload "$(port_of "$2")" new "$3" "$4"; parse_tl >"$TMP/row" ;;
    handshake-resume) tlsload "$(port_of "$2")" resume "$3" "$4" --reuse "$REUSE"; parse_tl >"$TMP/row" ;;
    1k-keepalive) run_wrk "$(port_of "$2")" "$4"; parse_wrk >"$TMP/row" ;;
  esac
  if [ "$1" != 1k-keepalive ] && [ "$(cat "$TMP/tl.rc")" != 0 ]; then
    echo "  dimmer-tlsload exit $(cat "$TMP/tl.rc") on $2: $(tr '\n' ' ' <"$TMP/tl.err")" >&2
  fi
}
[ "$ROUNDS" -gt 0 ] || exit 0
HZ=$(getconf CLK_TCK) NCPU=$(getconf _NPROCESSORS_ONLN)
# CPU time the hypervisor gave to other guests (the machine is shared): a run
# with much of it measured a slower machine than the others
steal_ticks() { awk '$1 == "cpu" { print $9; exit }' /proc/stat; }
echo "pinned,case,cert,tls,round,target,ops_per_s,p50_us,p99_us,errors,resumed_pct,client_cpu_pct,start_unix,cpu_us_per_op,steal_pct" >"$OUT"
if [ "$WARM" -gt 0 ]; then
  for k in "${KLIST[@]}"; do
    for t in "${TLIST[@]}"; do run_case handshake-new "$t-$k" - "$WARM"; run_case 1k-keepalive "$t-$k" - "$WARM"; done
  done
fi
echo
for r in $(seq "$ROUNDS"); do
  for c in "${CLIST[@]}"; do
    vs=("${VLIST[@]}")
    [ "$c" = 1k-keepalive ] && vs=(-)
    for k in "${KLIST[@]}"; do
      for v in "${vs[@]}"; do
        for t in "${TLIST[@]}"; do
          for try in 1 2 3; do
            ts=$(date +%s); c0=$(cpu_ticks "$t-$k"); s0=$(steal_ticks)
            run_case "$c" "$t-$k" "$v" "$DUR"; c1=$(cpu_ticks "$t-$k"); s1=$(steal_ticks)
            line="$PIN,$c,$k,$v,$r,$t,$(cat "$TMP/row"),$ts"
            line="$line,$(echo "$line" | awk -F, -v t=$((c1 - c0)) -v hz="$HZ" -v d="$DUR" '{ printf "%.1f", ($7 > 0 ? t / hz * 1e6 / ($7 * d) : 0) }')"
            st=$(awk -v s=$((s1 - s0)) -v hz="$HZ" -v d="$DUR" -v n="$NCPU" 'BEGIN { printf "%.1f", 100 * s / (hz * d * n) }')
            line="$line,$st"
            # --max-steal: a run that the hypervisor slowed more than that is run again (twice at most)
            if [ "$MAXSTEAL" -gt 0 ] && [ "$try" -lt 3 ] && awk -v s="$st" -v m="$MAXSTEAL" 'BEGIN { exit !(s > m) }'; then
              REPEATED=$((REPEATED + 1)); echo "  run again, steal $st %: $line" >&2; continue
            fi
            break
          done
          echo "$line" >>"$OUT"
          echo "  $(date -d @"$ts" +%T) round $r $c $k $v $t: $line" >&2
        done
      done
    done
  done
done

# --- summary table (medians over rounds) ---
awk -F, -v order="$TARGETS" -v rounds="$ROUNDS" '
  function med(arr, k,   i, j, t, m, v) {
    m = n[k]; for (i = 1; i <= m; i++) v[i] = arr[k, i]
    for (i = 2; i <= m; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
  function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
  NR > 1 { g = $2 " " $3 ($4 == "-" ? "" : " TLS " $4); k = g SUBSEP $6; i = ++n[k]
           ops[k, i] = $7; p99[k, i] = $9; res[k, i] = $11; ccpu[k, i] = $12; cpu[k, i] = $14; err[k] += $10
           srv[k, i] = $7 * $14 / 1e4
           if (!(g in seen)) { seen[g] = 1; groups[++ng] = g } }
  END { nt = split(order, T, ",")
    for (c = 1; c <= ng; c++) {
      g = groups[c]; hs = (g !~ /^1k-keepalive/)
      h = n[g, "haproxy"] ? med(ops, g SUBSEP "haproxy") : 0
      printf "\n== %s  (median of %d rounds)\n%-9s %10s %10s %8s %6s %10s %10s %7s\n", g, rounds, "target",
        hs ? "hs/s" : "req/s", "x haproxy", "us/op", "srv %", hs ? "resumed %" : "p99 ms", hs ? "client %" : "", "errors"
      for (t = 1; t <= nt; t++) { k = g SUBSEP T[t]; if (!n[k]) continue; v = med(ops, k)
        printf "%-9s %10.0f %10s %8.1f %6.0f %10s %10s %7d\n", T[t], v, ratio(v, h), med(cpu, k), med(srv, k),
          hs ? sprintf("%.1f", med(res, k)) : sprintf("%.3f", med(p99, k) / 1000),
          hs ? sprintf("%.0f", med(ccpu, k)) : "", err[k] } } }' "$OUT"
awk -F, 'NR > 1 && $15 != "" { n++; s += $15; if ($15 > m) m = $15; if ($15 >= 5) k++ }
  END { if (n) printf "\nsteal (CPU time the hypervisor gave to other guests): mean %.1f %%, max %.1f %%; %d of %d runs at 5 %% or more\n", s / n, m, k, n }' "$OUT"
[ "$MAXSTEAL" -gt 0 ] && echo "runs made again for steal over $MAXSTEAL %: $REPEATED (the table has the last of each)"
echo; echo "raw results: $OUT"
