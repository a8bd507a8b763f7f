"""
dimmer-backend as a node of a power-managed cluster: a capacity of slots
with a FIFO queue and service times on timers (waves of requests, 503 with
Retry-After for a full queue, bodies and pipelining still right), the power
states through the control listener and signals (a sleeping or booting node
resets every serving connection, the control listener still answers, boot
takes its time), the power model and its exactly integrated energy, Wake-on-
LAN magic packets built here, and the built-in agent's signed reports checked
with Python's hmac. A backend without the new options keeps today's
behaviour (every other integration test runs it).
"""
import json
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

MAC = "aa:bb:cc:dd:ee:ff"
KEY = b"the key of node 7 and its proxy"
def magic(mac):
    return b"\xff" * 6 + bytes.fromhex(mac.replace(":", "")) * 16


def refused(port):
    """True if a connection to port is reset or closed without a byte of response."""
    try:
        with H.Conn(port, timeout=5.0) as c:
            c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            return c.closed_by_peer(5.0) and c.buf == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def read_all(conns):
    """Reads one response on each connection at once; [(response, monotonic time done)]."""
    out = [None] * len(conns)

    def reader(i):
        try:
            r = conns[i].read_response()
            out[i] = (r, time.monotonic())
        except Exception as e:  # reported below, from the test's thread
            out[i] = (e, time.monotonic())

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in out:
        if r is None or isinstance(r[0], Exception):
            raise AssertionError("a response failed: %r" % (r,))
    return out


