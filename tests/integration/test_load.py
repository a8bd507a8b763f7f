"""
dimmer-load against real dimmer-backend processes, directly and through
dimmer: session mode fetches each page's embedded objects exactly once per
page view; responses are scored by their delay; a killed backend gives
failures counted by kind, not a hang; rate mode measures latency from when a
request was due, so a server stalled for a second shows in the p99 (the
coordinated-omission check); bad options get one line and exit code 2.
"""
import csv
import json
import socket
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

RUN_BOUND = 60  # seconds any run below may take, startup and shutdown included


class LoadTest(H.DimmerTest):
    def load(self, *args, timeout=RUN_BOUND, name="load"):
        """Runs dimmer-load with args and --json; returns (exit code, summary, stdout)."""
        out = self.path(name + ".json")
        p = self.start_proc(name, [H.DIMMER_LOAD, "--quiet", "--json", out] + list(args))
        code = p.wait(timeout)
        if code is None:
            raise AssertionError("dimmer-load did not end within %d s" % timeout)
        summary = None
        if os.path.exists(out):
            with open(out) as f:
                summary = json.load(f)
        return code, summary, p.stdout()

    def url(self, port, path="/"):
        return "http://%s:%d%s" % (H.HOST, port, path)

    def pattern(self, text, name="pattern.csv"):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check_objects_once(self, port, backends, *extra):
        # 6 users for 2 s, then none: each user ends at its next think time, so
        # every page view is whole when the run ends at 4 s.
        pat = self.pattern("seconds,sessions\n0,6\n2,6\n2.01,0\n4,0\n")
        code, s, out = self.load("--pattern", pat, "--think", "50", "--pages", "8",
                                 "--csv", self.path("t.csv"), *extra, self.url(port))
        self.assertEqual(code, 0, out)
        stats = [b.stats() for b in backends]
        pages = sum(x["pages"] for x in stats)
        self.assertGreater(pages, 10)
        self.assertEqual(s["pages"]["total"], pages)
        # Every object of every page view, once: no more, no fewer.
        self.assertEqual(sum(x["objects"] for x in stats), sum(x["page_objects"] for x in stats))
        self.assertEqual(s["responses"], pages + sum(x["objects"] for x in stats))
        self.assertEqual(s["score"]["fail"], 0)
        # The 6 users, split among the threads, each started once and ended.
        self.assertEqual((s["sessions_started"], s["sessions_ended"]), (6, 6))
        with open(self.path("t.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 4)
        self.assertEqual(float(rows[0]["target_sessions"]), 6.0)
        self.assertEqual(int(rows[-1]["active_sessions"]), 0)
        return s

    def test_session_mode_objects_once_direct(self):
        b = self.start_backend("b1")
        self.check_objects_once(b.port, [b])

    def test_session_mode_objects_once_three_threads(self):
        b = self.start_backend("b1")
        self.check_objects_once(b.port, [b], "--threads", "3")

    def test_session_mode_objects_once_through_dimmer(self):
        b1, b2 = self.start_backend("b1"), self.start_backend("b2")
        self.d = self.start_dimmer({"web": self.pool(b1, b2, balance="age")}, workers=2)
        self.check_objects_once(self.d.port, [b1, b2])

    def test_session_mode_objects_from_a_manifest(self):
        # The manifest lists two of page 0's objects and one of page 1's: those
        # are fetched, and the pages are not scanned for the others.
        b = self.start_backend("b1")
        objs = [H.get(b.port, "/page/%d.objects" % n).body.decode().split() for n in (0, 1)]
        self.assertGreater(len(objs[0]), 2)
        manifest = self.path("site.manifest")
        with open(manifest, "w") as f:
            f.write("# two pages\npage /page/0.html\n  %s\n  %s 100\npage /page/1.html\n"
                    "  %s\n  //elsewhere.example/a.png\n" % (objs[0][0], objs[0][1], objs[1][0]))
        pat = self.pattern("0,3\n2,3\n2.01,0\n3,0\n")
        code, s, out = self.load("--pattern", pat, "--think", "50", "--manifest", manifest,
                                 self.url(b.port))
        self.assertEqual(code, 0, out)
        st = b.stats()
        self.assertGreater(st["pages"], 5)
        self.assertEqual(s["pages"]["total"], st["pages"])
        # Each view of page 0 fetched 2 objects, each of page 1 one: never more than 2 a page.
        self.assertLessEqual(st["objects"], 2 * st["pages"])
        self.assertGreaterEqual(st["objects"], st["pages"])
        self.assertEqual(s["responses"], st["pages"] + st["objects"])
        self.assertEqual(s["score"]["fail"], 0)
        with open(manifest, "a") as f:
            f.write("page nope.html\n")
        p = self.start_proc("badmanifest", [H.DIMMER_LOAD, "--manifest", manifest,
                                            self.url(b.port)])
        self.assertEqual(p.wait(10), 2)
        self.assertIn("site.manifest:8:", p.stderr())

    def test_scored_by_delay(self):
        b = self.start_backend("b1")
        for ms, kind in ((20, "good"), (500, "tolerable"), (1000, "fail")):
            code, s, out = self.load("-c", "2", "-d", "2", "--good", "300", "--tolerable", "800",
                                     self.url(b.port, "/slow/%d" % ms), name="slow%d" % ms)
            self.assertEqual(code, 0, out)
            sc = s["score"]
            self.assertGreater(sc["total"], 0)
            self.assertEqual(sc[kind], sc["total"], (ms, sc))
            if kind == "fail":
                self.assertEqual(sc["fail_by_kind"]["slow"], sc["total"])
            self.assertGreaterEqual(s["latency_ms"]["p50"], ms * 0.99)
            self.assertLess(s["latency_ms"]["p50"], ms + 250)

    def test_closed_mode_latency_leaves_the_connect_out(self):
        # wrk's model: latency from the request's write. A server whose
        # accept queue is full drops the SYN, so the first connect takes the
        # kernel's SYN retransmission (1 s); that second was in the latency
        # of the first request. The server's answers themselves are quick.
        srv = socket.socket()
        self.addCleanup(srv.close)
        srv.bind((H.HOST, 0))
        srv.listen(0)  # one connection waits in the queue at most
        port = srv.getsockname()[1]
        filler = socket.create_connection((H.HOST, port))  # fills it
        self.addCleanup(filler.close)
        stop = threading.Event()

        def serve():
            srv.settimeout(0.2)
            conns = []
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                except OSError:
                    continue
                conns.append(c)
                threading.Thread(target=answer, args=(c,), daemon=True).start()
            for c in conns:
                c.close()

        def answer(c):
            buf = b""
            try:
                while not stop.is_set():
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                    while b"\r\n\r\n" in buf:
                        buf = buf.split(b"\r\n\r\n", 1)[1]
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except OSError:
                return

        p = self.start_proc("load", [H.DIMMER_LOAD, "--quiet", "--json", self.path("l.json"),
                                     "-c", "1", "-d", "3", self.url(port, "/")])
        # The load's SYN is dropped (the queue is full); then room is made
        # (the filler taken), and the retransmitted SYN gets through.
        def syn_sent():
            with open("/proc/net/tcp") as f:
                next(f)
                return any(int(ln.split()[2].rsplit(":", 1)[1], 16) == port and
                           ln.split()[3] == "02" for ln in f)

        H.wait_until(syn_sent, 5, "the load's connect to wait (SYN_SENT)")
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        self.assertEqual(p.wait(RUN_BOUND), 0, p.stderr())
        stop.set()
        with open(self.path("l.json")) as f:
            s = json.load(f)
        self.assertGreater(s["responses"], 10, s)
        self.assertEqual(s["score"]["fail"], 0, s)
        self.assertLess(s["latency_ms"]["max"], 500, s["latency_ms"])

    def test_killed_backend_fails_by_kind(self):
        b = self.start_backend("b1")
        threading.Timer(1.0, b.proc.kill).start()
        start = time.monotonic()
        code, s, out = self.load("-c", "4", "-d", "3", self.url(b.port, "/bytes/100"))
        self.assertEqual(code, 0, out)
        self.assertLess(time.monotonic() - start, 3 + 10)
        sc = s["score"]
        self.assertGreater(sc["good"], 0)
        self.assertGreater(sc["fail_by_kind"]["connect"], 0, sc)
        self.assertEqual(sc["fail"], sum(sc["fail_by_kind"].values()))

    def test_killed_backend_through_dimmer_is_5xx(self):
        b = self.start_backend("b1")
        self.d = self.start_dimmer({"web": self.pool(b)})
        threading.Timer(1.0, b.proc.kill).start()
        code, s, out = self.load("-c", "4", "-d", "3", self.url(self.d.port, "/bytes/100"))
        self.assertEqual(code, 0, out)
        sc = s["score"]
        self.assertGreater(sc["good"], 0)
        self.assertGreater(sc["fail_by_kind"]["5xx"], 0, sc)

    def test_endless_heads_are_malformed_not_timeouts(self):
        # A head that does not end, and interim responses in the hundreds:
        # dimmer-load read them until its timeout (10 MB of head, 100,000
        # 100 Continue). They are malformed past 100 KiB of head or 64 interims.
        fb = self.start_fault_backend()
        for mode in ("endless_head", "interim_flood"):
            with self.subTest(mode):
                code, s, out = self.load("-c", "2", "-d", "1", "--timeout", "60000",
                                         self.url(fb.port, "/fault/" + mode), name=mode)
                self.assertEqual(code, 0, out)
                sc = s["score"]
                self.assertGreater(sc["fail_by_kind"]["parse"], 2, sc)
                self.assertEqual(sc["fail"], sc["fail_by_kind"]["parse"], sc)

    def test_bodiless_responses_end_at_their_head(self):
        # A 204, a 304 (its Content-Length not a body) and a 200 with
        # Content-Length: 0 end with their head: dimmer-load waited for more
        # bytes and scored none of them until its timeout.
        fb = self.start_fault_backend()
        code, s, out = self.load("-c", "2", "-d", "1", self.url(fb.port, "/fault/bodiless"))
        self.assertEqual(code, 0, out)
        sc = s["score"]
        self.assertGreater(sc["good"], 30, sc)
        self.assertEqual(sc["fail"], 0, sc)
        self.assertEqual(s["connects"], 2, s)

    def test_url_fragment_not_sent(self):
        # The fragment is the client's: /slow/300#x asks for /slow/300 (sent
        # whole, the backend refused it at once with a 400).
        b = self.start_backend("b1")
        code, s, out = self.load("-c", "1", "-d", "1", "--good", "200",
                                 "http://%s:%d/slow/300#x" % (H.HOST, b.port))
        self.assertEqual(code, 0, out)
        self.assertGreater(s["score"]["total"], 0, s)
        self.assertEqual(s["score"]["tolerable"], s["score"]["total"], s)
        self.assertEqual(s["status"]["2xx"], s["score"]["total"], s)
        # A path the backend does not have: 404s, counted as wrk counts them.
        code, s, out = self.load("-c", "1", "-d", "1", self.url(b.port, "/no/such"), name="404")
        self.assertEqual(code, 0, out)
        self.assertGreater(s["status"]["4xx"], 0, s)
        self.assertEqual(s["status"]["4xx"], s["score"]["total"], s)
        self.assertIn("non-2xx/3xx responses: 4xx %d\n" % s["status"]["4xx"], out)
        # So in a --urls file (its fragment was sent).
        code, s, out = self.load("--pattern", self.pattern("0,2\n2,2\n"), "--think", "100",
                                 "--no-objects", "--good", "200", "--urls",
                                 self.pattern("# paths\n/slow/300#x\n", "urls.txt"),
                                 self.url(b.port, "/"), name="urls")
        self.assertEqual(code, 0, out)
        self.assertGreater(s["pages"]["total"], 0, s)
        self.assertEqual(s["pages"]["tolerable"], s["pages"]["total"], s)
        # No path at all, only a query: the target is /?q.
        code, s, out = self.load("-c", "1", "-d", "1", "http://%s:%d?q" % (H.HOST, b.port),
                                 name="query")
        self.assertEqual(code, 0, out)
        self.assertGreater(s["score"]["good"], 0, s)

    def test_unanswered_at_the_end_are_counted(self):
        # A server that never answers, at 40 requests/s for 1 s: nothing is
        # scored (the 10 s timeout is not reached), and the summary said 0
        # responses, no failure, as if nothing had been asked. The requests
        # due and unanswered are counted: the 2 out and the 38 or so due
        # while their connection waited.
        fb = self.start_fault_backend()
        code, s, out = self.load("--rate", "40", "-c", "2", "-d", "1",
                                 self.url(fb.port, "/fault/silent"))
        self.assertEqual(code, 0, out)
        self.assertEqual(s["responses"], 0, s)
        self.assertGreaterEqual(s["unanswered"], 38, s)
        self.assertLessEqual(s["unanswered"], 42, s)
        self.assertGreaterEqual(s["unanswered_oldest_ms"], 900, s)
        self.assertIn("unanswered at the end: %d requests" % s["unanswered"], out)

    def test_rate_mode_sees_a_stall(self):
        b = self.start_backend("b1")
        # 200 requests/s over 4 connections for 4 s; the backend stops for 1 s at 1.5 s.
        def stall():
            b.proc.signal(signal.SIGSTOP)
            time.sleep(1.0)
            b.proc.signal(signal.SIGCONT)
        threading.Timer(1.5, stall).start()
        code, s, out = self.load("--rate", "200", "-c", "4", "-d", "4",
                                 self.url(b.port, "/bytes/100"))
        self.assertEqual(code, 0, out)
        # About a quarter of the requests were due during the stall and waited
        # for it: from their due time, the p99 is about the stall itself.
        self.assertGreaterEqual(s["latency_ms"]["p99"], 800, s["latency_ms"])
        self.assertGreaterEqual(s["latency_ms"]["p90"], 300, s["latency_ms"])
        # And the rate was held: the requests due in 4 s were all sent.
        self.assertGreater(s["responses"], 0.9 * 200 * 4)

    def test_source_addresses(self):
        # Connections come from each --source address in turn: dimmer's access
        # log shows the client address of every request.
        b = self.start_backend("b1")
        log = self.path("access.log")
        self.d = self.start_dimmer({"web": self.pool(b)}, access_log=log)
        self.extra_logs = [log]
        code, s, out = self.load("-c", "4", "-d", "1", "--source", "127.0.0.2-127.0.0.3",
                                 self.url(self.d.port, "/bytes/10"))
        self.assertEqual(code, 0, out)
        self.assertGreater(s["score"]["good"], 0)
        self.assertEqual(s["score"]["fail"], 0)

        def clients():
            with open(log) as f:
                lines = f.read().splitlines()
            return {line.split(" ")[1] for line in lines} if len(lines) >= 4 else None

        self.assertEqual(H.wait_until(clients, 5, "access log"), {"127.0.0.2", "127.0.0.3"})

    def test_connections_that_fail_at_once_do_not_stop_the_run(self):
        # Regression: with no descriptor left (EMFILE), each connect failed
        # inside the call that sent the request, whose failure sent the next
        # one, and so on while the rate was behind its schedule: the stack
        # ran out (SIGSEGV).
        b = self.start_backend("b1")
        p = self.start_proc("load-emfile", ["sh", "-c", 'ulimit -n 9; exec "$@"', "sh",
                                            H.DIMMER_LOAD, "--quiet", "--rate", "100000", "-c", "1",
                                            "-d", "1", self.url(b.port)])
        code = p.wait(RUN_BOUND)
        self.assertEqual(code, 0, (p.stdout(), p.stderr()))
        self.assertIn("failures: connect", p.stdout())

    def test_a_run_cut_short_counts_the_seconds_it_ran(self):
        # Regression: after Ctrl-C the last second the threads ended was in
        # the totals but not in the timeline or the length: "52080 responses
        # in 1 s, 52080.0/s" for 1.5 s at 26,000/s.
        b = self.start_backend("b1")
        table, out = self.path("cut.csv"), self.path("cut.json")
        p = self.start_proc("load-cut", [H.DIMMER_LOAD, "--quiet", "--csv", table, "--json", out,
                                         "--rate", "200", "-c", "2", "-d", "30",
                                         self.url(b.port)])

        def rows():
            with open(table) as f:
                return [ln.split(",") for ln in f.read().splitlines()[1:]]

        H.wait_until(lambda: os.path.exists(table) and len(rows()) >= 1, 10, "the first second")
        p.signal(signal.SIGINT)
        self.assertEqual(p.wait(RUN_BOUND), 0, p.stderr())
        with open(out) as f:
            s = json.load(f)
        got = rows()
        self.assertEqual(s["seconds"], len(got))
        self.assertEqual(s["responses"], sum(int(r[4]) for r in got))
        self.assertGreater(s["responses"], 0)

    def test_bad_input(self):
        for args, what in ((["--rate", "x", "http://127.0.0.1:1/"], "--rate"),
                           (["--bogus", "http://127.0.0.1:1/"], "unknown option"),
                           (["--pattern", self.path("missing.csv"), "http://127.0.0.1:1/"],
                            "missing.csv"),
                           (["--pattern", self.pattern("0,1\n5,x\n"), "http://127.0.0.1:1/"],
                            "pattern.csv:2"),
                           (["ftp://127.0.0.1/"], "http://"),
                           # getaddrinfo() would take 99999 as port 34463
                           (["http://127.0.0.1:99999/"], "1 to 65535"),
                           (["--pattern", self.pattern("0,1e12\n1,1e12\n", "huge.csv"), "http://127.0.0.1:1/"],
                            "1,000,000"),
                           (["--pattern", self.pattern("0,1\n1e300,1\n", "long.csv"), "http://127.0.0.1:1/"],
                            "30 days"),
                           (["--source", "::1", "http://127.0.0.1:1/"], "family"),
                           (["--source", "10.0.0.9-10.0.0.1", "http://127.0.0.1:1/"], "range"),
                           # An address of another machine (TEST-NET-1): said now, with why,
                           # not as every connection's failure.
                           (["--source", "192.0.2.1", "http://127.0.0.1:1/"],
                            "--source 192.0.2.1: Cannot assign requested address"),
                           (["--urls", self.tmp, "--mode", "sessions", "http://127.0.0.1:1/"],
                            "Is a directory"),
                           # Each range is bounded, and so is the list.
                           (["--source", ",".join(["127.0.0.0-127.0.255.255"] * 3),
                             "http://127.0.0.1:1/"], "at most 65536 addresses"),
                           # Not read whole into memory, and no misleading "no pages".
                           (["--manifest", "/dev/zero", "http://127.0.0.1:1/"], "a NUL byte"),
                           # Refused before the run, not after it.
                           (["-d", "30", "--json", self.path("no-such-dir/x.json"),
                             "http://127.0.0.1:1/"], "x.json"),
                           # A space or CRLF would break the request line or add a header.
                           (["http://127.0.0.1:1/a b"], "space or control character"),
                           (["http://127.0.0.1:1/a\r\nX-Injected: 1"], "space or control character"),
                           (["--urls", self.pattern("/a\x01b\n", "urls.txt"), "http://127.0.0.1:1/"],
                            "urls.txt:1"),
                           (["http://user@127.0.0.1:1/"], "user name"),
                           # A count is whole: 2.5 was cut to 2, a seed over 2^53 rounded.
                           (["-c", "2.5", "http://127.0.0.1:1/"], "-c: expected a whole number"),
                           (["--seed", "9007199254740993.0", "http://127.0.0.1:1/"],
                            "--seed: expected a whole number"),
                           # Measured second by second: 1.5 ran 2 s.
                           (["-d", "1.5", "http://127.0.0.1:1/"], "-d: whole seconds"),
                           (["-d", "0.2", "http://127.0.0.1:1/"], "-d: whole seconds"),
                           # Not "a number from 0.001": zero is a number, not a whole second.
                           (["-d", "0", "http://127.0.0.1:1/"], "-d: whole seconds"),
                           # An option of another mode was silently ignored.
                           (["--mode", "closed", "--rate", "100", "http://127.0.0.1:1/"],
                            "--rate is the rate mode's"),
                           (["--mode", "sessions", "-c", "4", "http://127.0.0.1:1/"],
                            "-c is the rate and closed modes'"),
                           (["--mode", "sessions", "-d", "3", "http://127.0.0.1:1/"],
                            "-d is the rate and closed modes'"),
                           # ... and the other way: --urls asked for / over and over.
                           (["-d", "3", "--urls", "u.txt", "http://127.0.0.1:1/"],
                            "--urls is the sessions mode's: the closed mode"),
                           (["--rate", "9", "--think", "5", "http://127.0.0.1:1/"],
                            "--think is the sessions mode's: the rate mode"),
                           (["--mode", "closed", "--no-objects", "http://127.0.0.1:1/"],
                            "--no-objects is the sessions mode's"),
                           ([], "no URL")):
            self.assert_usage_error(H.DIMMER_LOAD, args, what)


if __name__ == "__main__":
    H.main()
