#!/usr/bin/env python3
"""
The seed power paper's Experiment II, live (bench/power_exp2.sh runs this):
dimmer in front of NODES dimmer-backends that are cluster nodes (a boot
delay, 70 W at full use, a sleep/wake control, an agent built in), and
dimmer-load playing the exp2 shape, once per policy. One table as the seed's
Table 8, CSV files of every run, and a plot of active and booting servers and
power over time per policy (the seed's Figs. 30-32).

`static:N` is a yardstick, not a policy: no power management, N nodes awake
and the others asleep for the whole run (dimmer's always-on policy pinned
to N servers through the admin listener before the load starts), as an
operator who provisions for the peak would run the cluster.

Energy is the nodes' own meters (each dimmer-backend integrates its power
model exactly: asleep, booting, idle to full by the requests in service);
the quality of service is dimmer-load's score of every response (good < 2 s,
tolerable < 4 s, else failed, as SPECweb's banking workload scores them).

With --queue-order, each node's max_conns is its capacity, so that the
requests beyond it wait in dimmer's queue in that order (queue_order:
arrival or page) instead of in the node's own queue.

    python3 bench/power_exp2.py [--policies always-on,single,...] [--scale 6]
        [--nodes 8] [--sessions 90] [--ramp S] [--queue-order arrival|page]
        [--out build/power_exp2] [--build build]
    (--policies takes static:N too: the yardstick of N nodes always awake)
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HOST = "127.0.0.1"
POLICIES = ["always-on", "single", "dual", "multi", "flexible", "boot-aware"]


def tcp_max(text):
    """--tcp-max: a number > 0 or auto."""
    if text != "auto":
        try:
            if not float(text) > 0:
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError("a number > 0 or auto, got %r" % text)
    return text


def http_json(port, path, method="GET"):
    req = urllib.request.Request("http://%s:%d%s" % (HOST, port, path), method=method)
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def wait_for(pred, timeout, what, show=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    if show is not None:
        print(show(), file=sys.stderr)
    sys.exit("power_exp2: timed out waiting for " + what)


class Run:
    def __init__(self, args, policy, tmp):
        self.args, self.policy, self.tmp = args, policy, tmp
        # static:N: always-on pinned to N servers (the module's docstring).
        self.pin = int(policy.split(":", 1)[1]) if policy.startswith("static:") else None
        self.dimmer_policy = "always-on" if self.pin is not None else policy
        self.label = policy.replace(":", "-")
        self.procs = []

    def start(self, name, argv):
        out = open(os.path.join(self.tmp, name + ".out"), "w")
        err = open(os.path.join(self.tmp, name + ".err"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def node(self, i):
        a = self.args
        name = "n%d" % i
        self.start(name, [
            os.path.join(a.build, "dimmer-backend"), "--listen", "%s:0" % HOST, "--name", name,
            "--control", "%s:0" % HOST, "--capacity", str(a.capacity),
            "--service-ms", str(a.service_ms), "--boot-ms", str(a.boot_ms),
            "--idle-w", str(a.idle_w), "--full-w", "70", "--asleep-w", "3",
            "--booting-w", str(a.booting_w), "--agent-to", "%s:%d" % (HOST, self.metrics),
            "--agent-key-file", self.key, "--pages", "50"])
        path = os.path.join(self.tmp, name + ".out")

        def bound():
            text = open(path).read()
            port = re.search(r" listening on [\d.]+:(\d+)", text)
            ctl = re.search(r" control on [\d.]+:(\d+)", text)
            return (int(port.group(1)), int(ctl.group(1))) if port and ctl else None

        return wait_for(bound, 15, "node %s" % name)

    def go(self):
        a = self.args
        self.key = os.path.join(self.tmp, "agent.key")
        with open(self.key, "w") as f:
            f.write("power_exp2 agents\n")
        conf = os.path.join(self.tmp, "dimmer.yaml")
        ports = os.path.join(self.tmp, "ports")
        # The nodes' agents need dimmer's metrics port when they start, and
        # dimmer the nodes' addresses: the metrics port is a fixed one
        # (--metrics-port), the only port not picked by the kernel.
        self.metrics = a.metrics_port
        nodes = [self.node(i) for i in range(a.nodes)]
        servers = "\n".join(
            '      - {name: n%d, address: "%s:%d", capacity: %d,%s power: {control: "%s:%d", '
            'idle_w: %g, full_w: 70, asleep_w: 3, booting_w: %g}}'
            % (i, HOST, p, a.capacity, " max_conns: %d," % a.capacity if a.queue_order else "",
               HOST, c, a.idle_w, a.booting_w)
            for i, (p, c) in enumerate(nodes))
        with open(conf, "w") as f:
            f.write("""workers: 1