class BackendNodeTest(H.DimmerTest):
    def start_node(self, *args, name="node"):
        node = super().start_node(*args, name=name)
        # The serving address comes first: the harness and older scripts read that line.
        self.assertTrue(node.proc.stdout().startswith("dimmer-backend %s listening on " % name))
        return node

    def key_file(self, data=KEY + b"\n"):
        """A key file; by default with a final newline, which is not part of the key."""
        path = self.path("agent-%d.key" % len(os.listdir(self.tmp)))
        with open(path, "wb") as f:
            f.write(data)
        return path

    def receiver(self, timeout=10):
        """A UDP socket for agent reports; its address as --agent-to wants it."""
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((H.HOST, 0))
        rx.settimeout(timeout)
        self.addCleanup(rx.close)
        return rx, "%s:%d" % rx.getsockname()

    def connect(self, node, n):
        conns = [H.Conn(node.port) for _ in range(n)]
        for c in conns:
            self.addCleanup(c.close)
        return conns

    def wait_load(self, node, in_service, queued):
        def load():
            s = node.stats()  # one reading: both figures of the same instant
            return (s["in_service"], s["queued"]) == (in_service, queued)

        H.wait_until(load, 10, "%d in service and %d queued" % (in_service, queued))

    def park_each(self, node, path, n, capacity):
        """GETs path on n new connections, each once the one before is parked; yields its index."""
        for i, c in enumerate(self.connect(node, n)):
            c.send(H.build_request("GET", path))
            self.wait_load(node, min(i + 1, capacity), max(i + 1 - capacity, 0))
            yield i

    # ---- capacity, queue, service time --------------------------------------

    def test_capacity_serves_in_waves(self):
        node = self.start_node("--capacity", 2, "--service-ms", 200, "--control", "127.0.0.1:0")
        conns = self.connect(node, 6)
        t0 = time.monotonic()
        for c in conns:
            c.send(H.build_request("GET", "/bytes/1000"))
        done = read_all(conns)
        for r, _ in done:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, H.pattern(1000))
        times = sorted(t - t0 for _, t in done)
        # Two slots, 200 ms each: 200, 400, 600 ms; nothing answers before its service time.
        self.assertGreaterEqual(times[0], 0.18, times)
        self.assertGreaterEqual(times[5] - times[0], 2 * 0.2 * 0.9, times)
        self.assertLess(times[5], 20, times)
        s = node.stats()
        self.assertGreaterEqual(s["queued_max"], 4, s)
        self.assertEqual((s["capacity"], s["in_service"], s["queued"], s["served"],
                          s["requests"], s["rejected_full"]), (2, 0, 0, 6, 6, 0), s)
        self.assertEqual(s["watts"], 40.0, s)

    def test_full_queue_answers_503_at_once(self):
        # Requests that stay in service for 60 s: nothing below races their end.
        node = self.start_node("--capacity", 2, "--queue", 1, "--service-ms", 60000)
        list(self.park_each(node, "/bytes/10", 3, 2))
        for c in self.connect(node, 2):
            r = c.request("GET", "/bytes/10", timeout=5.0)
            self.assertEqual((r.status, r.header("Retry-After")), (503, "1"), r)
        # A rejected upload: its body is read and dropped; the connection goes on.
        with H.Conn(node.port) as c:
            r = c.request("POST", "/echo", body=b"x" * 100000, timeout=5.0)
            self.assertEqual(r.status, 503)
            self.assertEqual(c.request("GET", "/healthz", timeout=5.0).status, 200)
        s = node.stats()
        self.assertEqual((s["rejected_full"], s["in_service"], s["queued"], s["queued_max"],
                          s["served"]), (3, 2, 1, 1, 0), s)
        # Full load of two slots out of two.
        self.assertEqual(s["watts"], 70.0, s)

    def test_management_bypasses_the_queue_and_watts_follow_load(self):
        node = self.start_node("--capacity", 2, "--idle-w", 30, "--full-w", 70)
        for i in self.park_each(node, "/bytes/10?x=1&ms=60000", 3, 2):
            # idle + (full - idle) * in_service / capacity
            self.assertEqual(node.stats()["watts"], [50.0, 70.0, 70.0][i])
        started = time.monotonic()
        self.assertEqual(H.get(node.port, "/healthz").status, 200)
        self.assertLess(time.monotonic() - started, 10)
        s = node.stats()
        self.assertEqual((s["in_service"], s["queued"]), (2, 1), s)
        # A short service of its own (?ms=) waits behind the queue like any other.
        with H.Conn(node.port) as c:
            c.send(H.build_request("GET", "/bytes/10?ms=1"))
            H.wait_until(lambda: node.stats()["queued"] == 2, 10, "the short one queued")

    def test_bodies_and_pipelining_under_capacity(self):
        node = self.start_node("--capacity", 1, "--service-ms", 100)
        body = H.pattern(300000)  # bigger than the input buffer: reading resumes after service
        with H.Conn(node.port) as c:
            r = c.request("POST", "/echo", body=body)
            self.assertEqual((r.status, r.body), (200, body))
            r = c.request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")],
                          body=b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            self.assertEqual((r.status, r.chunked, r.body), (200, True, b"hello world"))
            r = c.request("POST", "/sha256", body=body)
            self.assertEqual(json.loads(r.body)["sha256"], H.pattern_sha256(300000))
            # Expect: 100-continue gets its 100 once the service time is over.
            c.send(H.build_request("POST", "/echo", headers=[("Expect", "100-continue"),
                                                            ("Content-Length", "3")]))
            self.assertEqual(c.read_response(stop_at_1xx=True).status, 100)
            c.send(b"abc")
            self.assertEqual(c.read_response().body, b"abc")
        # Two uploads at once share the one slot; both come back whole.
        conns = self.connect(node, 2)
        for i, c in enumerate(conns):
            c.send(H.build_request("POST", "/echo", body=H.pattern(50000 + i)))
        for i, (r, _) in enumerate(read_all(conns)):
            self.assertEqual(r.body, H.pattern(50000 + i))
        # Pipelined requests, one after another through the slot, answered in order.
        with H.Conn(node.port) as c:
            started = time.monotonic()
            c.send(H.build_request("GET", "/status/201") +
                   H.build_request("POST", "/echo", body=b"second") +
                   H.build_request("GET", "/status/203?ms=200") +
                   H.build_request("HEAD", "/bytes/7") +
                   H.build_request("GET", "/headers"))
            got = [c.read_response() for _ in range(3)]
            got.append(c.read_response(head_request=True))
            got.append(c.read_response())
            elapsed = time.monotonic() - started
            self.assertEqual([r.status for r in got], [201, 200, 203, 200, 200])
            self.assertEqual(got[1].body, b"second")
            self.assertEqual(got[3].header("Content-Length"), "7")
            self.assertTrue(got[4].body.startswith(b"GET /headers HTTP/1.1\r\n"), got[4].body)
            self.assertGreaterEqual(elapsed, (100 + 100 + 200 + 100 + 100) / 1000 * 0.9)
        s = node.stats()
        self.assertEqual((s["served"], s["in_service"], s["queued"], s["rejected_full"]),
                         (11, 0, 0, 0), s)

    # ---- power states --------------------------------------------------------

    def rate_w(self, node, seconds):
        """The mean power of the node over `seconds`, from its own meter and clock."""
        a = node.power()

        def later():
            p = node.power()
            return p if p["for_ms"] - a["for_ms"] >= seconds * 1000 else None

        b = H.wait_until(later, 10, "%.1f s to pass" % seconds)
        self.assertEqual(a["state"], b["state"])
        self.assertGreater(b["energy_wh"], a["energy_wh"])
        return (b["energy_wh"] - a["energy_wh"]) * 3600 * 1000 / (b["for_ms"] - a["for_ms"])

    def test_sleep_and_wake_through_control(self):
        node = self.start_node("--control", "127.0.0.1:0", "--boot-ms", 1000, "--idle-w", 40,
                               "--full-w", 70, "--asleep-w", 3, "--booting-w", 60)
        p = node.power()
        self.assertEqual((p["state"], p["watts"], p["idle_w"], p["full_w"], p["asleep_w"],
                          p["booting_w"], p["boot_ms"]), ("awake", 40, 40, 70, 3, 60, 1000), p)
        self.assertEqual(H.get(node.port, "/healthz").status, 200)
        self.assertAlmostEqual(self.rate_w(node, 0.3), 40, delta=1.0)
        # An idle keep-alive connection is reset by the sleep; it had no request.
        idle = self.connect(node, 1)[0]
        self.assertEqual(idle.request("GET", "/bytes/3").status, 200)

        p = node.command("sleep")
        self.assertEqual((p["state"], p["watts"]), ("asleep", 3), p)
        self.assertTrue(idle.closed_by_peer(5.0))
        self.assertTrue(refused(node.port))
        self.assertTrue(refused(node.port))
        s = node.stats()
        self.assertEqual((s["power"], s["refused"], s["sleeps"], s["lost_at_sleep"], s["open"]),
                         ("asleep", 2, 1, 0, 0), s)
        self.assertAlmostEqual(self.rate_w(node, 0.5), 3, delta=0.2)
        self.assertEqual(node.command("sleep")["state"], "asleep")  # a no-op
        self.assertEqual(node.stats()["sleeps"], 1)

        before = time.monotonic()
        p = node.command("wake")
        self.assertEqual((p["state"], p["watts"]), ("booting", 60), p)
        self.assertTrue(refused(node.port))
        self.assertEqual(node.command("wake")["state"], "booting")  # a no-op too
        node.wait_state("awake")
        self.assertGreaterEqual(time.monotonic() - before, 0.9)
        self.assertEqual(H.get(node.port, "/healthz").status, 200)
        s = node.stats()
        self.assertEqual((s["power"], s["watts"], s["wakes"], s["sleeps"], s["refused"],
                          s["lost_at_sleep"], s["requests_not_awake"]),
                         ("awake", 40, 1, 1, 3, 0, 0), s)
        # Energy: 40 W, then 3 W asleep, 60 W for the boot, 40 W again; never less than
        # the second's boot at 60 W alone, never more than all of it at 60 W.
        self.assertGreater(s["energy_wh"], 60 * 0.9 / 3600)
        self.assertLess(s["energy_wh"], 60 * (time.monotonic() - before + 30) / 3600)

        # A browser's POST (it carries Origin; dimmer's never does) is refused:
        # a page of any site could otherwise sleep the node with a form.
        for origin in ("http://evil.example", "null", "http://127.0.0.1:%d" % node.control):
            r = H.request(node.control, "POST", "/sleep", headers=[("Origin", origin)])
            self.assertEqual(r.status, 403, (origin, r.body))
        self.assertEqual(node.stats()["sleeps"], 1)
        # The control listener's own endpoints and methods.
        self.assertEqual(H.get(node.control, "/sleep").status, 405)
        self.assertEqual(H.request(node.control, "POST", "/power").status, 405)
        self.assertEqual(H.get(node.control, "/bytes/1").status, 404)
        self.assertEqual(node.stats()["power"], "awake")
        # /stats on the serving listener says the same, and counts it as open.
        s = H.stats(node.port)
        self.assertEqual((s["power"], s["open"], s["requests"]), ("awake", 1, 1), s)

    def test_sleep_with_requests_under_way_loses_them(self):
        node = self.start_node("--control", "127.0.0.1:0", "--capacity", 1,
                               "--service-ms", 60000)
        conns = self.connect(node, 2)
        for c in conns:
            c.send(H.build_request("GET", "/bytes/10"))
        self.wait_load(node, 1, 1)
        self.connect(node, 1)  # and one without a request
        H.wait_until(lambda: node.stats()["open"] == 3, 10, "three connections")
        self.assertEqual(node.command("sleep")["state"], "asleep")
        for c in conns:
            self.assertTrue(c.closed_by_peer(5.0))
            self.assertEqual(c.buf, b"")
        s = node.stats()
        self.assertEqual((s["lost_at_sleep"], s["in_service"], s["queued"], s["served"]),
                         (2, 0, 0, 0), s)
        self.assertEqual(s["watts"], 3)

    def test_start_asleep_and_signals(self):
        node = self.start_node("--start", "asleep", "--control", "127.0.0.1:0")
        self.assertEqual(node.power()["state"], "asleep")
        self.assertTrue(refused(node.port))
        node.proc.signal(signal.SIGUSR2)
        node.wait_state("awake")
        self.assertEqual(H.get(node.port, "/healthz").status, 200)
        node.proc.signal(signal.SIGUSR1)
        node.wait_state("asleep")
        self.assertTrue(refused(node.port))
        s = node.stats()
        self.assertEqual((s["wakes"], s["sleeps"], s["refused"]), (1, 1, 2), s)

    def test_wake_on_lan(self):
        node = self.start_node("--start", "asleep", "--control", "127.0.0.1:0",
                               "--wol", "127.0.0.1:0", "--mac", MAC.upper().replace(":", "-"))
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        ignored = [b"junk", magic("aa:bb:cc:dd:ee:fe"), magic(MAC) + b"\x00", magic(MAC)[:-1],
                   b""]
        for n, data in enumerate(ignored, 1):
            tx.sendto(data, (H.HOST, node.wol))
            H.wait_until(lambda: node.stats()["wol_ignored"] == n, 10, "datagram %d ignored" % n)
        self.assertEqual(node.power()["state"], "asleep")
        self.assertTrue(refused(node.port))
        tx.sendto(magic(MAC), (H.HOST, node.wol))
        node.wait_state("awake")
        self.assertEqual(H.get(node.port, "/healthz").status, 200)
        # Another magic packet while awake changes nothing; the junk after it shows it was read.
        tx.sendto(magic(MAC), (H.HOST, node.wol))
        tx.sendto(b"junk", (H.HOST, node.wol))
        H.wait_until(lambda: node.stats()["wol_ignored"] == len(ignored) + 1, 10, "junk read")
        s = node.stats()
        self.assertEqual((s["power"], s["wakes"], s["refused"]), ("awake", 1, 1), s)

    # ---- the built-in agent ----------------------------------------------------

    def test_agent_reports(self):
        rx, to = self.receiver()
        started_us = time.time() * 1e6
        node = self.start_node("--agent-to", to, "--agent-key-file", self.key_file(),
                               "--agent-name", "node-7", "--agent-interval-ms", 100,
                               "--control", "127.0.0.1:0", "--capacity", 4, "--idle-w", 30,
                               "--full-w", 70, name="web7")

        def report():
            return H.agent_report(rx.recvfrom(2048)[0], KEY)

        # As dimmer-agent's, sequence numbers start at the start time in
        # microseconds (their thousands never above the report's ts), so that a
        # restarted node goes on above the run before it: dimmer drops a
        # number not above the last it took.
        first = report()
        self.assertLess(abs(first["seq"] - 1 - started_us), 60e6, first)
        for seq in (first["seq"], first["seq"] + 1, first["seq"] + 2):
            r = first if seq == first["seq"] else report()
            self.assertEqual((r["name"], r["seq"], r["est_w"], r["measured_w"], r["tcp"]),
                             ("node-7", seq, 30.0, None, 0), r)
            self.assertLess(abs(r["ts"] - time.time() * 1000), 5000)
            self.assertLessEqual(r["seq"] // 1000, r["ts"])
        # Two serving connections, one of them with a request in service: tcp and est_w.
        conns = self.connect(node, 2)
        conns[0].send(H.build_request("GET", "/bytes/1?ms=60000"))
        def loaded():
            r = report()
            return r if (r["tcp"], r["est_w"]) == (2, 40.0) else None

        last = H.wait_until(loaded, 10, "a report of the load")
        # Asleep, it is silent: whatever arrives after the answer was sent before it.
        self.assertEqual(node.command("sleep")["state"], "asleep")
        asleep_ms = time.time() * 1000
        rx.settimeout(0.5)
        try:
            while True:
                r = report()
                self.assertLessEqual(r["ts"], asleep_ms, r)
                self.assertEqual(r["seq"], last["seq"] + 1, r)
                last = r
        except socket.timeout:
            pass
        rx.settimeout(10)
        # Awake again, the next report comes at once and its seq follows on.
        self.assertEqual(node.command("wake")["state"], "awake")
        r = report()
        self.assertEqual((r["seq"], r["est_w"], r["tcp"]), (last["seq"] + 1, 30.0, 0), r)
        self.assertEqual(report()["seq"], last["seq"] + 2)
        # Started again (a second process of the same name, as after a
        # restart), it goes on above.
        rx2, to2 = self.receiver()
        self.start_node("--agent-to", to2, "--agent-key-file", self.key_file(),
                        "--agent-name", "node-7", name="web7b")
        again = H.agent_report(rx2.recvfrom(2048)[0], KEY)
        self.assertGreater(again["seq"], last["seq"] + 2, again)

    def test_agent_name_defaults_to_name(self):
        rx, to = self.receiver()
        self.start_node("--agent-to", to, "--agent-key-file", self.key_file(KEY), name="web-9")
        r = H.agent_report(rx.recvfrom(2048)[0], KEY)
        self.assertEqual((r["name"], r["est_w"]), ("web-9", 40.0), r)

    def test_no_report_while_asleep_from_the_start(self):
        rx, to = self.receiver(timeout=0.5)
        node = self.start_node("--agent-to", to, "--agent-key-file", self.key_file(),
                               "--agent-interval-ms", 50, "--start", "asleep", "--boot-ms", 5000,
                               "--control", "127.0.0.1:0")
        with self.assertRaises(socket.timeout):
            rx.recvfrom(2048)
        # Booting, it reports (the agent is up before the listener serves).
        self.assertEqual(node.command("wake")["state"], "booting")
        rx.settimeout(10)
        r = H.agent_report(rx.recvfrom(2048)[0], KEY)
        self.assertEqual(r["est_w"], 60.0, r)
        self.assertLessEqual(r["seq"] // 1000, r["ts"])

    # ---- defaults and options --------------------------------------------------

    def test_defaults_keep_todays_behaviour(self):
        b = self.start_backend("plain")
        self.assertEqual(H.get(b.port, "/bytes/5").status, 200)
        s = b.stats()
        self.assertEqual((s["power"], s["capacity"], s["in_service"], s["queued_max"],
                          s["served"], s["requests"], s["watts"], s["refused"]),
                         ("awake", 0, 0, 0, 1, 1, 40, 0), s)
        self.assertGreater(s["energy_wh"], 0)

    def test_waits_for_the_client_are_bounded(self):
        # A client that sends nothing, trickles a head, stops in the middle
        # of a body, or keeps an idle connection held it for ever. Work the
        # node does (a service time in a slot, a slow response) is no wait
        # for the client: nothing bounds it here.
        node = self.start_node("--header-ms", 600, "--keepalive-ms", 900, "--capacity", 1,
                               "--service-ms", 1500)

        def closed_after(c, since, at_least):
            # A lower bound only, half the node's timer (libuv's clock is the
            # loop's, a millisecond or so behind): the close may come late on
            # a busy machine, within 10 s.
            self.assertTrue(c.closed_by_peer(10))
            self.assertGreaterEqual(time.monotonic() - since, at_least)

        t0 = time.monotonic()
        with H.Conn(node.port) as silent, H.Conn(node.port) as trickle, \
                H.Conn(node.port) as body, H.Conn(node.port) as kept:
            trickle.send(b"GET /bytes/5 HTTP/1.1\r\nHost: a\r\n")
            body.send(b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nab")
            r = trickle.read_response(timeout=10)
            self.assertGreaterEqual(time.monotonic() - t0, 0.3)
            self.assertEqual(r.status, 408)
            self.assertIn(b"--header-ms", r.body)
            closed_after(body, t0, 0.3)
            self.assertEqual(kept.request("GET", "/healthz").status, 200)
            t1 = time.monotonic()
            closed_after(silent, t0, 0.45)
            closed_after(kept, t1, 0.45)
        self.assertEqual(node.stats()["timed_out"], 4)
        # A request waits 1.5 s in its slot, and a second one queued behind it
        # 3 s, both longer than either bound: answered, not cut.
        with H.Conn(node.port, timeout=20) as a, H.Conn(node.port, timeout=20) as b:
            a.send(H.build_request("GET", "/bytes/7"))
            self.wait_load(node, 1, 0)
            b.send(H.build_request("GET", "/bytes/7"))
            self.wait_load(node, 1, 1)
            for c in (a, b):
                r = c.read_response(timeout=20)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, H.pattern(7))
        # 0 turns a bound off.
        quiet = self.start_node("--keepalive-ms", 0, name="quiet")
        with H.Conn(quiet.port) as c:
            self.assertEqual(c.request("GET", "/healthz").status, 200)
            self.assertFalse(c.closed_by_peer(1.5))

    def test_bad_arguments(self):
        key_file = self.key_file(b"k")
        empty = self.key_file(b"")
        base = ["--listen", "127.0.0.1:0"]
        for args, what in ((["--capacity", "x"], "--capacity"),
                           (["--queue", "-1"], "--queue"),
                           (["--service-ms", "3600001"], "--service-ms"),
                           (["--idle-w", "nan"], "watts"),
                           (["--idle-w", "50", "--full-w", "40"], "--full-w"),
                           (["--idle-w", "20", "--asleep-w", "30"], "--asleep-w"),
                           (["--start", "sideways"], "--start"),
                           (["--boot-ms", "1.5"], "--boot-ms"),
                           (["--header-ms", "-1"], "--header-ms"),
                           (["--keepalive-ms", "x"], "--keepalive-ms"),
                           (["--control", "nowhere"], "--control"),
                           (["--wol", "127.0.0.1:0"], "--mac"),
                           (["--wol", "127.0.0.1:0", "--mac", "aa:bb:cc:dd:ee"], "--mac"),
                           (["--agent-to", "127.0.0.1:9"], "--agent-key-file"),
                           (["--agent-name", "x"], "--agent-to"),
                           (["--agent-to", "127.0.0.1:9", "--agent-key-file", empty], "empty"),
                           (["--agent-to", "127.0.0.1:9", "--agent-key-file", self.path("no")],
                            "No such file"),
                           (["--agent-to", "127.0.0.1:9", "--agent-key-file", key_file,
                             "--agent-interval-ms", "5"], "--agent-interval-ms"),
                           (["--agent-to", "127.0.0.1:9", "--agent-key-file", key_file,
                             "--name", "n" * 64], "--agent-name")):
            self.assert_usage_error(H.DIMMER_BACKEND, base + args, what)


if __name__ == "__main__":
    H.main()
