"""
The whole power loop with real processes: dimmer with `policy: flexible`,
then `boot-aware`, in front of four dimmer-backends that are cluster nodes
(capacity, service time on timers, a boot delay, a sleep/wake control that
the http actuator reaches), and dimmer-load in session mode playing
low -> high -> low. From /power, the backends' own counters and dimmer's
log it asserts that servers were slept at low load and woken during the
rise, that no request reached a sleeping or booting backend (every attempt
the proxy started on a backend is a request that backend served, and none
was lost at a sleep), and that every request got a response (counted on both
sides). Then scale to zero: with min_active 0 every server sleeps, a request
held longer than hold_timeout gets 503 with Retry-After, and one that waits
long enough wakes a server and is served.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

BOOT_MS = 1500
NODES = 4
# Sessions: low (2), a rise to 40, high, a fall, low again; then none for the
# last seconds, so that every page under way ends before the run does and the
# two sides' counts can be compared. About 30 s.
PATTERN = "0,2\n7,2\n9,40\n17,40\n19,2\n26,2\n26.5,0\n30,0\n"


class PowerLoopTest(H.DimmerTest):
    def node(self, name):
        return self.start_node("--control", "%s:0" % H.HOST, "--capacity", 8, "--service-ms", 40,
                               "--boot-ms", BOOT_MS, "--idle-w", 25, "--full-w", 70, name=name)

    def config(self, policy, min_active=1):
        servers = "\n".join(
            '      - {name: %s, address: "%s:%d", capacity: 8, power: {control: "%s:%d", '
            'idle_w: 25, full_w: 70}}' % (n.name, H.HOST, n.port, H.HOST, n.control)
            for n in self.nodes)
        return ("workers: 2\nlisten: 127.0.0.1:0\nadmin: 127.0.0.1:0\n"
                "pools:\n  web:\n    balance: leastconn\n"
                "    health_check: {interval: 200ms, timeout: 300ms, rise: 1, fall: 1}\n"
                "    power:\n      policy: %s\n      period: 1s\n      trend_interval: 500ms\n"
                "      min_active: %d\n      min_change_interval: 1s\n      action_interval: 0\n"
                "      boot_time: %dms\n      delay_off: 3s\n      drain_timeout: 5s\n"
                "      slow_start: 500ms\n      tcp_max: 8\n      hold_timeout: 20s\n"
                "    servers:\n%s\n" % (policy, min_active, BOOT_MS, servers))

    def power(self):
        r = H.get(self.d.admin, "/power", timeout=5.0)
        self.assertEqual(r.status, 200)
        return json.loads(r.body)["pools"][0]

    def states(self):
        return {s["name"]: s["state"] for s in self.power()["servers"]}

    def run_loop(self, policy):
        self.nodes = [self.node("n%d" % i) for i in range(NODES)]
        self.d = self.start_dimmer_conf(self.write_config(self.config(policy)))
        pattern = self.path("pattern.csv")
        with open(pattern, "w") as f:
            f.write("seconds,sessions\n" + PATTERN)
        summary = self.path("load.json")
        load = self.start_proc("load", [
            H.DIMMER_LOAD, "--pattern", pattern, "--think", "300", "--pages", "20",
            "--keepalive", "2000", "--timeout", "8000", "--quiet", "--json", summary,
            "http://%s:%d/" % (H.HOST, self.d.port)])
        # /power over the run: what each server went through, and when.
        seen = {n.name: set() for n in self.nodes}
        live = []
        start = time.monotonic()
        while load.alive() and time.monotonic() - start < 90:
            p = self.power()
            live.append((time.monotonic() - start, p["live"], p["booting"]))
            for s in p["servers"]:
                seen[s["name"]].add(s["state"])
            time.sleep(0.1)  # a sampling period, not a wait for an event
        self.assertEqual(load.wait(30), 0, load.stderr())
        with open(summary) as f:
            result = json.load(f)
        low1 = [n for t, n, b in live if 5 <= t <= 7.5]
        high = [n + b for t, n, b in live if 11 <= t <= 18]
        self.assertTrue(low1 and min(low1) < NODES,
                        "no server slept at low load: %s" % live)
        self.assertTrue(high and max(high) > min(low1),
                        "no server woken during the rise: %s" % live)
        slept = [name for name, st in seen.items() if "sleeping" in st]
        woken = [name for name, st in seen.items() if "booting" in st]
        self.assertTrue(slept and woken, seen)
        # The nodes agree: they slept and woke, and nothing was lost at a sleep.
        node_stats = {n.name: n.stats() for n in self.nodes}
        self.assertGreater(sum(s["sleeps"] for s in node_stats.values()), 0, node_stats)
        self.assertGreater(sum(s["wakes"] for s in node_stats.values()), 0, node_stats)
        for name, s in node_stats.items():
            self.assertEqual(s["lost_at_sleep"], 0, (name, s))
            self.assertEqual(s["requests_not_awake"], 0, (name, s))
        # Every attempt the proxy started on a node is a request it served: no
        # request was sent to a sleeping or booting node (it would have been
        # reset there, unserved).
        hosts = {h["host"]: h for h in self.d.admin_stats()["hosts"]}
        served = 0
        for n in self.nodes:
            h = hosts["%s:%d" % (H.HOST, n.port)]
            self.assertEqual(h["inflight"], 0)
            self.assertEqual(h["started"], node_stats[n.name]["requests"], (n.name, h))
            served += node_stats[n.name]["requests"]
        # Every request got a response, and the two sides count the same.
        score = result["score"]
        self.assertGreater(score["total"], 200, result)
        self.assertEqual(score["fail"], 0, result)
        self.assertEqual(score["total"], served, result)
        log = self.d.proc.stderr()
        self.assertIn("drained: sleep", log)
        self.assertIn("s after its wake: active", log)
        self.assertRegex(log, r"power: pool web: %s: W \[" % re.escape(policy))
        return log

    def test_flexible(self):
        self.run_loop("flexible")

    def all_asleep(self):
        try:
            H.wait_until(lambda: set(self.states().values()) == {"sleeping"}, 60,
                         "every server to sleep with min_active 0")
        except AssertionError:
            print(json.dumps(self.power(), indent=1), file=sys.stderr)
            raise

    def test_boot_aware_then_scale_to_zero(self):
        self.run_loop("boot-aware")
        # min_active 0 by a reload (the manager's state carries over): with no
        # load every server sleeps.
        self.reload_config(self.config("boot-aware", min_active=0).replace(
            "hold_timeout: 20s", "hold_timeout: 500ms"))
        self.all_asleep()
        # Held longer than hold_timeout (0.5 s, the boot takes 1.5 s): 503 with
        # Retry-After, the boot time in seconds.
        wakes = sum(n.stats()["wakes"] for n in self.nodes)
        r = H.get(self.d.port, "/healthz", timeout=10)
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.header("Retry-After"), "2")
        # It woke one all the same.
        H.wait_until(lambda: sum(n.stats()["wakes"] for n in self.nodes) > wakes, 10,
                     "the held request to wake a node")
        # With a hold long enough, a request that finds every server asleep is
        # held while one boots, then served.
        self.reload_config(self.config("boot-aware", min_active=0))
        self.all_asleep()
        started = time.monotonic()
        r = H.get(self.d.port, "/page/1.html", timeout=30)
        waited = time.monotonic() - started
        self.assertEqual(r.status, 200, r.body)
        self.assertGreater(waited, BOOT_MS / 1000 * 0.9)
        self.assertIn("requests held with no server awake", self.d.proc.stderr())


if __name__ == "__main__":
    H.main()