listen: 127.0.0.1:0
admin: 127.0.0.1:0
access_log: off
timeouts: {server_response: 60s, shutdown: 1s, queue: 60s}
power:
  metrics: 127.0.0.1:%d
  key_file: %s
pools:
  web:
    balance: leastconn
    affinity: connection
%s    health_check: {interval: 1s, timeout: 500ms, rise: 1, fall: 2}
    power:
      policy: %s
      period: %ds
      trend_interval: 1s
      min_active: 1
      min_change_interval: 0
      boot_time: %dms
      delay_off: %ds
      history: %ds
      tcp_max: %s
      t1: %g
      margin: %g
      slow_start: 0
    servers:
%s
""" % (self.metrics, self.key,
       "    queue_order: %s\n" % a.queue_order
       + ("    page_bound: %gs\n" % a.page_bound if a.queue_order == "page" else "")
       if a.queue_order else "", self.dimmer_policy, a.period, a.boot_ms, a.delay_off, a.history, a.tcp_max,
       a.t1, a.margin, servers))
        self.start("dimmer", [os.path.join(a.build, "dimmer"), "-c", conf, "--ports-file", ports])
        lines = wait_for(lambda: os.path.exists(ports) and open(ports).read().splitlines(), 15,
                         "dimmer")
        port = int(lines[0].split()[2].rsplit(":", 1)[1])
        admin = int(lines[1].split()[2].rsplit(":", 1)[1])
        if self.pin is not None:
            req = urllib.request.Request("http://%s:%d/power/web/pin?servers=%d"
                                         % (HOST, admin, self.pin), method="POST")
            with urllib.request.urlopen(req, timeout=5) as r:
                r.read()
            wait_for(lambda: [s["state"] for s in http_json(admin, "/power")["pools"][0]["servers"]]
                     .count("sleeping") == a.nodes - self.pin, 60,
                     "%d nodes asleep" % (a.nodes - self.pin))
        # Every node reporting before the load starts (all start awake; the
        # policy may already be sleeping some: the pattern starts low).
        wait_for(lambda: all(s["agent"] is not None or s["state"] != "active"
                             for s in http_json(admin, "/power")["pools"][0]["servers"]),
                 30, "every node's agent",
                 lambda: json.dumps(http_json(admin, "/power"))[:3000] +
                 open(os.path.join(self.tmp, "dimmer.err")).read()[-3000:])
        e0 = sum(http_json(c, "/stats")["energy_wh"] for _, c in nodes)
        summary = os.path.join(a.out, "%s-load.json" % self.label)
        load = self.start("load", [
            os.path.join(a.build, "dimmer-load"), "--pattern", "exp2", "--scale", str(a.scale),
            "--ramp", str(a.ramp),
            "--max-sessions", str(a.sessions), "--conns-per-user", "2", "--quiet",
            "--json", summary, "--csv", os.path.join(a.out, "%s-load.csv" % self.label),
            "--source", "127.0.0.2-127.0.0.9", "http://%s:%d/" % (HOST, port)])
        t0 = time.monotonic()
        rows = []
        while load.poll() is None:
            p = http_json(admin, "/power")["pools"][0]
            watts = sum(http_json(c, "/stats")["watts"] for _, c in nodes)
            rows.append((time.monotonic() - t0, p["live"], p["booting"], p["watts"], watts,
                         p.get("tcp_max", 0)))
            time.sleep(max(0, 1 - (time.monotonic() - t0) % 1))
        elapsed = time.monotonic() - t0
        e1 = sum(http_json(c, "/stats")["energy_wh"] for _, c in nodes)
        lost = sum(http_json(c, "/stats")["lost_at_sleep"] for _, c in nodes)
        end = http_json(admin, "/power")
        decisions = len(end["decisions"])
        pool = end["pools"][0]
        with open(os.path.join(a.out, "%s-power.csv" % self.label), "w") as f:
            f.write("second,active,booting,estimated_w,node_w,tcp_max\n")
            for r in rows:
                f.write("%.1f,%d,%d,%.1f,%.1f,%.1f\n" % r)
        shutil.copy(os.path.join(self.tmp, "dimmer.err"),
                    os.path.join(a.out, "%s-dimmer.log" % self.label))
        with open(summary) as f:
            s = json.load(f)
        return {"policy": self.policy, "seconds": elapsed, "energy_wh": e1 - e0,
                "avg_w": (e1 - e0) * 3600 / elapsed, "score": s["score"], "lost": lost,
                "decisions": decisions,
                "tcp_max": "%.0f (%s)" % (pool.get("tcp_max", 0), pool.get("tcp_max_source", "?"))}


def table(results, out):
    base = next((r for r in results if r["policy"] == "always-on"), results[0])
    lines = ["| policy | avg W | energy Wh | valid responses | good % | tolerable % | fail % | "
             "throughput ratio | normalized QoS % | good per Wh | energy vs always-on |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sc = r["score"]
        valid = sc["good"] + sc["tolerable"]
        ratio = valid / (base["score"]["good"] + base["score"]["tolerable"])
        good = sc["good"] / sc["total"] if sc["total"] else 0
        lines.append("| %s | %.1f | %.2f | %d | %.2f | %.2f | %.2f | %.3f | %.1f | %.0f | %.0f%% |" % (
            r["policy"], r["avg_w"], r["energy_wh"], valid, sc["good_pct"], sc["tolerable_pct"],
            sc["fail_pct"], ratio, 100 * good * ratio, sc["good"] / r["energy_wh"],
            100 * r["energy_wh"] / base["energy_wh"]))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text)
    return text


def plot(results, out):
    if shutil.which("gnuplot") is None:
        print("power_exp2: no gnuplot (apt-get install gnuplot-nox): no plot", file=sys.stderr)
        return
    n = len(results)
    g = ["set terminal png size 1200,%d" % (240 * n),
         "set output '%s'" % os.path.join(out, "power_exp2.png"),
         "set datafile separator ','", "set key top left", "set multiplot layout %d,1" % n,
         "set ytics nomirror", "set y2tics", "set ylabel 'servers'", "set y2label 'W'"]
    for r in results:
        csv = os.path.join(out, "%s-power.csv" % r["policy"].replace(":", "-"))
        g += ["set title '%s'" % r["policy"],
              "plot '%s' every ::1 using 1:2 with steps title 'active', "
              "'' every ::1 using 1:3 with steps title 'booting', "
              "'' every ::1 using 1:5 axes x1y2 with lines title 'power (W)'" % csv]
    g.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(g), text=True, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--scale", type=float, default=6)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=90)
    ap.add_argument("--capacity", type=int, default=10)
    ap.add_argument("--service-ms", type=int, default=100)
    ap.add_argument("--boot-ms", type=int, default=7000)
    ap.add_argument("--idle-w", type=float, default=35)
    ap.add_argument("--booting-w", type=float, default=60)
    ap.add_argument("--tcp-max", type=tcp_max, default="200",
                    help="connections per node at full power, or auto (learned from the "
                    "nodes' agents; the value it learned is printed)")
    ap.add_argument("--t1", type=float, default=60, help="the threshold T1, W a node")
    ap.add_argument("--margin", type=float, default=0.25, help="boot-aware's margin")
    ap.add_argument("--period", type=int, default=5)
    ap.add_argument("--delay-off", type=int, default=30)
    ap.add_argument("--history", type=int, default=3600,
                    help="boot-aware's memory of steps, s (its half-life)")
    ap.add_argument("--ramp", type=float, default=0,
                    help="every rise and fall of exp2 at least this long, s of the pattern "
                         "(dimmer-load --ramp; 0: exp2's 5 s)")
    ap.add_argument("--queue-order", choices=("arrival", "page"), default=None,
                    help="each node's max_conns at its capacity, so that the requests beyond "
                    "it wait in dimmer's queue, in this order (default: no max_conns, they "
                    "wait in the node's own queue)")
    ap.add_argument("--page-bound", type=float, default=2,
                    help="queue_order: page's page_bound, s")
    ap.add_argument("--metrics-port", type=int, default=19902)
    ap.add_argument("--out", default="build/power_exp2")
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = []
    for policy in a.policies.split(","):
        tmp = tempfile.mkdtemp(prefix="power_exp2-")
        run = Run(a, policy, tmp)
        try:
            print("power_exp2: %s ..." % policy, file=sys.stderr, flush=True)
            results.append(run.go())
            r = results[-1]
            print("power_exp2: %s: %.1f W, %d responses, good %.2f%%, lost at sleep %d, "
                  "tcp_max %s" % (policy, r["avg_w"], r["score"]["total"], r["score"]["good_pct"],
                                  r["lost"], r["tcp_max"]), file=sys.stderr, flush=True)
        finally:
            run.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(table(results, a.out))
    plot(results, a.out)


if __name__ == "__main__":
    main()
