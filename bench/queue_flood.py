#!/usr/bin/env python3
"""
queue_flood: what placing a request in a long `queue_order: size` queue
costs dimmer, the case a hostile client would pick.

One dimmer-backend held busy by one long request, behind one dimmer (one
worker) with `max_conns: 1` and `queue_order: size`; then N/2 connections
each ask for a large response (64 MB, learnt by the catalog first) and wait
in the queue, and then N/2 more each ask for a small one (10 bytes), each of
which goes ahead of every large one (each large one's place is its arrival
plus 1 ms a kB of its size, at most half of timeouts.queue: 64 MB and a
600 s queue put it 65 s after its arrival). The figure is dimmer's CPU time (user +
system, from /proc) while the small ones are queued, per request. A queue
that placed a request by walking its list from the tail would pay for every
large request in front of it (quadratic in N); dimmer keeps one list per size
class and appends.

    python3 bench/queue_flood.py [--build build] [--n 18000] [--large BYTES]
        [--rounds 5] [--peers dimmer,haproxy] [--haproxy-port 18480] [--pin]

With haproxy among the peers, HAProxy (one thread) runs the same case: the
server's `maxconn 1`, and `set-priority-offset` puts each large request 65 s
after its arrival as dimmer's size order does; its queue count comes from its
stats page. HAProxy binds --haproxy-port and the port above it (it cannot
tell which port the kernel picked); dimmer binds port 0.

Only 127.0.0.1 and ports the kernel picks; every process is stopped and every
connection closed at the end. Needs N + a few hundred file descriptors (it
raises its soft limit to the hard one). Also printed: how much the proxy's
resident memory grew with the flood, per queued request.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queue_order import HOST, start_backend, start_dimmer, stop  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))


def queued(admin):
    with urllib.request.urlopen("http://%s/stats" % admin, timeout=10) as r:
        return json.load(r)["pools"][0]["queue"]["now"]


def flood(port, path, n, socks):
    req = b"GET %s HTTP/1.1\r\nHost: q\r\n\r\n" % path.encode()
    for _ in range(n):
        s = socket.create_connection((HOST, port))
        s.sendall(req)
        socks.append(s)


HAPROXY_CONF = """global
    maxconn %(maxconn)d
    nbthread 1
defaults
    mode http
    timeout connect 5s
    timeout client 600s
    timeout server 600s
    timeout queue 600s
frontend f
    bind %(host)s:%(port)d
    # As dimmer's size order places them: a large response 65 s after its arrival.
    http-request set-priority-offset int(65000) if { path %(big)s }
    default_backend b
backend b
    server b %(host)s:%(bport)d maxconn 1
frontend st
    bind %(host)s:%(sport)d
    stats enable
    stats uri /st
