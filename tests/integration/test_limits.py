"""
The connection limits as a client sees them: at limits.max_conns a worker
stops accepting and new connections wait in the kernel's listen queue (no
reset), and are served once a slot frees; at limits.max_conns_per_client a
client address's next connection is closed at once, unanswered; over
limits.rate a client address's request is answered 429 with Retry-After.
"""
import os
import resource
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

NO_PASSIVE = {"max_fails": 0}
# How long a connection left waiting is watched for bytes it must not get.
QUIET = 1.0


def silent_for(conn, seconds):
    """True if conn gets no byte, no EOF and no reset for seconds."""
    conn.sock.settimeout(seconds)
    try:
        data = conn.sock.recv(1)
    except (socket.timeout, TimeoutError):
        return True
    except ConnectionResetError:
        raise AssertionError("connection reset while waiting for a slot")
    raise AssertionError("got %r (EOF when empty) while waiting for a slot" % data)


def answer_all(conns, timeout):
    """Reads one response from each of conns, in whatever order they come; statuses."""
    deadline = time.monotonic() + timeout
    pending = list(conns)
    statuses = []
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("%d connections not answered in %ss" % (len(pending), timeout))
        ready, _, _ = select.select([c.sock for c in pending], [], [], left)
        for c in [c for c in pending if c.sock in ready]:
            r = c.read_response(timeout=5)
            statuses.append(r.status)
            pending.remove(c)
            c.close()
    return statuses


class MaxConnsTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def limits(self):
        lim = self.d.admin_stats()["limits"]
        return {k: lim[k] for k in ("accept_pauses", "paused_workers")}

    def held(self, n):
        conns = []
        for _ in range(n):
            c = H.Conn(self.d.port)
            conns.append(c)
            self.assertEqual(c.request("GET", "/bytes/2").status, 200)
        return conns

    def test_full_worker_leaves_new_connections_in_the_listen_queue(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=1, limits={"max_conns": 2})
        first, second = self.held(2)
        self.assertEqual(self.limits(), {"accept_pauses": 0, "paused_workers": 0})
        # The TCP handshake completes (the kernel's backlog), but nothing answers.
        third = H.Conn(self.d.port)
        third.send(H.build_request("GET", "/bytes/3"))
        self.assertTrue(silent_for(third, QUIET))
        H.wait_until(lambda: "accepting paused" in self.d.proc.stderr(), 5, "the pause logged")
        self.assertIn("limits.max_conns (2) reached", self.d.proc.stderr())
        self.assertEqual(self.limits(), {"accept_pauses": 1, "paused_workers": 1})
        # The two held still work.
        self.assertEqual(second.request("GET", "/bytes/4").body, H.pattern(4))
        first.close()
        r = third.read_response(timeout=5)
        self.assertEqual((r.status, r.body), (200, H.pattern(3)))
        # Full again (second and third), with nothing waiting: still one pause.
        self.assertNotIn("accepting resumed", self.d.proc.stderr())
        second.close()
        H.wait_until(lambda: "accepting resumed" in self.d.proc.stderr(), 5, "the resume logged")
        self.assertEqual(self.limits(), {"accept_pauses": 1, "paused_workers": 0})
        self.assertEqual(third.request("GET", "/bytes/5").body, H.pattern(5))
        third.close()
        self.assertEqual(H.get(self.d.port, "/bytes/1").status, 200)
        log = self.d.proc.stderr()
        self.assertEqual(log.count("accepting paused"), 1)
        self.assertEqual(log.count("accepting resumed"), 1)

    def test_many_waiting_connections_are_neither_refused_nor_reset(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=1, limits={"max_conns": 2})
        holders = self.held(2)
        waiting = []
        try:
            for i in range(10):
                # A refused or reset connect raises here.
                c = H.Conn(self.d.port)
                waiting.append(c)
                c.send(H.build_request("GET", "/bytes/%d" % (i + 1)))
            for c in waiting:
                self.assertTrue(silent_for(c, QUIET / 10))
            for c in holders:
                c.close()
            # Each waiting one is served and closed in turn, frees its slot for the next.
            self.assertEqual(answer_all(waiting, 15), [200] * 10)
        finally:
            for c in holders + waiting:
                c.close()
        H.wait_until(lambda: "accepting resumed" in self.d.proc.stderr(), 5, "the resume logged")
        self.assertEqual(self.d.proc.stderr().count("accepting paused"), 1)
        self.assertEqual(self.limits()["accept_pauses"], 1)


    def test_a_stop_serves_the_connection_left_pending_at_max_conns(self):
        # The connection that woke the full worker's listener is open, out
        # of the listen queue, its fd held by libuv: a SIGUSR2 (or SIGTERM)
        # takes it and answers it, rather than reset it with the listener,
        # and the one behind it in the listen queue goes to the new process.
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=1, limits={"max_conns": 1})
        holder, = self.held(1)
        pending = H.Conn(self.d.port)
        pending.send(H.build_request("GET", "/bytes/3"))
        H.wait_until(lambda: "accepting paused" in self.d.proc.stderr(), 5, "the pause")
        queued = H.Conn(self.d.port)
        queued.send(H.build_request("GET", "/bytes/4"))
        self.sigusr2(self.d, self.d.proc.pid, ready_then=holder.close)
        r = pending.read_response(timeout=10)
        self.assertEqual((r.status, r.body), (200, H.pattern(3)))
        self.assertEqual(r.header("connection"), "close")
        r = queued.read_response(timeout=10)
        self.assertEqual((r.status, r.body), (200, H.pattern(4)))
        for c in (pending, queued):
            c.close()

    def test_the_open_file_limit_pauses_accepting_as_max_conns_does(self):
        # Under `ulimit -n 64` accept() would fail with EMFILE, and libuv then
        # closes the connections waiting in the listen queue, unanswered.
        # dimmer stops accepting below the limit instead: past it, connections
        # wait in the queue as at limits.max_conns, and each is served in turn.
        conf = self.write_config(H.yaml_config(
            0, {"web": self.pool(self.b1, passive=NO_PASSIVE)}, admin=0, workers=1,
            limits={"max_conns": 1000}))
        self.d = self.start_dimmer_conf(conf, wrapper=["prlimit", "--nofile=64:64", "--"])
        lim = self.d.admin_stats()["limits"]
        cap = lim["socket_cap"]
        self.assertEqual((lim["open_files"], lim["sockets"]), (64, 0))
        self.assertTrue(1 <= cap < 32, cap)
        self.assertIn("accepting pauses at %d connections" % (cap // 2), self.d.proc.stderr())
        conns = []
        try:
            for i in range(60):
                c = H.Conn(self.d.port)
                conns.append(c)
                c.send(H.build_request("GET", "/bytes/%d" % (i + 1)))
            # The last ones wait, unanswered and open.
            for c in conns[-10:]:
                self.assertTrue(silent_for(c, QUIET / 10))
            self.assertIn("the open-file limit (%d) reached" % (cap // 2), self.d.proc.stderr())
            self.assertEqual(self.d.admin_stats()["limits"]["paused_workers"], 1)
            # Each one answered closes, and lets one more in: all 60 are served.
            self.assertEqual(answer_all(conns, 30), [200] * 60)
        finally:
            for c in conns:
                c.close()
        H.wait_until(lambda: "accepting resumed" in self.d.proc.stderr(), 5, "the resume logged")
        self.assertEqual(H.get(self.d.port, "/bytes/1").status, 200)

    def test_health_checks_keep_their_descriptors_under_the_open_file_limit(self):
        # Regression: the data path could take all but 16 + limit/32 of the
        # descriptors, whatever the number of servers checked; with clients
        # holding them, checks of servers that never answer (each holds its
        # socket for the timeout) failed with EMFILE, a warning each, and the
        # same checks retook the freed sockets: some servers were never
        # checked, and stayed up though they answered nothing.
        dark = []
        for _ in range(150):  # listen, never accept: checks hang to their timeout
            s = socket.socket()
            s.bind((H.HOST, 0))
            s.listen(0)
            self.addCleanup(s.close)
            dark.append(("d%d" % len(dark), s.getsockname()[1]))
        pools = {"web": self.pool(self.b1, passive=NO_PASSIVE),
                 "dark": {"servers": dark, "passive": NO_PASSIVE,
                          "health_check": {"interval": "200ms", "timeout": "500ms", "rise": 1,
                                           "fall": 1}}}
        conf = self.write_config(H.yaml_config(0, pools, admin=0, workers=1,
                                               limits={"max_conns": 1000},
                                               routes=[{"path": "/", "pool": "web"}]))
        self.d = self.start_dimmer_conf(conf, wrapper=["prlimit", "--nofile=400:400", "--"])
        self.assertIn("health checks, power actions and the admin listener may hold",
                      self.d.proc.stderr())
        conns = []
        try:
            # Slow requests, each a client and a server connection: as many as
            # dimmer takes, the rest wait in the listen queue.
            for _ in range(150):
                conns.append(H.Conn(self.d.port))
                conns[-1].send(H.build_request("GET", "/slow/15000"))
            down = lambda: all(s["state"] == "down"  # noqa: E731
                               for s in self.d.servers("dark").values())
            H.wait_until(down, 8, "every dark server checked and down")
            self.assertNotIn("health check not run", self.d.proc.stderr())
        finally:
            for c in conns:
                c.close()

    def test_no_descriptor_for_a_server_connection_is_not_the_servers_fault(self):
        # dimmer runs out of descriptors: each request gets a 503 that says
        # so, and the server is not counted as failing (it was: three such
        # requests, and a healthy server was down for passive.fail_timeout).
        self.d = self.start_dimmer({"web": self.pool(self.b1)}, workers=1)
        pid = self.d.proc.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        conns = [H.Conn(self.d.port) for _ in range(4)]
        try:
            for c in conns:
                self.assertEqual(c.request("GET", "/bytes/3").status, 200)
            for c in conns:
                # No idle server connection left to reuse: the next request needs a new one.
                r = H.request(self.d.admin, "POST", "/hosts/%s:%d/close-idle" % (H.HOST, self.b1.port))
                self.assertEqual(r.status, 200)
                H.wait_until(lambda: self.d.servers()["b1"]["server_connections"] == 0, 5,
                             "no server connection open")
                # The soft limit at the lowest free descriptor: the next
                # socket() fails. Set once the admin requests' connections
                # have closed (dimmer closes them after their answers), and
                # again should one close since.
                seen = [None, time.monotonic()]

                def limited():
                    used = {int(f) for f in os.listdir("/proc/%d/fd" % pid)}
                    low = min(set(range(len(used) + 1)) - used)
                    if low != seen[0]:
                        seen[0], seen[1] = low, time.monotonic()
                        resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, hard))
                        return False
                    return time.monotonic() - seen[1] > 0.3

                H.wait_until(limited, 10, "dimmer's descriptors to settle under the limit")
                r = c.request("GET", "/bytes/5")
                self.assertEqual(r.status, 503)
                self.assertIn(b"this process's limit", r.body)
                self.assertTrue(c.closed_by_peer(5))
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        finally:
            for c in conns:
                c.close()
        s = self.d.servers()["b1"]
        self.assertEqual((s["state"], s["fails"], s["failures"]), ("up", 0, 0))
        r = H.get(self.d.port, "/bytes/6")
        self.assertEqual((r.status, r.body), (200, H.pattern(6)))


class PerClientTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def refused(self):
        return self.d.admin_stats()["limits"]["refused"]["max_conns_per_client"]

    def test_address_at_its_cap_gets_new_connections_closed(self):
        # Two workers: the cap is per address across the process, whichever
        # worker's listener a connection lands on.
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=2, limits={"max_conns_per_client": 2})
        held = []
        try:
            for _ in range(2):
                c = H.Conn(self.d.port)
                held.append(c)
                self.assertEqual(c.request("GET", "/bytes/2").status, 200)
            self.assertEqual(self.refused(), 0)
            for i in range(3):
                with H.Conn(self.d.port) as extra:
                    try:
                        extra.send(H.build_request("GET", "/bytes/2"))
                    except OSError:
                        pass
                    self.assertTrue(extra.closed_by_peer(3), "connection %d over the cap kept" % i)
                    self.assertEqual(extra.buf, b"")
            self.assertEqual(self.refused(), 3)
            # The held ones keep working; closing one makes room for one.
            self.assertEqual(held[0].request("GET", "/bytes/3").body, H.pattern(3))
            held.pop().close()

            def served_on_new_connection():
                try:
                    with H.Conn(self.d.port, timeout=2) as c:
                        return c.request("GET", "/bytes/2", timeout=2).status == 200
                except (OSError, H.Closed):
                    return False

            # The close reaches dimmer a moment after the client's close() returns.
            H.wait_until(served_on_new_connection, 5, "room for a new connection")
        finally:
            for c in held:
                c.close()

    def test_no_cap_by_default(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)})
        conns = [H.Conn(self.d.port) for _ in range(20)]
        try:
            for c in conns:
                self.assertEqual(c.request("GET", "/bytes/1").status, 200)
        finally:
            for c in conns:
                c.close()
        self.assertEqual(self.refused(), 0)
        self.assertEqual(self.d.admin_stats()["limits"]["refused"]["rate"], 0)


