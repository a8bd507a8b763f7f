#!/usr/bin/env python3
"""
queue_order: what `queue_order: size` does for the mean response time, live.

Two dimmer-backends that serve one request at a time (--capacity 1), each
request holding the server for a time that grows with its response's size
(?ms=, 2 ms plus 1 ms for each 5 kB: a server that sends 5 MB/s), behind one
dimmer with `max_conns: 1` on each server, so that the requests that find
both busy wait in dimmer's queue. An open-loop load (Poisson arrivals, a
rate that does not slow down when responses do, as the simulator's users
arrive) asks for SPECweb99-sized files: 35/50/14/1 % in the classes
0.1-0.9, 1-9, 10-90 and 100-900 kB, ten files a class. Each run is one
queue order (or `none`: no max_conns, so each backend queues its own
requests, in arrival order, behind dimmer's pick); rounds alternate them. Mean response time per request is
timed from when the request was due, so a queued one counts its wait.

    python3 bench/queue_order.py [--build build] [--load 0.85] [--seconds 20]
        [--rounds 5] [--orders arrival,size]

Only 127.0.0.1 and ports the kernel picks; every process is stopped at the end.
"""
import argparse
import asyncio
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"
CLASSES = [(0.35, 100), (0.50, 1000), (0.14, 10000), (0.01, 100000)]


def files():
    """(share, bytes, ms) of each file: ten a class, 1..9 times the class's base."""
    out = []
    for share, base in CLASSES:
        for k in range(10):
            size = base * (1 + k * 8 // 9) + k  # distinct sizes within the class
            out.append((share / 10, size, 2 + size // 5000))
    return out


def mean_service_ms():
    return sum(s * ms for s, _, ms in files())


def wait_line(path, pattern, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        time.sleep(0.02)
    sys.exit("queue_order: timed out waiting for %s in %s" % (pattern, path))


def start_backend(build, tmp, name, procs, *args):
    """A dimmer-backend on a port the kernel picks (appended to procs); its port."""
    path = os.path.join(tmp, name + ".out")
    with open(path, "w") as out:
        procs.append(subprocess.Popen(
            [os.path.join(build, "dimmer-backend"), "--listen", HOST + ":0", "--name", name]
            + [str(x) for x in args], stdout=out, stderr=subprocess.STDOUT))
    return int(wait_line(path, r"listening on [\d.]+:(\d+)").group(1))


def start_dimmer(build, tmp, name, conf_text, procs):
    """dimmer on conf_text (appended to procs); ({"listen": ADDR, "admin": ADDR}, log path)."""
    conf = os.path.join(tmp, name + ".yaml")
    with open(conf, "w") as f:
        f.write(conf_text)
    pf = os.path.join(tmp, name + ".ports")
    log = os.path.join(tmp, name + ".log")
    if os.path.exists(pf):
        os.unlink(pf)  # an earlier run's file names a port that is gone
    with open(log, "w") as out:
        procs.append(subprocess.Popen([os.path.join(build, "dimmer"), "-c", conf,
                                       "--ports-file", pf], stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 10
    while not (os.path.exists(pf) and "admin" in open(pf).read()):
        if time.monotonic() > deadline:
            sys.exit("dimmer did not start: " + open(log).read()[-2000:])
        time.sleep(0.02)
    # "listen TEXT BOUND" and "admin TEXT BOUND", one line each
    return {w[0]: w[2] for w in (ln.split() for ln in open(pf)) if len(w) == 3}, log


def stop(procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


async def run_load(port, rate, seconds, seed):
    rng = random.Random(seed)
    table = files()
    weights = [s for s, _, _ in table]
    idle = []
    lat = []
    errors = 0
    tasks = set()

    async def one(due, size, ms):
        nonlocal errors
        try:
            if idle:
                r, w = idle.pop()
            else:
                r, w = await asyncio.open_connection(HOST, port)
            w.write(b"GET /bytes/%d?ms=%d HTTP/1.1\r\nHost: q\r\n\r\n" % (size, ms))
            head = await r.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            if not head.startswith(b"HTTP/1.1 200") or m is None:
                raise ValueError(head[:40])
            await r.readexactly(int(m.group(1)))
            lat.append(time.monotonic() - due)
            idle.append((r, w))
        except (OSError, ValueError, asyncio.IncompleteReadError):
            errors += 1

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    t = t0
    end = t0 + seconds
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            break
        delay = t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        _, size, ms = rng.choices(table, weights)[0]
        due = time.monotonic() - max(0.0, loop.time() - t)
        task = asyncio.ensure_future(one(due, size, ms))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    for _, w in idle:
        w.close()
    return lat, errors


def one_run(a, order, tmp, seed):
    procs = []
    try:
        ports = [start_backend(a.build, tmp, "b%d" % i, procs, "--capacity", 1) for i in range(2)]
        conf = ("workers: 1\nlisten: %s:0\nadmin: %s:0\naccess_log: off\n"
                "pools:\n  web:\n    balance: leastconn\n    queue_order: %s\n"
                "    health_check: {interval: 1s}\n    servers:\n"
                % (HOST, HOST, "arrival" if order == "none" else order))
        for i, p in enumerate(ports):
            conf += ('      - {name: b%d, address: "%s:%d", max_conns: %d}\n'
                     % (i, HOST, p, 0 if order == "none" else 1))
        bound, log = start_dimmer(a.build, tmp, "dimmer-" + order, conf, procs)
        port = int(bound["listen"].rsplit(":", 1)[1])
        rate = a.load * 2 * 1000 / mean_service_ms()
        # A short warm-up teaches the catalog the files' sizes (as a running
        # proxy knows its site); it is not measured.
        asyncio.run(run_load(port, rate, 2, seed + 1000))
        lat, errors = asyncio.run(run_load(port, rate, a.seconds, seed))
        if not lat:
            sys.exit("queue_order: no response in the %s run (%d failed): %s"
                     % (order, errors, open(log).read()[-2000:]))
        return statistics.mean(lat) * 1000, len(lat), errors
    finally:
        stop(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--load", type=float, default=0.85,
                    help="offered utilisation of the two servers (default 0.85)")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--orders", default="arrival,size",
                    help="of arrival, size and none (no max_conns: each backend queues "
                    "its own requests in arrival order, dimmer's leastconn picks at once)")
    a = ap.parse_args()
    orders = a.orders.split(",")
    res = {o: [] for o in orders}
    print("queue_order: mean service %.2f ms, %.0f requests/s offered (load %.2f)"
          % (mean_service_ms(), a.load * 2 * 1000 / mean_service_ms(), a.load), file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="queue_order-") as tmp:
        for r in range(a.rounds):
            for o in orders:
                ms, n, err = one_run(a, o, tmp, seed=r + 1)
                res[o].append(ms)
                print("round %d %-8s mean %.2f ms over %d responses, %d failed"
                      % (r + 1, o, ms, n, err), file=sys.stderr, flush=True)
    base = statistics.median(res[orders[0]])
    print("| queue_order | median of %d rounds, mean response ms | vs %s | median of the rounds' "
          "ratios to %s |" % (a.rounds, orders[0], orders[0]))
    print("|---|---|---|---|")
    for o in orders:
        m = statistics.median(res[o])
        # Paired within each round (the runs of a round follow one another),
        # so a round the shared machine slowed as a whole counts once.
        ratio = statistics.median(x / y for x, y in zip(res[o], res[orders[0]]))
        print("| %s | %.2f | %+.1f%% | %.2f |" % (o, m, 100 * (m - base) / base, ratio))


if __name__ == "__main__":
    main()
