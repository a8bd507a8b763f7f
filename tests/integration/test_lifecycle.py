"""
The life of a dimmer process: checking a config (-t), refusing to start on a
bad one, quick-start flags, reloading on SIGHUP (and keeping the old config
when the new one is broken), draining on SIGTERM, and the access log.
"""
import calendar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

BAD_CONFIG = """\
workers: 1
listen:
  - 127.0.0.1:{port}
timeout:
  connect: 2s
pools:
  web:
    servers:
      - {{name: a, address: "127.0.0.1:99999"}}
"""


def run(argv, timeout=20):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


class ConfigCheckTest(H.DimmerTest):
    def test_check_good_config(self):
        # -t binds nothing; port 0 (any free port) is a valid listen and admin port.
        conf = self.write_config(H.yaml_config(0, {
            "web": {"servers": [("a", 9001), ("b", 9002)], "balance": "leastconn",
                    "health_check": {"interval": "1s"}}}, admin=0))
        r = run([H.DIMMER, "-t", "-c", conf])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().strip(), "configuration ok")
        # A log the start could not open fails the check too; the check creates nothing.
        for log, ok in ((self.path("new.log"), True), (self.path("no/such/dir.log"), False),
                        (self.tmp, False)):
            conf = self.write_config(H.yaml_config(0, {"web": {"servers": [("a", 9001)]}},
                                                   error_log=log))
            r = run([H.DIMMER, "-t", "-c", conf])
            self.assertEqual(r.returncode == 0, ok, (log, r.stderr))
            self.assertFalse(os.path.exists(self.path("new.log")))
            if not ok:
                # At the path in the file, as any other error.
                with open(conf) as f:
                    line = next(i for i, ln in enumerate(f.read().splitlines(), 1)
                                if ln.startswith("error_log: "))
                self.assertIn(("%s:%d:%d: error_log %s" % (conf, line, len("error_log: ") + 1,
                                                           log)).encode(), r.stderr)

    def test_check_bad_config_reports_file_line_column(self):
        conf = self.write_config(BAD_CONFIG.format(port=0), "bad.yaml")
        r = run([H.DIMMER, "-t", "-c", conf])
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn(b"configuration ok", r.stdout)
        errors = [ln for ln in r.stderr.decode().splitlines() if ln.strip()]
        self.assertEqual(len(errors), 2, errors)
        # One line per error, in file order, at the offending node.
        lines = BAD_CONFIG.splitlines()
        col = lines[8].replace("{{", "{").index('"127.0.0.1:99999"') + 1
        m = re.match(r"^(.*):(\d+):(\d+): (.*)$", errors[0])
        self.assertIsNotNone(m, errors[0])
        self.assertEqual(m.group(1), conf)
        self.assertEqual((m.group(2), m.group(3)), ("4", "1"))
        self.assertIn('"timeout"', m.group(4))
        m = re.match(r"^(.*):(\d+):(\d+): (.*)$", errors[1])
        self.assertIsNotNone(m, errors[1])
        self.assertEqual((m.group(2), m.group(3)), ("9", str(col)))
        self.assertIn("99999", m.group(4))

    def test_check_missing_file(self):
        r = run([H.DIMMER, "-t", "-c", self.path("none.yaml")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"none.yaml", r.stderr)

    def test_check_refuses_a_fifo_or_device_for_config(self):
        fifo = self.path("fifo.yaml")
        os.mkfifo(fifo)
        for path in (fifo, "/dev/zero"):
            r = run([H.DIMMER, "-t", "-c", path], timeout=10)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(r.stderr.decode(), "%s: cannot read: not a regular file\n" % path)

    def test_bad_config_does_not_listen(self):
        conf = self.write_config(BAD_CONFIG.format(port=0), "bad.yaml")
        ports_file = self.path("bad.ports")
        p = self.start_proc("dimmer-bad", [H.DIMMER, "-c", conf, "--ports-file", ports_file])
        code = p.wait(10)
        self.assertIsNotNone(code, "dimmer kept running with a bad config")
        self.assertNotEqual(code, 0)
        self.assertIn("bad.yaml:4:1:", p.stderr())
        self.assertNotIn("listening on", p.stderr())
        self.assertFalse(os.path.exists(ports_file))

    def test_version_and_usage(self):
        r = run([H.DIMMER, "--version"])
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith(b"dimmer "), r.stdout)
        r = run([H.DIMMER])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"usage", r.stderr)
        # A config file and the quick-start flags: the file would silently win.
        conf = self.write_config(H.yaml_config(0, {"web": {"servers": [("a", 1)]}}), "ok.yaml")
        self.assert_usage_error(H.DIMMER, ["-c", conf, "--listen", "127.0.0.1:0", "--backend",
                                           "127.0.0.1:1"], "not both")
        self.assert_usage_error(H.DIMMER, ["-c", conf, "--workers", "1025"], "1..1024")
        for bad in (" 4", "+4", "", "4x"):
            self.assert_usage_error(H.DIMMER, ["-t", "-c", conf, "--workers", bad], "1..1024")
        # A repeated option silently replaced the first: HAProxy loads every
        # -f, and --backend a --backend b reads as two servers.
        for args, what in ((["-c", conf, "-c", conf], "-c given twice"),
                           (["-c", conf, "--config", conf], "--config given twice"),
                           (["-c", conf, "--workers", "1", "--workers", "2"],
                            "--workers given twice"),
                           (["--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                             "--backend", "127.0.0.1:1"], "--listen given twice"),
                           (["--listen", "127.0.0.1:0", "--backend", "127.0.0.1:1",
                             "--backend", "127.0.0.1:2"], "separated by commas")):
            self.assert_usage_error(H.DIMMER, ["-t"] + args, what)
        self.assert_usage_error(H.DIMMER, ["-t", "-c", ""], "-c: empty file name")
        r = run([H.DIMMER, "--listen", "127.0.0.1:0", "--backend", "x"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b'--backend: bad address "x"', r.stderr)


class RunTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")

    def test_quick_start_flags(self):
        d = self.start_dimmer_args([
            "--listen", "%s:0" % H.HOST,
            "--backend", "%s:%d, %s:%d" % (H.HOST, self.b1.port, H.HOST, self.b2.port),
            "--workers", "1"])
        self.assertEqual(d.lines, [("listen", "127.0.0.1:0", d.port)])
        seen = {H.get(d.port, "/bytes/3").header("X-Backend") for _ in range(4)}
        self.assertEqual(seen, {"b1", "b2"})

    def backend_of_new_connection(self, d):
        r = H.get(d.port, "/bytes/1")
        self.assertEqual(r.status, 200)
        return r.header("X-Backend")

    def test_sighup_reloads_config(self):
        d = self.start_dimmer({"web": self.pool(self.b1)})
        self.assertEqual(d.admin_stats()["generation"], 1)
        self.assertEqual({self.backend_of_new_connection(d) for _ in range(3)}, {"b1"})
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, {"web": self.pool(self.b2)}, admin=0))
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: self.backend_of_new_connection(d) == "b2", 5,
                     "new connections to go to b2 after SIGHUP")
        self.assertEqual({self.backend_of_new_connection(d) for _ in range(5)}, {"b2"})
        st = d.admin_stats()
        self.assertEqual(st["generation"], 2)
        self.assertEqual([s["name"] for s in st["pools"][0]["servers"]], ["b2"])
        self.assertIn("reloaded", d.proc.stderr())
        self.assertTrue(d.proc.alive())
        # Still "127.0.0.1:0" as written: the same listeners, kept on their ports, no warning.
        self.assertNotIn("take effect at the next restart", d.proc.stderr())
        self.assertEqual(d.proc.stderr().count("listening on"), 2, d.proc.stderr())

    def test_sighup_warns_of_what_waits_for_a_restart(self):
        d = self.start_dimmer({"web": self.pool(self.b1)})
        text = H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0, workers=2)
        text += "access_log: \"%s\"\ncatalog: {memory: 64m}\n" % self.path("access.log")
        with open(d.conf_path, "w") as f:
            f.write(text)
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: d.admin_stats()["generation"] == 2, 5, "the reload")
        log = d.proc.stderr()
        for what in ("workers take effect at the next restart or SIGUSR2 (1 running)",
                     "catalog.memory takes effect at the next restart",
                     "access_log and error_log take effect at the next restart"):
            self.assertIn(what, log)
        # A moved listener is compared with the socket bound at start, not with
        # the config before: moved twice, two warnings; moved back, none.
        moved = "reload: listener changes take effect at the next restart"
        for generation, port, warnings in ((3, 1, 1), (4, 1, 2), (5, 0, 2)):
            with open(d.conf_path, "w") as f:
                f.write(H.yaml_config(port, {"web": self.pool(self.b1)}, admin=0))
            d.proc.signal(signal.SIGHUP)
            H.wait_until(lambda: d.admin_stats()["generation"] == generation, 5, "the reload")
            self.assertEqual(d.proc.stderr().count(moved), warnings)

    def reload(self, d, pools, generation):
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, pools, admin=0,
                                  timeouts={"client_keepalive": "60s"}))
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: d.admin_stats()["generation"] == generation, 5,
                     "generation %d" % generation)
        # Each worker takes the new config when woken: a new connection shows it.
        H.wait_until(lambda: all(self.backend_of_new_connection(d) in
                                 {s[0] for p in pools.values() for s in p["servers"]}
                                 for _ in range(4)), 5, "the workers on the new config")

    def test_keepalive_connection_takes_the_reloaded_config_at_its_next_request(self):
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"client_keepalive": "60s"})
        b3 = self.start_backend("b3")
        with H.Conn(d.port) as old, H.Conn(d.port) as busy:
            self.assertEqual(old.request("GET", "/bytes/1").header("X-Backend"), "b1")
            busy.send(H.build_request("GET", "/slow/1500"))
            H.wait_until(lambda: d.servers()["b1"]["inflight"] == 1, 5, "the slow request")
            self.reload(d, {"web": self.pool(self.b2)}, 2)
            # The request in flight ends where it began; the next one, as every
            # request of the idle connection, goes by the new config.
            self.assertEqual(busy.read_response(timeout=5).header("X-Backend"), "b1")
            self.assertEqual(busy.request("GET", "/bytes/1").header("X-Backend"), "b2")
            for _ in range(3):
                self.assertEqual(old.request("GET", "/bytes/1").header("X-Backend"), "b2")
            # And again at a second reload, pipelined: two requests in one write.
            self.reload(d, {"web": self.pool(b3)}, 3)
            old.send(H.build_request("GET", "/bytes/1") * 2)
            self.assertEqual([old.read_response().header("X-Backend") for _ in range(2)],
                             ["b3", "b3"])

    def test_affinity_outlives_a_reload_that_keeps_the_server(self):
        pool = self.pool(self.b1, self.b2)
        pool["affinity"] = "connection"
        d = self.start_dimmer({"web": pool}, timeouts={"client_keepalive": "60s"})
        b3 = self.start_backend("b3")
        with H.Conn(d.port) as c1, H.Conn(d.port) as c2:
            first = c1.request("GET", "/bytes/1").header("X-Backend")
            other = c2.request("GET", "/bytes/1").header("X-Backend")
            self.assertEqual({first, other}, {"b1", "b2"})
            # A reload that adds a server, and one that drops c2's.
            grown = self.pool(b3, self.b1, self.b2)
            grown["affinity"] = "connection"
            self.reload(d, {"web": grown}, 2)
            for _ in range(4):
                self.assertEqual(c1.request("GET", "/bytes/1").header("X-Backend"), first)
            st = d.servers()
            self.assertEqual(st[first]["bound_clients"], 1)
            self.assertEqual(st[other]["bound_clients"], 1)
            kept = self.pool(b3, self.b1 if first == "b1" else self.b2)
            kept["affinity"] = "connection"
            self.reload(d, {"web": kept}, 3)
            moved = c2.request("GET", "/bytes/1").header("X-Backend")
            self.assertIn(moved, {"b3", first})
            self.assertEqual(c2.request("GET", "/bytes/1").header("X-Backend"), moved)
            self.assertEqual(c1.request("GET", "/bytes/1").header("X-Backend"), first)
            st = d.servers()
            self.assertEqual(sum(s["bound_clients"] for s in st.values()), 2, st)
        H.wait_until(lambda: sum(s["bound_clients"] for s in d.servers().values()) == 0, 5,
                     "bound_clients back to 0")

    def test_a_queued_request_moves_to_a_reloaded_pool_of_more_servers(self):
        # A request queued under max_conns when a reload comes is placed by
        # the new config, here a pool of 24 servers (24 names for b2's
        # address) under `balance: hash`: its tried-servers bitmap, sized for
        # the old pool of one, must be sized for the new (under ASan an
        # overflow; the queued request must not be lost either).
        def big():
            return {"web": {"balance": "hash", "hash": {"key": "uri"},
                            "servers": [("s%d" % i, self.b2.port) for i in range(24)]}}

        small = {"web": {"servers": [("s0", self.b1.port, {"max_conns": 1})]}}
        d = self.start_dimmer(big(), timeouts={"client_keepalive": "60s", "queue": "20s"})
        # A target the hash sends to one of the last servers (index 16 and up).
        target = None
        for i in range(400):
            path = "/bytes/5?k=%d" % i
            before = {n: s["requests"] for n, s in d.servers().items()}
            self.assertEqual(H.get(d.port, path).status, 200)
            after = d.servers()
            picked = [n for n, s in after.items() if s["requests"] != before[n]]
            if int(picked[0][1:]) >= 16:
                target = path
                break
        self.assertIsNotNone(target)
        timeouts = {"client_keepalive": "60s", "queue": "20s"}
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, small, admin=0, timeouts=timeouts))
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: self.backend_of_new_connection(d) == "b1", 5, "the small config")
        with H.Conn(d.port, timeout=30) as busy, H.Conn(d.port, timeout=30) as queued:
            busy.send(H.build_request("GET", "/slow/1500"))
            H.wait_until(lambda: d.servers()["s0"]["inflight"] == 1, 5, "the slow request")
            queued.send(H.build_request("GET", target))
            H.wait_until(lambda: d.admin_stats()["pools"][0]["queue"]["now"] == 1, 5,
                         "the request queued")
            with open(d.conf_path, "w") as f:
                f.write(H.yaml_config(0, big(), admin=0, timeouts=timeouts))
            d.proc.signal(signal.SIGHUP)
            r = queued.read_response(timeout=10)
            self.assertEqual((r.status, r.header("X-Backend"), r.body), (200, "b2", H.pattern(5)))
            self.assertEqual(busy.read_response(timeout=10).status, 200)
        self.assertTrue(d.proc.alive())

    def test_sighup_with_broken_config_keeps_running_config(self):
        d = self.start_dimmer({"web": self.pool(self.b1)})
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, {"web": self.pool(self.b2)}, admin=0) +
                    "bogus_key: 1\n")
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: "reload failed" in d.proc.stderr(), 5, "the reload error in the log")
        self.assertIn("bogus_key", d.proc.stderr())
        self.assertTrue(d.proc.alive())
        self.assertEqual({self.backend_of_new_connection(d) for _ in range(5)}, {"b1"})
        self.assertEqual(d.admin_stats()["generation"], 1)
        # Not even valid YAML.
        with open(d.conf_path, "w") as f:
            f.write("pools: [\n")
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: d.proc.stderr().count("reload failed") >= 2, 5,
                     "the second reload error")
        self.assertEqual({self.backend_of_new_connection(d) for _ in range(3)}, {"b1"})
        # A good config afterwards is taken: the failed reloads broke nothing.
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, {"web": self.pool(self.b2)}, admin=0))
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: self.backend_of_new_connection(d) == "b2", 5, "the good reload")

    def test_sighup_with_a_fifo_for_config_keeps_running_config(self):
        # A config path that became a FIFO (or a device) is refused at once:
        # the reload runs on the control thread, which waited for a writer
        # forever, and then heard no SIGTERM and ran no health check.
        d = self.start_dimmer({"web": self.pool(self.b1)})
        os.unlink(d.conf_path)
        os.mkfifo(d.conf_path)
        d.proc.signal(signal.SIGHUP)
        H.wait_until(lambda: "not a regular file" in d.proc.stderr(), 5,
                     "the reload error in the log")
        self.assertIn("reload failed", d.proc.stderr())
        self.assertIn("%s: cannot read: not a regular file" % d.conf_path, d.proc.stderr())
        self.assertEqual(d.admin_stats()["generation"], 1)
        self.assertEqual({self.backend_of_new_connection(d) for _ in range(3)}, {"b1"})
        d.proc.signal(signal.SIGTERM)
        self.assertEqual(d.proc.wait(5), 0)

    def test_sigterm_drains_in_flight_request(self):
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "8s"})
        with H.Conn(d.port, timeout=10) as slow:
            slow.send(H.build_request("GET", "/slow/1000"))
            H.wait_until(lambda: d.servers()["b1"]["inflight"] == 1, 5, "the slow request")
            d.proc.signal(signal.SIGTERM)
            t0 = time.monotonic()
            H.wait_until(lambda: not H.port_answers(d.port), 3,
                         "the listener to close after SIGTERM")
            r = slow.read_response(timeout=8)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"slept\n")
            self.assertEqual((r.header("Connection") or "").lower(), "close")
            self.assertTrue(slow.closed_by_peer(3))
        code = d.proc.wait(6)
        took = time.monotonic() - t0
        self.assertEqual(code, 0, "dimmer did not exit 0 after draining (code %s)" % code)
        self.assertLess(took, 6)
        self.assertFalse(H.port_answers(d.port))

    def test_signals_during_the_drain_do_not_cut_it(self):
        # SIGQUIT stops gracefully, as nginx's. The signal handlers were closed
        # when the drain began: a SIGHUP (systemctl reload), a SIGUSR1
        # (logrotate) or a second SIGTERM then killed dimmer, and the request
        # being drained got an empty reply.
        for first, then in ((signal.SIGQUIT, signal.SIGHUP), (signal.SIGTERM, signal.SIGUSR1),
                            (signal.SIGTERM, signal.SIGTERM)):
            with self.subTest(first=first, then=then):
                d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "8s"})
                with H.Conn(d.port, timeout=10) as slow:
                    slow.send(H.build_request("GET", "/slow/1500"))
                    H.wait_until(lambda: d.servers()["b1"]["inflight"] == 1, 5,
                                 "the slow request")
                    d.proc.signal(first)
                    H.wait_until(lambda: "stopping: draining" in d.proc.stderr(), 5,
                                 "the drain to begin")
                    d.proc.signal(then)
                    r = slow.read_response(timeout=8)
                    self.assertEqual((r.status, r.body), (200, b"slept\n"))
                self.assertEqual(d.proc.wait(8), 0)
                self.assertIn("info: stopped", d.proc.stderr())

    def test_a_sighup_in_the_rest_of_the_exit_does_not_kill(self):
        # Once the workers drained, the signal handlers were closed, which gave
        # SIGHUP its default action back for the rest of the exit: a reload
        # asked then (systemctl reload, a loop of kill -HUP) killed dimmer,
        # which exited on the signal (129) and without "stopped". The exit is
        # longest under the leak checker, which makes the window wide enough
        # to hit in most rounds; SIGHUPs go out every millisecond until the exit.
        env = {"ASAN_OPTIONS": "detect_leaks=1"}
        for round in range(3):
            with self.subTest(round=round):
                conf = self.write_config(H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0,
                                                       timeouts={"shutdown": "5s"}))
                d = self.start_dimmer_conf(conf, env=env)
                self.assertEqual(H.get(d.port, "/bytes/10").status, 200)
                d.proc.signal(signal.SIGTERM)
                H.wait_until(lambda: "stopping: draining" in d.proc.stderr(), 5,
                             "the drain to begin")
                deadline = time.monotonic() + 20
                while d.proc.alive() and time.monotonic() < deadline:
                    d.proc.signal(signal.SIGHUP)
                    time.sleep(0.001)
                code = d.proc.wait(5)
                self.assertEqual(code, 0, "dimmer exited %s, not 0, after its drain" % code)
                self.assertIn("info: stopped", d.proc.stderr())

    def test_sigterm_closes_idle_connections_within_a_second(self):
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "8s"})
        with H.Conn(d.port) as idle:
            self.assertEqual(idle.request("GET", "/bytes/2").status, 200)
            t0 = time.monotonic()
            d.proc.signal(signal.SIGTERM)
            self.assertTrue(idle.closed_by_peer(3), "idle keep-alive connection left open")
        code = d.proc.wait(5)
        self.assertEqual(code, 0)
        self.assertLess(time.monotonic() - t0, 3, "an idle connection held up the exit")

    def test_sigterm_answers_the_next_request_of_a_waiting_connection(self):
        # A connection waiting for a request when the drain came (just
        # accepted, its first on the way, or a keep-alive one whose client
        # sends the next at once, as wrk does) was closed, and a request
        # sent meanwhile lost (reset unread, or refused). It gets a moment
        # now, and the answer closes it.
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "8s"})
        with H.Conn(d.port) as fresh, H.Conn(d.port) as kept:
            self.assertEqual(kept.request("GET", "/bytes/2").status, 200)
            H.wait_until(lambda: d.admin_stats()["limits"]["clients"] == 2, 5,
                         "both connections to be accepted")
            d.proc.signal(signal.SIGTERM)
            # The listener closes in the same step as the drain.
            H.wait_until(lambda: not H.port_answers(d.port), 5, "the drain")
            for c in (fresh, kept):
                c.send(H.build_request("GET", "/bytes/3"))
                r = c.read_response(timeout=5)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, H.pattern(3))
                self.assertEqual(r.header("Connection"), "close")
                self.assertTrue(c.closed_by_peer(3))
        self.assertEqual(d.proc.wait(5), 0)

    def test_sigterm_shutdown_bound(self):
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "300ms"})
        with H.Conn(d.port, timeout=10) as slow:
            slow.send(H.build_request("GET", "/slow/5000"))
            H.wait_until(lambda: d.servers()["b1"]["inflight"] == 1, 5, "the slow request")
            t0 = time.monotonic()
            d.proc.signal(signal.SIGTERM)
            code = d.proc.wait(4)
            took = time.monotonic() - t0
            self.assertEqual(code, 0)
            self.assertLess(took, 3, "exit took %.2fs with shutdown: 300ms" % took)
            self.assertTrue(slow.closed_by_peer(2))

    def test_a_request_no_server_took_is_answered_503_at_the_shutdown_bound(self):
        # One place on the server: the second request waits in the queue.
        # At the bound it was cut with its connection; never sent, it is
        # answered 503 (Retry-After), so the client may send it elsewhere.
        pool = {"servers": [(self.b1.name, self.b1.port, {"max_conns": 1})]}
        d = self.start_dimmer({"web": pool}, timeouts={"shutdown": "300ms", "queue": "60s"})
        with H.Conn(d.port, timeout=10) as slow, H.Conn(d.port, timeout=10) as queued:
            slow.send(H.build_request("GET", "/slow/5000"))
            H.wait_until(lambda: d.servers()["b1"]["inflight"] == 1, 5, "the slow request")
            queued.send(H.build_request("GET", "/bytes/3"))
            H.wait_until(lambda: d.admin_stats()["pools"][0]["queue"]["now"] == 1, 5,
                         "the second request queued")
            d.proc.signal(signal.SIGTERM)
            r = queued.read_response()
            self.assertEqual(r.status, 503, r.body)
            self.assertEqual(r.header("Retry-After"), "1")
            self.assertIn(b"dimmer stopped before a server took the request", r.body)
            self.assertEqual(d.proc.wait(4), 0)
            self.assertTrue(slow.closed_by_peer(2))
        self.assertIn("(answered 503, as no server took their request: 1)", d.proc.stderr())

    def test_admin_connections_do_not_hold_the_stop(self):
        # One admin connection with half a request and one with nothing: a stop
        # does not wait for them (it waited until they closed).
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"shutdown": "300ms"})
        with H.Conn(d.admin, timeout=10) as half, H.Conn(d.admin, timeout=10) as mute:
            half.send("GET /stats HTTP/1.1\r\nHost: x\r\n")
            self.assertEqual(H.get(d.admin, "/help").status, 200)  # both are open by now
            t0 = time.monotonic()
            d.proc.signal(signal.SIGTERM)
            code = d.proc.wait(8)
            took = time.monotonic() - t0
            self.assertEqual(code, 0)
            self.assertLess(took, 3, "exit took %.2fs with two admin connections open" % took)
            self.assertTrue(half.closed_by_peer(2))
            self.assertTrue(mute.closed_by_peer(2))

    def test_admin_answers_long_slow_and_many_requests(self):
        d = self.start_dimmer({"web": self.pool(self.b1)})
        # Over 8 KiB without the end of its head: 431, not a silent close.
        with H.Conn(d.admin) as c:
            c.send("GET /stats HTTP/1.1\r\nX-Long: " + "a" * 9000)
            self.assertEqual(c.read_response().status, 431)
        # 100 connections that send nothing: the admin keeps 64 open at most, the
        # oldest idle ones answered 503 to make room, and an operator still gets in.
        idle = [H.Conn(d.admin, timeout=10) for _ in range(100)]
        try:
            r = H.get(d.admin, "/help")
            self.assertEqual(r.status, 200)
            # The 65th to the 100th each pushed out the oldest.
            for c in idle[:36]:
                r = c.read_response(timeout=5)
                self.assertEqual(r.status, 503, r.body)
                self.assertTrue(c.closed_by_peer(2))
            # Half a request is answered 408 once 10 s have passed since it opened.
            with H.Conn(d.admin, timeout=20) as half:
                t0 = time.monotonic()
                half.send("GET /stats HTTP/1.1\r\n")
                r = half.read_response(timeout=15)
                self.assertEqual(r.status, 408)
                self.assertGreater(time.monotonic() - t0, 9)
                self.assertTrue(half.closed_by_peer(2))
        finally:
            for c in idle:
                c.close()

    def test_access_log_lines(self):
        log = self.path("access.log")
        d = self.start_dimmer({"web": self.pool(self.b1)}, access_log=log)
        self.extra_logs = [log]
        exchanges = []
        with H.Conn(d.port) as c:
            for method, path, body, status in (("GET", "/bytes/10", b"", 200),
                                               ("HEAD", "/bytes/10", b"", 200),
                                               ("POST", "/echo", b"hello", 200),
                                               ("GET", "/status/404", b"", 404),
                                               ("GET", "/slow/150", b"", 200)):
                r = c.request(method, path, body=body)
                self.assertEqual(r.status, status)
                exchanges.append((method, path, status, "b1", len(r.raw_head) + r.body_len))
        raw, closed = H.raw_exchange(d.port, b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
        exchanges.append(("GET", "/", 400, "-", len(raw)))

        def lines():
            with open(log) as f:
                got = f.read().splitlines()
            return got if len(got) >= len(exchanges) else None

        got = H.wait_until(lines, 5, "%d access log lines" % len(exchanges))
        self.assertEqual(len(got), len(exchanges), got)
        # conf/README.md: time (UTC), client, "request line", status, bytes (head and
        # body), server or "-", upstream time and total time in seconds.
        pat = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (\S+) "(\S+) (\S+) HTTP/1\.1" '
                         r'(\d{3}) (\d+) (\S+) (\d+\.\d{6}) (\d+\.\d{6})$')
        for line, (method, path, status, server, nbytes) in zip(got, exchanges):
            m = pat.match(line)
            self.assertIsNotNone(m, "access log line %r" % line)
            stamp = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
            self.assertLess(abs(stamp - time.time()), 60, line)
            self.assertEqual(m.group(2), "127.0.0.1")
            self.assertEqual((m.group(3), m.group(4)), (method, path))
            self.assertEqual(int(m.group(5)), status, line)
            self.assertEqual(int(m.group(6)), nbytes, line)
            self.assertEqual(m.group(7), server, line)
            upstream, total = float(m.group(8)), float(m.group(9))
            self.assertGreaterEqual(total, upstream, line)
            self.assertLess(total, 5, line)
            if path == "/slow/150":
                self.assertGreaterEqual(upstream, 0.14, line)
            if server == "-":
                self.assertEqual(upstream, 0, line)

    def json_log_records(self, paths):
        log = self.path("access.json")
        d = self.start_dimmer({"web": self.pool(self.b1)},
                              extra='access_log:\n  path: "%s"\n  format: json' % log)
        self.extra_logs = [log]
        self.client_ports = []
        for path in paths:
            with H.Conn(d.port) as c:
                self.client_ports.append(c.sock.getsockname()[1])
                self.assertEqual(c.request("GET", path).status, 200)

        def lines():
            with open(log) as f:
                got = f.read().splitlines()
            return got if len(got) >= len(paths) else None

        got = H.wait_until(lines, 5, "%d access log lines" % len(paths))
        self.assertEqual(len(got), len(paths))
        recs, bad = [], None
        for ln in got:
            try:
                recs.append(json.loads(ln))
            except ValueError as e:
                bad = "access log line is not JSON (%s): %r" % (e, ln)
        if bad is not None:
            self.fail(bad)
        return recs

    def test_access_log_json(self):
        recs = self.json_log_records(["/bytes/7", "/headers"])
        self.assertEqual(recs[0]["client"], "127.0.0.1")
        self.assertEqual([r["client_port"] for r in recs], self.client_ports)
        self.assertEqual(recs[0]["method"], "GET")
        self.assertEqual(recs[0]["target"], "/bytes/7")
        self.assertEqual(recs[0]["status"], 200)
        self.assertEqual(recs[0]["upstream"], "b1")
        self.assertGreater(recs[0]["bytes"], 7)
        self.assertEqual(set(recs[0]), {"time", "client", "client_port", "method", "target",
                                        "status", "bytes", "upstream", "upstream_time",
                                        "request_time"})
        self.assertGreaterEqual(recs[0]["request_time"], recs[0]["upstream_time"])
        self.assertLess(recs[0]["request_time"], 5)
        self.assertEqual(recs[1]["target"], "/headers")

    def test_access_log_json_quotes_in_target(self):
        # Regression: the JSON format wrote the target between quotes as it was, so
        # GET /headers?q="x" gave {..,"target":"/headers?q="x"",..}, which is not JSON.
        recs = self.json_log_records(['/headers?q="x"', "/bytes/1"])
        self.assertTrue(recs[0]["target"].startswith("/headers?q="), recs[0])
        self.assertEqual(recs[1]["target"], "/bytes/1")



