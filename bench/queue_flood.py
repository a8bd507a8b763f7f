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

Only 127.0.0.1 and ports the kernel picks; every process is stopped and every
connection closed at the end. Needs N + a few hundred file descriptors (it
raises its soft limit to the hard one).
"""
import argparse
import json
import os
import resource
import socket
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


def queued(admin):
    with urllib.request.urlopen("http://%s/stats" % admin, timeout=10) as r:
        return json.load(r)["pools"][0]["queue"]["now"]


def wait_queued(admin, n, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if queued(admin) >= n:
            return
        time.sleep(0.05)
    sys.exit("queue_flood: %d queued of %d after %d s" % (queued(admin), n, timeout))


def flood(port, path, n, socks):
    req = b"GET %s HTTP/1.1\r\nHost: q\r\n\r\n" % path.encode()
    for _ in range(n):
        s = socket.create_connection((HOST, port))
        s.sendall(req)
        socks.append(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--n", type=int, default=18000)
    ap.add_argument("--large", type=int, default=64 << 20)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.n + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit("queue_flood: needs %d file descriptors, the hard limit is %d" % (need, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    procs, socks = [], []
    with tempfile.TemporaryDirectory(prefix="queue_flood-") as tmp:
        try:
            bport = start_backend(a.build, tmp, "b", procs, "--capacity", 1000)
            bound, _ = start_dimmer(
                a.build, tmp, "dimmer",
                "workers: 1\nlisten: %s:0\nadmin: %s:0\naccess_log: off\n"
                "timeouts: {queue: 600s, request: 0}\nlimits: {max_conns: 100000}\n"
                "pools:\n  web:\n    queue_order: size\n    passive: {max_fails: 0}\n"
                "    servers:\n      - {name: b, address: \"%s:%d\", max_conns: 1}\n"
                % (HOST, HOST, HOST, bport), procs)
            d = procs[-1]
            port = int(bound["listen"].rsplit(":", 1)[1])
            admin = bound["admin"]
            big = "/bytes/%d" % a.large
            for path in (big, "/bytes/10"):  # the catalog learns the sizes
                urllib.request.urlopen("http://%s:%d%s" % (HOST, port, path), timeout=10).read()
            # The holder: the server's one place (sent first, so it takes it).
            flood(port, "/bytes/1?ms=600000", 1, socks)
            half = a.n // 2
            t0, c0 = time.monotonic(), cpu_s(d.pid)
            flood(port, big, half, socks)
            wait_queued(admin, half)
            t1, c1 = time.monotonic(), cpu_s(d.pid)
            flood(port, "/bytes/10", half, socks)
            wait_queued(admin, 2 * half)
            t2, c2 = time.monotonic(), cpu_s(d.pid)
            print("queue_flood: %d large then %d small queued behind one busy place" % (half, half))
            print("| phase | wall s | dimmer CPU s | CPU us a request |")
            print("|---|---|---|---|")
            print("| %d large, in arrival order | %.2f | %.2f | %.1f |"
                  % (half, t1 - t0, c1 - c0, (c1 - c0) * 1e6 / half))
            print("| %d small, each ahead of every large | %.2f | %.2f | %.1f |"
                  % (half, t2 - t1, c2 - c1, (c2 - c1) * 1e6 / half))
        finally:
            for s in socks:
                s.close()
            stop(procs)

if __name__ == "__main__":
    main()