"""


def haproxy_queued(admin):
    with urllib.request.urlopen("http://%s/st;csv" % admin, timeout=10) as r:
        rows = r.read().decode().splitlines()
    head = rows[0].lstrip("# ").split(",")
    qcur = head.index("qcur")
    return sum(int(x.split(",")[qcur] or 0) for x in rows[1:] if x.startswith("b,"))


def start_peer(kind, a, tmp, bport, procs):
    """The proxy under test in front of the backend; (port, queued(), pid)."""
    big = "/bytes/%d" % a.large
    if kind == "dimmer":
        bound, _ = start_dimmer(
            a.build, tmp, "dimmer",
            "workers: 1\nlisten: %s:0\nadmin: %s:0\naccess_log: off\n"
            "timeouts: {queue: 600s, request: 0}\nlimits: {max_conns: 100000}\n"
            "pools:\n  web:\n    queue_order: size\n    passive: {max_fails: 0}\n"
            "    servers:\n      - {name: b, address: \"%s:%d\", max_conns: 1}\n"
            % (HOST, HOST, HOST, bport), procs)
        port = int(bound["listen"].rsplit(":", 1)[1])
        for path in (big, "/bytes/10"):  # the catalog learns the sizes
            urllib.request.urlopen("http://%s:%d%s" % (HOST, port, path), timeout=10).read()
        return port, lambda: queued(bound["admin"]), procs[-1].pid
    conf = os.path.join(tmp, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(HAPROXY_CONF % {"maxconn": a.n + 200, "host": HOST, "port": a.haproxy_port,
                                "sport": a.haproxy_port + 1, "big": big, "bport": bport})
    log = open(os.path.join(tmp, "haproxy.log"), "w")
    procs.append(subprocess.Popen(["haproxy", "-db", "-f", conf], stdout=log,
                                  stderr=subprocess.STDOUT))
    admin = "%s:%d" % (HOST, a.haproxy_port + 1)
    deadline = time.monotonic() + 10
    while True:
        try:
            haproxy_queued(admin)
            break
        except OSError:
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                sys.exit("haproxy did not start: " + open(log.name).read()[-2000:])
            time.sleep(0.05)
    return a.haproxy_port, lambda: haproxy_queued(admin), procs[-1].pid


def wait_for(get, n, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get() >= n:
            return
        time.sleep(0.05)
    sys.exit("queue_flood: %d queued of %d after %d s" % (get(), n, timeout))


def one_round(kind, a):
    """
    CPU us a request (large ones queued, small ones each ahead of every
    large one) and the proxy's resident memory grown by the flood, KiB a
    queued request.
    """
    procs, socks = [], []
    with tempfile.TemporaryDirectory(prefix="queue_flood-") as tmp:
        try:
            bport = start_backend(a.build, tmp, "b", procs, "--capacity", 1000)
            port, get, pid = start_peer(kind, a, tmp, bport, procs)
            if a.pin:  # the proxy on the second CPU, the backend and the clients on the first
                os.sched_setaffinity(pid, {1})
                os.sched_setaffinity(procs[0].pid, {0})
                os.sched_setaffinity(0, {0})
            # The holder: the server's one place (sent first, so it takes it).
            flood(port, "/bytes/1?ms=600000", 1, socks)
            half = a.n // 2
            c0, m0 = cpu_s(pid), rss_kib(pid)
            flood(port, "/bytes/%d" % a.large, half, socks)
            wait_for(get, half)
            c1 = cpu_s(pid)
            flood(port, "/bytes/10", half, socks)
            wait_for(get, 2 * half)
            c2, m2 = cpu_s(pid), rss_kib(pid)
            return (c1 - c0) * 1e6 / half, (c2 - c1) * 1e6 / half, (m2 - m0) / (2 * half)
        finally:
            for s in socks:
                s.close()
            stop(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--n", type=int, default=18000)
    ap.add_argument("--large", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peers", default="dimmer", help="comma list of dimmer,haproxy")
    ap.add_argument("--haproxy-port", type=int, default=18480,
                    help="HAProxy's port (and its stats page's, one above)")
    ap.add_argument("--pin", action="store_true",
                    help="the proxy on CPU 1; the backend and this client on CPU 0")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.n + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit("queue_flood: needs %d file descriptors, the hard limit is %d" % (need, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    kinds = a.peers.split(",")
    res = {k: [] for k in kinds}
    for r in range(a.rounds):
        for k in kinds:  # alternated, so that the machine's drift falls on each alike
            res[k].append(one_round(k, a))
            print("round %d %s: large %.1f us, small %.1f us a request, %.2f KiB resident a "
                  "request" % ((r + 1, k) + res[k][-1]), flush=True)
    half = a.n // 2
    print("queue_flood: %d large then %d small queued behind one busy place, medians of %d%s"
          % (half, half, a.rounds, ", pinned" if a.pin else ""))
    print("| proxy | CPU us a large request queued | CPU us a small one, ahead of every large "
          "| resident KiB a queued request |")
    print("|---|---|---|---|")
    for k in kinds:
        print("| %s | %.1f | %.1f | %.2f |" % (k, statistics.median(x[0] for x in res[k]),
                                               statistics.median(x[1] for x in res[k]),
                                               statistics.median(x[2] for x in res[k])))
    if "dimmer" in res and "haproxy" in res:
        ratio = [d[1] / h[1] for d, h in zip(res["dimmer"], res["haproxy"])]
        print("dimmer / haproxy, small requests, median of the paired rounds: %.2f"
              % statistics.median(ratio))


if __name__ == "__main__":
    main()