class UpgradeTest(H.DimmerTest):
    """SIGUSR2: a new process takes the listening sockets over, and the old one drains."""

    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def test_sigusr2_hands_the_listeners_over_and_no_connection_is_lost(self):
        # Clients open a connection per request all along, with two workers
        # (two sockets per listener): across three upgrades every request is
        # answered, none refused, reset or closed unanswered.
        d = self.start_dimmer({"web": self.pool(self.b1)}, workers=2)
        admin = d.admin
        done = threading.Event()
        answered = [0]
        failed = []

        def client():
            while not done.is_set():
                try:
                    r = H.request(d.port, "GET", "/bytes/64", headers=[("Connection", "close")],
                                  timeout=10)
                    if r.status == 200 and r.body == H.pattern(64):
                        answered[0] += 1
                    else:
                        failed.append(r.status)
                except Exception as e:  # noqa: BLE001 (any failure counts)
                    failed.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            pid = d.proc.pid
            for i in range(3):
                before = answered[0]
                H.wait_until(lambda: answered[0] > before + 20, 20, "requests before upgrade %d" % i)
                pid = self.sigusr2(d, pid)
                if i == 0:
                    self.assertEqual(d.proc.wait(5), 0)
            before = answered[0]
            H.wait_until(lambda: answered[0] > before + 20, 20, "requests after the upgrades")
        finally:
            done.set()
            for t in threads:
                t.join(30)
        self.assertEqual(failed, [])
        log = d.proc.stderr()
        self.assertEqual(log.count("handing it 2 listening sockets, the admin's"), 3, log)
        # The same ports, the admin's too, now served by the last process.
        self.assertEqual(H.read_ports_file(d.ports_file), d.lines)
        self.assertEqual(H.get(d.port, "/bytes/5").body, H.pattern(5))
        self.assertEqual(H.stats(admin)["generation"], 1)
        os.kill(pid, signal.SIGTERM)
        H.wait_until(lambda: H.gone(pid), 20, "the last process to stop on SIGTERM")
        self.assertFalse(H.port_answers(d.port))

    def test_sigusr2_hands_the_health_of_the_servers_over(self):
        # A server the old process's checks found down starts down in the
        # new one: sent nothing until its checks pass, not up until `fall`
        # failures of its own, as a restart would have it.
        mute = socket.socket()
        self.addCleanup(mute.close)
        mute.bind((H.HOST, 0))
        mute.listen(64)  # never accepts: every check times out
        pools = {"web": {"servers": [("b1", self.b1.port), ("mute", mute.getsockname()[1])],
                         "health_check": {"interval": "2s", "timeout": "200ms", "fall": 3,
                                          "rise": 1}}}
        d = self.start_dimmer(pools)
        H.wait_until(lambda: d.servers()["mute"]["state"] == "down", 20, "mute to be down")
        self.sigusr2(d, d.proc.pid)
        self.assertEqual(d.servers()["mute"]["state"], "down")
        self.assertEqual(d.servers()["b1"]["state"], "up")
        self.assertIn("took the health of 2 hosts from the process this one replaces (1 down)",
                      d.proc.stderr())

    def test_sigusr2_with_a_broken_config_keeps_the_old_process(self):
        d = self.start_dimmer({"web": self.pool(self.b1)})
        with open(d.conf_path, "a") as f:
            f.write("bogus: [\n")
        d.proc.signal(signal.SIGUSR2)
        H.wait_until(lambda: "exited with status 1 before it was ready" in d.proc.stderr(), 20,
                     "the new process to fail")
        self.assertIn("this one serves on", d.proc.stderr())
        self.assertEqual(H.get(d.port, "/bytes/5").body, H.pattern(5))
        self.assertEqual(d.admin_stats()["generation"], 1)
        self.assertTrue(d.proc.alive())
        # A second SIGUSR2, the config mended, goes through.
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0))
        self.sigusr2(d, d.proc.pid)
        self.assertEqual(d.proc.wait(5), 0)
        self.assertEqual(H.get(d.port, "/bytes/5").body, H.pattern(5))

    def test_sigusr2_applies_listener_and_worker_changes(self):
        # What a reload cannot change: a listener added (port 0 again: its
        # own socket, not the first one's), workers 2 -> 1 (the new worker
        # takes both sockets) -> 3 (the third binds one that joins them).
        d = self.start_dimmer({"web": self.pool(self.b1)}, workers=2)
        lines = H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0, workers=1).split("\n")
        at = lines.index("listen:") + 1
        lines.insert(at, lines[at])  # the same listener written twice
        text = "\n".join(lines)
        with open(d.conf_path, "w") as f:
            f.write(text)
        pid = self.sigusr2(d, d.proc.pid)
        lines = H.read_ports_file(d.ports_file)
        self.assertEqual([k for k, _, _ in lines], ["listen", "listen", "admin"], lines)
        self.assertEqual(lines[0], d.lines[0])
        self.assertEqual(lines[2], d.lines[1])
        added = lines[1][2]
        self.assertNotEqual(added, d.port)
        if H.TLS:  # the copy has the first listener's tls block
            H.tls_ports.add(added)
            self.addCleanup(H.tls_ports.discard, added)
        for port in (d.port, added, d.port, d.port):
            self.assertEqual(H.get(port, "/bytes/5").body, H.pattern(5))
        self.assertIn("listening on 127.0.0.1:%d (1 workers)" % d.port, d.proc.stderr())
        with open(d.conf_path, "w") as f:
            f.write(H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0, workers=3))
        pid = self.sigusr2(d, pid)
        self.assertEqual(H.read_ports_file(d.ports_file), d.lines)
        self.assertNotIn("accepts nothing", d.proc.stderr())
        for _ in range(6):
            self.assertEqual(H.get(d.port, "/bytes/5").body, H.pattern(5))
        # The listener no longer configured was closed with the old process.
        self.assertFalse(H.port_answers(added))


if __name__ == "__main__":
    H.main()