class RateTest(H.DimmerTest):
    RATE = 5

    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def refused(self):
        return self.d.admin_stats()["limits"]["refused"]["rate"]

    def until_refused(self, c, start, burst):
        """Requests on c until one is refused: (its response, the 200s before it).
        The bucket refills RATE tokens a second, so a slow run may earn a few
        more 200s than the burst, never more than the time since start allows."""
        ok = 0
        while True:
            r = c.request("GET", "/bytes/2")
            if r.status != 200:
                earned = int((time.monotonic() - start) * self.RATE)
                self.assertGreaterEqual(ok, burst)
                self.assertLessEqual(ok, burst + earned)
                return r, ok
            ok += 1
            self.assertLess(ok, 100, "never refused")

    def test_address_over_its_rate_gets_429_and_keeps_its_connection(self):
        # Two workers share one bucket per address.
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=2, limits={"rate": self.RATE, "burst": 5})
        base = self.b1.requests()
        base -= self.b1.requests() - base
        with H.Conn(self.d.port) as c:
            start = time.monotonic()
            r, ok = self.until_refused(c, start, 5)
            refused_at = time.monotonic()
            self.assertEqual(r.status, 429)
            self.assertEqual(r.reason, "Too Many Requests")
            self.assertIn(b"limits.rate", r.body)
            self.assertIsNone(r.header("connection"))
            retry = int(r.header("retry-after"))
            # 5 a second: a token is back within 200 ms, so 1 whole second.
            self.assertEqual(retry, 1)
            # The refused request never reached the server.
            seen = self.b1.requests()
            seen -= self.b1.requests() - seen  # less the count's own request, if counted
            self.assertEqual(seen - base, ok)
            # Another address (any 127/8 is loopback) has its own full bucket.
            with H.Conn(self.d.port, source="127.0.0.2") as other:
                self.assertEqual(other.request("GET", "/bytes/3").body, H.pattern(3))
            self.assertEqual(self.refused(), 1)
            # Retry-After later, the same connection is served again.
            time.sleep(max(0.0, refused_at + retry - time.monotonic()))
            r = c.request("GET", "/bytes/4")
            self.assertEqual((r.status, r.body), (200, H.pattern(4)))
        self.assertEqual(self.refused(), 1)

    def test_pipelined_requests_over_the_rate_are_each_answered_in_order(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   limits={"rate": self.RATE, "burst": 2})
        with H.Conn(self.d.port) as c:
            start = time.monotonic()
            c.send(b"".join(H.build_request("GET", "/bytes/%d" % (i + 1)) for i in range(5)))
            statuses = [c.read_response(timeout=5).status for _ in range(5)]
            earned = int((time.monotonic() - start) * self.RATE)
            self.assertEqual(statuses[:2], [200, 200])
            self.assertLessEqual(statuses.count(200), 2 + earned)
            self.assertEqual(set(statuses), {200, 429})
            if earned == 0:
                self.assertEqual(statuses, [200, 200, 429, 429, 429])
            # Still usable after the refusals.
            time.sleep(1.0 / self.RATE)
            self.assertEqual(c.request("GET", "/bytes/1").status, 200)
        self.assertEqual(self.refused(), statuses.count(429))

    def test_refused_request_with_a_body_closes_its_connection(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   limits={"rate": self.RATE, "burst": 2})
        with H.Conn(self.d.port) as c:
            start = time.monotonic()
            r, _ = self.until_refused(c, start, 2)
            self.assertEqual(r.status, 429)
        # Empty still unless a token came back since (then nothing to check).
        with H.Conn(self.d.port) as c:
            r = c.request("POST", "/echo", body=b"x" * 100)
            if r.status == 429:
                self.assertEqual(r.header("connection"), "close")
                self.assertTrue(c.closed_by_peer(3))
            else:
                self.assertGreater(time.monotonic() - start, 1.0 / self.RATE)
        self.assertGreaterEqual(self.refused(), 1)


if __name__ == "__main__":
    H.main()
