"""
Servers are hosts (DESIGN.md, "Threads"): one entry per address for the life
of the process, so what the health checks and passive checks know about a
server survives a SIGHUP reload, pools naming one address share its health,
and /stats counts per host the TCP connections open to it
(server_connections) and the clients bound to it (bound_clients).
"""
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

# rise 30: a server back on its port stays out for 3 s of good checks, so a
# reload that forgot it was down would show at once.
SLOW_RISE = {"path": "/healthz", "interval": "100ms", "timeout": "300ms", "rise": 30, "fall": 2}
FAST_CHECKS = {"path": "/healthz", "interval": "100ms", "timeout": "300ms", "rise": 2, "fall": 2}
NO_PASSIVE = {"max_fails": 0}


class HostTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")

    def state(self, name, pool=None):
        return self.d.servers(pool)[name]["state"]

    def backends_of(self, n):
        return [H.get(self.d.port, "/bytes/8").header("X-Backend") for _ in range(n)]

    def reload(self, pools, **kw):
        gen = self.d.admin_stats()["generation"]
        with open(self.d.conf_path, "w") as f:
            f.write(H.yaml_config(0, pools, admin=0, **kw))
        self.d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: self.d.admin_stats()["generation"] == gen + 1, 5,
                     "generation %d" % (gen + 1))

    def test_down_by_health_checks_stays_down_across_reload(self):
        pools = {"web": self.pool(self.b1, self.b2, health_check=SLOW_RISE, passive=NO_PASSIVE)}
        self.d = self.start_dimmer(pools)
        self.b2.proc.kill()
        H.wait_until(lambda: self.state("b2") == "down", 5, "b2 marked down")
        b2 = self.start_backend("b2", self.b2.port)  # healthy again, but not for 30 checks
        marked = time.monotonic()
        self.reload(pools)
        self.assertEqual(self.state("b2"), "down")
        self.assertEqual(self.backends_of(10), ["b1"] * 10)
        if time.monotonic() - marked < 2.5:
            self.assertEqual(b2.requests(), 0)
        # The checks of the new generation bring it back once it has risen.
        H.wait_until(lambda: self.state("b2") == "up", 10, "b2 back up")
        self.assertIn("b2", self.backends_of(4))

    def test_a_reload_that_stops_the_checks_brings_a_down_server_up_and_says_so(self):
        pools = {"web": self.pool(self.b1, self.b2, health_check=FAST_CHECKS, passive=NO_PASSIVE)}
        self.d = self.start_dimmer(pools)
        self.b2.proc.kill()
        H.wait_until(lambda: self.state("b2") == "down", 5, "b2 marked down")
        self.reload({"web": self.pool(self.b1, self.b2, passive=NO_PASSIVE)})
        self.assertEqual(self.state("b2"), "up")  # nothing would ever bring it back
        self.assertIn("server web/b2 is UP (no longer health-checked)", self.d.proc.stderr())
        self.assertNotIn("server web/b1 is UP (no longer", self.d.proc.stderr())

    def reload_at_checks(self, mode, interval, timeout, fall, last):
        """
        A fault backend checked at /fault/MODE (and b1), a reload as its
        first and second checks come, then its check number last: returns
        its state then (each check begins only after the last one's verdict).
        """
        fb = self.start_fault_backend()
        checks = {"path": "/fault/" + mode, "interval": interval, "timeout": timeout,
                  "rise": 1, "fall": fall}
        pools = {"web": {"balance": "roundrobin", "passive": NO_PASSIVE, "health_check": checks,
                         "servers": [("fb", fb.port), ("b1", self.b1.port)]}}
        self.d = self.start_dimmer(pools)
        for i in (1, 2, last):
            H.wait_until(lambda: fb.count("got " + mode) >= i, 10, "check %d" % i)
            if i < last:
                self.reload(pools)
        return self.state("fb")

    def test_a_run_of_failed_checks_goes_on_across_reloads(self):
        # fall 3, and a reload after the first and the second failed check:
        # each reload's checker began the run again, so a server failing every
        # check stayed up for as long as reloads came more often than three
        # intervals. By the fourth check, the third has taken it out.
        self.assertEqual(self.reload_at_checks("reset", "500ms", "2s", 3, 4), "down")

    def test_a_check_in_flight_at_a_reload_gives_its_verdict(self):
        # A server that never answers, checked with a 1 s timeout, and a
        # reload while each check is out: the reload cancelled the check, so
        # no check ever ended and the server stayed up through any run of
        # reloads. Now the retired checker's check times out and counts, and
        # the next one begins after it: by the third, fall 2 has taken it out.
        self.assertEqual(self.reload_at_checks("silent", "100ms", "1s", 2, 3), "down")

    def test_a_reload_while_a_check_waits_for_a_retired_one_keeps_the_run(self):
        # The same with checks 10 ms apart: the second reload comes more than
        # an interval and a timeout after the check the first one retired
        # was due, and its checker took the host's run for a stale one
        # (never down).
        self.assertEqual(self.reload_at_checks("silent", "10ms", "1s", 2, 3), "down")

    def test_a_shorter_interval_applies_at_the_reload(self):
        # Checks a minute apart, reloaded to 100 ms apart: the next check
        # waited out the minute.
        fb = self.start_fault_backend()
        checks = {"path": "/fault/reset", "interval": "60s", "timeout": "1s"}
        pools = {"web": {"balance": "roundrobin", "health_check": checks, "passive": NO_PASSIVE,
                         "servers": [("fb", fb.port)]}}
        self.d = self.start_dimmer(pools)
        H.wait_until(lambda: fb.count("got reset") >= 1, 10, "the first check")
        checks["interval"] = "100ms"
        self.reload(pools)
        H.wait_until(lambda: fb.count("got reset") >= 3, 10, "checks 100 ms apart")

    def holding_server(self):
        """A server that takes connections and never answers: (port, the sockets taken)."""
        srv = socket.socket()
        self.addCleanup(srv.close)
        srv.bind((H.HOST, 0))
        srv.listen(8)
        held = []
        self.addCleanup(lambda: [c.close() for c in held])

        def take():
            try:
                while True:
                    held.append(srv.accept()[0])
            except OSError:
                pass  # closed at the cleanup

        threading.Thread(target=take, daemon=True).start()
        return srv.getsockname()[1], held

    def test_a_stop_does_not_wait_for_a_retired_check(self):
        # A check out at a reload goes on in the retired checker; a stop
        # right after ends it there and then, not after its 60 s timeout.
        port, held = self.holding_server()
        checks = {"path": "/healthz", "interval": "100ms", "timeout": "60s"}
        pools = {"web": {"balance": "roundrobin", "health_check": checks,
                         "servers": [("hold", port)]}}
        self.d = self.start_dimmer(pools, timeouts={"shutdown": "50s"})
        H.wait_until(lambda: held, 10, "the first check")
        self.reload(pools)
        self.d.proc.signal(signal.SIGTERM)
        self.assertEqual(self.d.proc.wait(20), 0, self.d.proc.stderr())

    def test_a_retired_check_does_not_take_out_a_server_no_longer_checked(self):
        # Down by its checks, then a reload without checks marks it up; the
        # check out at the reload times out after: it took the server out
        # again, with no check left to bring it back.
        port, held = self.holding_server()
        checks = {"path": "/healthz", "interval": "100ms", "timeout": "1s", "fall": 1}
        pools = {"web": {"balance": "roundrobin", "health_check": checks, "passive": NO_PASSIVE,
                         "servers": [("hold", port)]}}
        self.d = self.start_dimmer(pools)
        H.wait_until(lambda: self.state("hold") == "down" and len(held) == 2, 10,
                     "down, and the second check out")
        del pools["web"]["health_check"]
        self.reload(pools)
        self.assertEqual(self.state("hold"), "up")
        # The second check timed out once dimmer closes its connection.
        held[1].settimeout(10)
        while held[1].recv(4096):
            pass  # the check's request, then its end
        self.assertEqual(self.state("hold"), "up")

    def test_passive_down_and_fails_survive_reload(self):
        passive = {"max_fails": 2, "fail_timeout": "3s"}
        pools = {"web": self.pool(self.b1, self.b2, passive=passive)}
        self.d = self.start_dimmer(pools)
        self.b2.proc.kill()
        # Round robin: the first request tries b1, the second b2 (refused, retried on b1).
        self.assertEqual(self.backends_of(2), ["b1", "b1"])
        s = self.d.servers()["b2"]
        self.assertEqual((s["failures"], s["fails"], s["state"]), (1, 1, "up"))
        # One consecutive failure is remembered by the host across the reload ...
        self.reload(pools)
        s = self.d.servers()["b2"]
        self.assertEqual((s["failures"], s["fails"], s["state"]), (0, 1, "up"))
        # ... so one more takes b2 out, with the counters of the new generation at 1.
        self.assertEqual(self.backends_of(2), ["b1", "b1"])
        s = self.d.servers()["b2"]
        self.assertEqual((s["failures"], s["fails"], s["state"]), (1, 0, "failing"))
        marked = time.monotonic()
        b2 = self.start_backend("b2", self.b2.port)
        # And the down period survives a reload too.
        self.reload(pools)
        self.assertEqual(self.state("b2"), "failing")
        self.assertGreater(self.d.servers()["b2"]["down_for_ms"], 0)
        self.assertEqual(self.backends_of(6), ["b1"] * 6)
        if time.monotonic() - marked < 2.5:
            self.assertEqual(b2.requests(), 0)
        H.wait_until(lambda: self.state("b2") == "up", 6, "fail_timeout to pass")
        self.assertIn("b2", self.backends_of(4))

    def test_pools_naming_one_address_share_its_health(self):
        pools = {
            "web": self.pool(self.b1, self.b2, health_check=FAST_CHECKS, passive=NO_PASSIVE),
            # No checks of its own: it sees what web's checks learn about b2's host.
            "api": {"balance": "roundrobin", "passive": NO_PASSIVE,
                    "servers": [("other-name", self.b2.port), ("b1", self.b1.port)]},
        }
        self.d = self.start_dimmer(pools, default_pool="web")
        H.wait_until(lambda: self.state("other-name", "api") == "up", 5, "api up")
        self.assertEqual(self.d.servers("api")["other-name"]["host"],
                         self.d.servers("web")["b2"]["address"])
        self.b2.proc.kill()
        H.wait_until(lambda: self.state("b2", "web") == "down", 5, "web/b2 down")
        self.assertEqual(self.state("other-name", "api"), "down")
        self.start_backend("b2", self.b2.port)
        H.wait_until(lambda: self.state("b2", "web") == "up", 5, "web/b2 up")
        self.assertEqual(self.state("other-name", "api"), "up")

    def test_server_connections_and_bound_clients(self):
        pools = {"solo": self.pool(self.b1, balance="age", passive=NO_PASSIVE)}
        self.d = self.start_dimmer(pools, timeouts={"client_keepalive": "60s"})
        base = self.b1.stats()["connections"]  # the harness's probes and this query
        s = self.d.servers()["b1"]
        self.assertEqual((s["server_connections"], s["bound_clients"]), (0, 0))
        clients = [H.Conn(self.d.port) for _ in range(5)]
        try:
            # Three slow requests at once need three server connections.
            for c in clients[:3]:
                c.send(H.build_request("GET", "/slow/300"))
            for c in clients[:3]:
                self.assertEqual(c.read_response().status, 200)
            for c in clients[3:]:
                self.assertEqual(c.request("GET", "/bytes/8").status, 200)
            s = self.d.servers()["b1"]
            self.assertEqual(s["bound_clients"], 5)
            self.assertGreaterEqual(s["server_connections"], 3)
            # What the backend accepted since base, less this query's own connection.
            accepted = self.b1.stats()["connections"] - base - 1
            self.assertEqual(s["server_connections"], accepted)
        finally:
            for c in clients:
                c.close()
        H.wait_until(lambda: self.d.servers()["b1"]["bound_clients"] == 0, 5,
                     "bound_clients back to 0")
        # Idle in the keep-alive pool, still open: closing the clients closes none.
        self.assertEqual(self.d.servers()["b1"]["server_connections"], accepted)
        # The server going away closes them, each leaving the count in its close callback.
        self.b1.proc.kill()
        H.wait_until(lambda: self.d.servers()["b1"]["server_connections"] == 0, 5,
                     "server_connections back to 0")


if __name__ == "__main__":
    H.main()
