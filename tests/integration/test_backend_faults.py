"""
Fault injection with a real faulty server (fault_backend.py) on loopback: a
server that dies mid-response, never answers, resets, answers half a status
line or a malformed head, trickles, or sends more body than its
Content-Length. For each: what the client gets (a status, or an abrupt close
that leaves the body visibly truncated once the head went out), the error log
line, the time it takes under small timeouts, the server's passive-check
state afterwards, and that another connection is served meanwhile (no worker
stall). The last test runs batches of every fault and checks that dimmer's
descriptors and RSS come back to their baseline. The expected outcomes are
tabled in tests/README.md.
"""
import os
import re
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402


SERVER_RESPONSE = 1.0  # timeouts.server_response, seconds
REQUEST = 2.0  # timeouts.request
SLACK = 1.5  # a bound's allowance over its timeout (ASan builds, a loaded machine)
AT_ONCE = 1.0  # "at once": a fault that ends an exchange is answered within SLACK + this
HOLDING = {"die_mid", "die_mid_chunked", "half_status"}  # wait for /release


def split_response(raw):
    """(head bytes, {lowercased name: value}, body bytes) of a raw response."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, "no whole head in %r" % raw[:200]
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode()] = value.strip().decode()
    return head, headers, body


def chunks_complete(body):
    """True if body is a whole chunked body (last chunk and its empty line included)."""
    while True:
        line, sep, rest = body.partition(b"\r\n")
        if not sep:
            return False
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return rest.startswith(b"\r\n") or b"\r\n\r\n" in rest
        if len(rest) < size + 2:
            return False
        body = rest[size + 2:]



class BackendFaultTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.good = self.start_backend("good")
        self.fb = self.start_fault_backend()


    def start(self, max_fails=1, server_response=SERVER_RESPONSE, request=REQUEST, env=None,
              client_header=None):
        # Passive checks on the faulty server: one failure takes it out (for
        # longer than a test), so its state says whether the fault counted.
        pools = {
            "faulty": {"balance": "roundrobin", "servers": [("f", self.fb.port)],
                       "passive": {"max_fails": max_fails, "fail_timeout": "60s"}},
            "good": self.pool(self.good, passive={"max_fails": 0}),
        }
        conf = self.write_config(H.yaml_config(
            0, pools, admin=0, routes=[{"path": "/fault/", "pool": "faulty"}], default_pool="good",
            timeouts=dict({"server_response": "%dms" % (server_response * 1000),
                           "request": "%dms" % (request * 1000)},
                          **({} if client_header is None else
                             {"client_header": "%dms" % (client_header * 1000)}))))
        self.d = self.start_dimmer_conf(conf, env=env)
        return self.d

    def faulty(self):
        return self.d.servers("faulty")["f"]

    def log_has(self, pattern, timeout=3.0):
        rx = re.compile(pattern)
        return H.wait_until(lambda: rx.search(self.d.proc.stderr()), timeout,
                            "a log line matching %r" % pattern)

    def inject(self, mode, check_meanwhile=True, timeout=REQUEST + 5):
        """
        Sends GET /fault/mode on a fresh client connection; once the fault backend
        has the request, checks that another connection is served, releases a
        holding fault, and reads until dimmer closes. Returns (raw bytes, closed,
        seconds from the request to the close or the timeout).
        """
        n = self.fb.count("got " + mode)
        c = H.Conn(self.d.port, timeout=timeout)
        try:
            start = time.monotonic()
            c.send(H.build_request("GET", "/fault/" + mode))
            H.wait_until(lambda: self.fb.count("got " + mode) > n, 5,
                         "the fault backend to get /fault/" + mode)
            if check_meanwhile:
                self.served_meanwhile()
            if mode in HOLDING:
                self.fb.release()
            closed = c.closed_by_peer(timeout)
            return c.buf, closed, time.monotonic() - start
        finally:
            c.close()

    def assert_status(self, raw, closed, status, reason):
        self.assertTrue(closed, "dimmer kept the connection after %d: %r" % (status, raw[:300]))
        head, _, body = split_response(raw)
        self.assertTrue(head.startswith(b"HTTP/1.1 %d " % status), head)
        self.assertIn(reason.encode(), body)

    def assert_truncated(self, raw, closed, length):
        """The head went out, then fewer than length body bytes, then the close."""
        self.assertTrue(closed, "connection kept after a cut-short body: %r" % raw[:300])
        head, headers, body = split_response(raw)
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
        self.assertEqual(headers.get("content-length"), str(length))
        self.assertLess(len(body), length, "a cut-short body looked complete")

    def assert_health(self, counted, refused=False):
        s = self.faulty()
        if refused:
            # A head came and was refused: a failure of the request, logged
            # and counted in failures, but the server answers: it stays in.
            self.assertEqual(s["failures"], 1, s)
            self.assertEqual(s["state"], "up", s)
            self.assertEqual(s["fails"], 0, s)
        elif counted:
            self.assertEqual(s["failures"], 1, s)
            self.assertEqual(s["state"], "failing", s)
            # Out for fail_timeout, but the pool's only server: tried again
            # at once (as nginx), not 503 for 60 s.
            r = H.get(self.d.port, "/fault/ok", timeout=5)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(self.faulty()["state"], "up")
        else:
            self.assertEqual(s["failures"], 0, s)
            self.assertEqual(s["state"], "up", s)

    # ---- one test per fault ---------------------------------------------

    def test_dies_mid_response_content_length(self):
        self.start()
        raw, closed, took = self.inject("die_mid")
        self.assert_truncated(raw, closed, 100000)
        self.assertLess(took, SLACK + AT_ONCE)
        self.log_has(r"response cut short: server closed the connection mid-response")
        # The server answered: the head resets its failure row, a cut body is no
        # passive failure (as nginx: not retried, not counted).
        self.assert_health(counted=False)
        self.served_meanwhile()

    def test_dies_mid_response_chunked(self):
        self.start()
        raw, closed, took = self.inject("die_mid_chunked")
        self.assertTrue(closed)
        head, headers, body = split_response(raw)
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
        self.assertEqual(headers.get("transfer-encoding"), "chunked")
        self.assertIn(b"x" * 1000, body)
        self.assertFalse(chunks_complete(body), "a cut-short chunked body looked complete")
        self.assertLess(took, SLACK + AT_ONCE)
        self.log_has(r"response cut short: server closed the connection mid-response")
        self.assert_health(counted=False)

    def test_accepts_and_never_answers(self):
        self.start()
        raw, closed, took = self.inject("silent")
        self.assert_status(raw, closed, 504, "server response timed out")
        self.assertGreaterEqual(took, SERVER_RESPONSE - 0.1)
        self.assertLess(took, SERVER_RESPONSE + SLACK)
        self.log_has(r"server faulty/f: server response timed out")
        self.log_has(r"server faulty/f is DOWN for 60000 ms")
        self.assert_health(counted=True)
        # dimmer closed its server connection: the fault backend saw the close.
        H.wait_until(lambda: self.fb.seen("done silent"), 5, "the server connection to close")

    def test_resets_after_the_request(self):
        self.start()
        raw, closed, took = self.inject("reset", check_meanwhile=False)
        self.assert_status(raw, closed, 502, "connection reset by peer")
        self.assertLess(took, SLACK)
        self.log_has(r"server faulty/f: connection reset by peer")
        self.assert_health(counted=True)
        self.served_meanwhile()

    def test_half_a_status_line(self):
        self.start()
        raw, closed, took = self.inject("half_status")
        self.assert_status(raw, closed, 502, "server closed the connection mid-head")
        self.assertLess(took, SLACK + AT_ONCE)
        # No valid head came: a failure of the server, as a reset is.
        self.log_has(r"server faulty/f: server closed the connection mid-head")
        self.assert_health(counted=True)

    def test_malformed_head(self):
        self.start()
        raw, closed, took = self.inject("malformed")
        self.assert_status(raw, closed, 502, "")
        _, _, body = split_response(raw)
        self.assertNotIn(b"hello", body)
        self.assertLess(took, SLACK + AT_ONCE)
        self.log_has(r"server faulty/f: .*[Ii]nvalid")
        # The server answered, if badly (a server that puts a client's bytes
        # in its head could be made to, by any client): it is not taken out.
        self.assert_health(counted=False, refused=True)
        self.assertNotIn("is DOWN", self.d.proc.stderr())
        H.wait_until(lambda: self.fb.seen("done malformed"), 5, "the server connection to close")

    def test_trickles_its_whole_response(self):
        # A byte every 200 ms is never silent for server_response (1 s); the whole
        # exchange is bounded by timeouts.request (2 s) and, no head having come, 504.
        self.start()
        raw, closed, took = self.inject("trickle")
        self.assert_status(raw, closed, 504, "request took longer than timeouts.request")
        self.assertGreaterEqual(took, REQUEST - 0.1)
        self.assertLess(took, REQUEST + SLACK)
        self.log_has(r"client [0-9.]+: 504 request took longer than timeouts.request")
        # A slow server is not a failed one: timeouts.request bounds the exchange.
        self.assert_health(counted=False)

    def test_trickles_its_body(self):
        self.start()
        raw, closed, took = self.inject("trickle_body")
        self.assert_truncated(raw, closed, 50)
        self.assertGreaterEqual(took, REQUEST - 0.1)
        self.assertLess(took, REQUEST + SLACK)
        self.log_has(r"client [0-9.]+: response cut short: request took longer than timeouts.request")
        self.assert_health(counted=False)

    def test_more_body_than_content_length(self):
        self.start()
        with H.Conn(self.d.port, timeout=5) as c:
            start = time.monotonic()
            r = c.request("GET", "/fault/overlong")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"hello")
            self.assertLess(time.monotonic() - start, SLACK)
            # The extra bytes are not read as the next response: that server
            # connection is not reused, the next request gets a new one.
            r = c.request("GET", "/fault/overlong")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"hello")
            self.assertEqual(self.fb.count("got overlong"), 2)
        self.log_has(r"server faulty/f sent \d+ bytes past its response")
        H.wait_until(lambda: self.fb.count("done overlong") == 2, 5,
                     "both server connections to close")
        self.assert_health(counted=False)

    def test_pooled_connection_closed_under_a_request_is_retried(self):
        # The server closes (or resets) a kept-alive connection just as dimmer
        # reuses it for a request: nothing of it was answered, so it goes
        # again on a new connection and the client never sees the race.
        self.start()
        for mode in ("close_next", "reset_next"):
            with H.Conn(self.d.port, timeout=5) as c:
                self.assertEqual(c.request("GET", "/fault/" + mode).body, b"ok")
                H.wait_until(lambda: self.fb.count("got " + mode) == 1, 5, "the first request")
                before = self.fb.count("got ok")
                r = c.request("GET", "/fault/ok")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                # It went on the pooled connection first, then on a new one.
                self.assertEqual(self.fb.count("got next /fault/ok"),
                                 1 if mode == "close_next" else 2)
                self.assertEqual(self.fb.count("got ok"), before + 1)
        # A race of the keep-alive, not a failure of the server.
        self.assert_health(counted=False)

    def test_interim_responses(self):
        # Each interim head is measured on its own: 60 of 600 bytes (more than
        # a read buffer together) pass; past 64 the server is taken as broken.
        # With leak checks on (an ASan build): a server connection closed with
        # its socket still readable left a read buffer behind.
        self.start(env={"ASAN_OPTIONS": "detect_leaks=1"})
        r = H.get(self.d.port, "/fault/interim", timeout=5)
        self.assertEqual((r.status, r.body), (200, b"ok"))
        self.assertEqual([i.status for i in r.interim], [103] * 60)
        # HTTP/1.0 has no 1xx: an HTTP/1.0 client gets the 200 alone.
        r = H.request(self.d.port, "GET", "/fault/interim", version="HTTP/1.0", timeout=5)
        self.assertEqual((r.status, r.body, r.interim), (200, b"ok", []))
        r = H.get(self.d.port, "/fault/interim_flood", timeout=5)
        self.assertEqual(r.status, 502)
        self.assertEqual(len(r.interim), 64)  # the ones before the limit went out
        H.wait_until(lambda: self.fb.count("done interim_flood") == 1, 5, "the server side closed")
        self.log_has("more than 64 interim")
        self.d.proc.signal(signal.SIGTERM)  # leaks are reported at the exit (the cleanup checks)
        self.assertEqual(self.d.proc.wait(30), 0)

    def test_a_status_out_of_range_and_a_bad_first_chunk_are_502(self):
        # Status codes are 100 to 599 (RFC 9110); a body bad before its first
        # byte: nothing of the response went out, so the client gets a 502,
        # not a bare close.
        self.start(max_fails=0)
        for mode, why in (("status999", b"invalid status code"), ("badchunk", b"")):
            r = H.get(self.d.port, "/fault/" + mode, timeout=5)
            self.assertEqual(r.status, 502, (mode, r))
            self.assertIn(why, r.body)

    def test_chunked_endings_and_trailers_go_out_checked(self):
        # Regression: the end of a chunked response went out as the server sent
        # it. llhttp takes a bare LF as the last line ("0\r\n\n"), and the
        # connection was kept: a client that wants CRLF read the next response
        # as trailer fields (a desync). Trailer fields were not checked either
        # (framing, hop-by-hop, folded, unbounded). Now the last chunk goes out
        # only with a checked trailer section; a bad one cuts the response
        # short (no last chunk) and closes the client connection.
        self.start(max_fails=0)
        with H.Conn(self.d.port, timeout=5) as c:
            c.send(H.build_request("GET", "/fault/end_good"))
            raw = c._read_until(b"0\r\nX-Sum: 1\r\n\r\n", time.monotonic() + 5)
            head, headers, body = split_response(raw)
            self.assertEqual(body, b"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n")
            # Trailer is end-to-end (RFC 9110, 6.6.2): it stays.
            self.assertEqual(headers.get("trailer"), "X-Sum")
            self.assertEqual(c.request("GET", "/fault/ok").body, b"ok")
            # The same end in pieces, one read each: it goes out whole, once.
            c.send(H.build_request("GET", "/fault/split_end"))
            raw = c._read_until(b"0\r\nX-Sum: 1\r\n\r\n", time.monotonic() + 5)
            self.assertEqual(split_response(raw)[2],
                             b"5\r\nhello\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n")
            self.assertEqual(c.request("GET", "/fault/ok").body, b"ok")
        for name, why in (("lf", "bare LF"), ("lf_field", "bare LF"),
                          ("length", "frames the message"), ("te", "frames the message"),
                          ("connection", "hop-by-hop"), ("empty_name", "malformed trailer"),
                          ("fold", "obs-fold"), ("big", "larger than limits.header_bytes"),
                          ("many", "too many trailer fields"),
                          ("long_ext", "chunk-size line .* too long")):
            with self.subTest(name):
                before = self.fb.count("got ok")
                with H.Conn(self.d.port, timeout=5) as c:
                    # A second request behind it: never answered on this connection.
                    c.send(H.build_request("GET", "/fault/end_" + name) +
                           H.build_request("GET", "/fault/ok"))
                    self.assertTrue(c.closed_by_peer(5), "connection kept after a bad end: %r"
                                    % c.buf[-300:])
                    head, headers, body = split_response(c.buf)
                    self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
                    self.assertEqual(body, b"5\r\nhello", "the end went out")
                    self.assertFalse(chunks_complete(body))
                self.log_has("response cut short: .*" + why)
                self.assertEqual(self.fb.count("got ok"), before)
        self.assert_health(counted=False)

    def test_1xx_and_204_go_out_without_framing_fields(self):
        # Regression: a 1xx or 204 with Content-Length or Transfer-Encoding went
        # out with them (RFC 9110 8.6, RFC 9112 6.1: a server must not send
        # them there), and a client that trusts them waits for a body.
        self.start(max_fails=0)
        for mode, statuses in (("framed_204", [103, 204]), ("length_204", [204])):
            with H.Conn(self.d.port, timeout=5) as c:
                r = c.request("GET", "/fault/" + mode)
                self.assertEqual([x.status for x in r.interim] + [r.status], statuses)
                for h in [x.raw_head for x in r.interim] + [r.raw_head]:
                    self.assertNotIn(b"content-length", h.lower(), h)
                    self.assertNotIn(b"transfer-encoding", h.lower(), h)
                # The client connection is kept: the next request is answered.
                self.assertEqual(c.request("GET", "/fault/ok").body, b"ok")

    def test_transfer_encoding_in_an_http10_response_is_502(self):
        # Regression: an HTTP/1.0 response with Transfer-Encoding (and Connection:
        # keep-alive) was read as chunked and its connection reused. Its framing
        # is faulty (RFC 9112, 6.1: HTTP/1.0 has no chunked, the server may mean
        # the body to end with the connection): 502, the connection closed.
        self.start(max_fails=0)
        with H.Conn(self.d.port, timeout=5) as c:
            r = c.request("GET", "/fault/te10_next")
            self.assertEqual(r.status, 502, r)
            self.assertIn(b"Transfer-Encoding in an HTTP/1.0 response", r.body)
        H.wait_until(lambda: self.fb.count("done te10_next") == 1, 5,
                     "the server connection to close")
        r = H.get(self.d.port, "/fault/ok", timeout=5)
        self.assertEqual((r.status, r.body), (200, b"ok"))
        self.assertEqual(self.fb.count("got next /fault/ok"), 0, "the connection was reused")

    def test_other_codings_than_chunked_for_an_http10_client_are_502(self):
        # Regression: the framing came off for an HTTP/1.0 client, but only the
        # first Transfer-Encoding field did: with gzip then chunked, it got
        # "Transfer-Encoding: chunked" over a de-chunked body. A coding it
        # cannot decode (it knows none) is 502, as HAProxy does.
        self.start(max_fails=0)
        with H.Conn(self.d.port, timeout=5) as c:
            c.send(b"GET /fault/gzip_chunked HTTP/1.0\r\n\r\n")
            r = c.read_response()
            self.assertEqual(r.status, 502, r)
            self.assertIn(b"transfer coding other than chunked", r.body)
            self.assertEqual(r.header_all("Transfer-Encoding"), [])
        self.assertEqual(self.faulty()["failures"], 0, "a client's version took the server out")

    def test_an_early_response_says_connection_close(self):
        # Regression: a final response before the whole request body (a 401 or
        # 413 to an upload) went out without "Connection: close", though dimmer
        # closes the client connection after it (the rest of the body is never
        # read); the client learnt it only from the close.
        self.start(max_fails=0)
        for body in (b"Content-Length: 100000\r\n\r\n" + b"a" * 1000,
                     b"Transfer-Encoding: chunked\r\n\r\n10\r\n" + b"a" * 16 + b"\r\n"):
            with H.Conn(self.d.port, timeout=5) as c:
                c.send(b"POST /fault/early401 HTTP/1.1\r\nHost: a\r\n" + body)
                r = c.read_response()
                self.assertEqual((r.status, r.body), (401, b"nope"))
                self.assertEqual((r.header("Connection") or "").lower(), "close", r)
                self.assertTrue(c.closed_by_peer(3))
        # A response after the whole body keeps the connection.
        with H.Conn(self.d.port, timeout=5) as c:
            r = c.request("POST", "/fault/early401", body=b"abc")
            self.assertEqual((r.status, r.body), (401, b"nope"))
            self.assertIsNone(r.header("Connection"), r)
            self.assertEqual(c.request("GET", "/bytes/2").status, 200)  # the good pool

    def test_health_checks_pass_over_interim_responses(self):
        # 103 Early Hints before the 200 of a health check: the 200 decides.
        pools = {"faulty": {"servers": [("f", self.fb.port)],
                            "health_check": {"path": "/fault/hinted", "interval": "100ms",
                                             "timeout": "1s", "rise": 1, "fall": 2}}}
        self.d = self.start_dimmer(pools)
        H.wait_until(lambda: self.fb.count("done hinted") >= 4, 10, "four checks")
        self.assertEqual(self.faulty()["state"], "up")

    def test_a_switch_nobody_asked_for_is_refused(self):
        # A 101 to a request without Upgrade: following it would send the
        # client's next request to the server unparsed (WebSocket smuggling).
        self.start()
        with H.Conn(self.d.port, timeout=5) as c:
            r = c.request("GET", "/fault/switch")
            self.assertEqual(r.status, 502, r)
            self.assertIn(b"asked for none", r.body)
            # Closed after the 502: nothing the client sends next can reach the server.
            self.assertTrue(c.closed_by_peer(5))
        H.wait_until(lambda: self.fb.count("done switch") == 1, 5, "the server connection closed")
        self.assertEqual(self.fb.count("tunneled"), 0)

    def test_a_switch_without_connection_upgrade_is_refused(self):
        # Regression: a 101 with Upgrade but no "Connection: upgrade" went to
        # the client as a switch (dimmer adds the field), while llhttp read
        # on as HTTP: the next head went out unchecked, its hop-by-hop
        # fields and all.
        self.start()
        with H.Conn(self.d.port, timeout=5) as c:
            r = c.request("GET", "/fault/switch_bare",
                          [("Connection", "upgrade"), ("Upgrade", "websocket")])
            self.assertEqual(r.status, 502, r)
            self.assertIn(b"without Connection: upgrade", r.body)
            self.assertTrue(c.closed_by_peer(5))
            self.assertNotIn(b"X-Secret", c.buf)

    def test_a_response_head_over_header_bytes_in_one_read_is_502(self):
        # Regression: the bound was checked only while a head was incomplete,
        # so a 20 KB head that came in one read went out (header_bytes 16k).
        self.start(max_fails=0)
        r = H.get(self.d.port, "/fault/big_head", timeout=5)
        self.assertEqual(r.status, 502, r)
        self.assertIn(b"response head too large", r.body)

    def test_a_client_gone_under_a_dechunked_response_does_not_stop_dimmer(self):
        # Regression: an HTTP/1.0 client gets a chunked response de-chunked,
        # each piece written as llhttp decodes it; a write that failed at
        # once (the client reset while dimmer did not read it: its pipelined
        # bytes filled the buffer) closed the client, and dimmer went on with
        # the freed request (SIGSEGV), and llhttp read on in the freed read
        # buffer (AddressSanitizer sees it when the buffer is freed, not
        # pooled: the worker's pool is full).
        self.start(max_fails=0, server_response=10, request=20, client_header=0.5)
        c = socket.create_connection((H.HOST, self.d.port), timeout=5)
        self.addCleanup(c.close)
        c.sendall(b"GET /fault/held_chunked HTTP/1.0\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:  # the server connection's buffer is taken
            data = c.recv(4096)
            self.assertTrue(data, "closed before the head")
            head += data
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
        c.setblocking(False)
        junk = b"GET /p HTTP/1.0\r\nX-Pad: " + b"a" * 4000 + b"\r\n\r\n"
        sent, full = 0, False
        while sent < 64 << 20 and not full:  # until dimmer no longer reads it
            try:
                sent += c.send(junk)
            except BlockingIOError:
                full = True
        self.assertTrue(full, "dimmer read 64 MB of pipelined requests")
        # 40 clients at once, each with a read buffer, answered 408 and closed:
        # the worker keeps 32 of their buffers, its pool is full.
        fill = [H.Conn(self.d.port, timeout=5) for _ in range(40)]
        for f in fill:
            self.addCleanup(f.close)
            f.send(b"GET / HTTP/1.1\r\nX: a")
        for f in fill:
            self.assertEqual(f.read_response().status, 408)
        self.assertEqual(self.faulty()["inflight"], 1)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # a reset that dimmer, not reading, does not see
        self.fb.release()
        H.wait_until(lambda: self.faulty()["inflight"] == 0, 5, "the request to end")
        self.assertTrue(self.d.proc.alive())
        self.assertEqual(H.get(self.d.port, "/fault/ok", timeout=5).body, b"ok")

    def test_a_post_is_not_sent_twice(self):
        # The same race under a POST: the server may have acted on it before
        # it closed, so it is not sent again (RFC 9110, 9.2.2): the client
        # gets the 502 and decides.
        self.start()
        with H.Conn(self.d.port, timeout=5) as c:
            self.assertEqual(c.request("GET", "/fault/close_next").body, b"ok")
            H.wait_until(lambda: self.fb.count("got close_next") == 1, 5, "the first request")
            before = self.fb.count("got ok")
            r = c.request("POST", "/fault/ok", [("Content-Length", "0")])
            self.assertEqual(r.status, 502, r)
        self.assertEqual(self.fb.count("got next /fault/ok"), 1)
        self.assertEqual(self.fb.count("got ok"), before)

    # ---- leaks ----------------------------------------------------------

    BATCH = ["die_mid", "die_mid_chunked", "silent", "reset", "half_status", "malformed",
             "trickle_body", "overlong"]

    def run_batch(self):
        for mode in self.BATCH:
            if mode == "overlong":  # a whole response, on a connection kept alive
                self.assertEqual(H.get(self.d.port, "/fault/overlong", timeout=5).body, b"hello")
                continue
            raw, closed, _ = self.inject(mode, check_meanwhile=False, timeout=5)
            self.assertTrue(closed, mode)
            self.assertTrue(raw.startswith(b"HTTP/1.1 "), (mode, raw[:200]))
        self.served_meanwhile()

    def test_no_descriptor_or_memory_leak(self):
        # Passive checks off: every fault reaches the server every time.
        d = self.start(max_fails=0, server_response=0.3, request=0.6)
        pid = d.proc.pid
        self.run_batch()  # warm up: buffers, pooled connections, the allocator
        H.wait_until(lambda: all(self.fb.count("done " + m) >= 1 for m in self.BATCH
                                 if m != "reset"), 5, "the first batch to end")
        base_fds = H.fds(pid)
        base_rss = H.rss_kib(pid)
        for _ in range(4):
            self.run_batch()
        H.wait_until(lambda: H.fds(pid) <= base_fds, 5,
                     "dimmer's descriptors back to %d (now %d)" % (base_fds, H.fds(pid)))
        # RSS: 4 MiB of slack for allocator and sanitizer caches (ASan keeps freed
        # memory in quarantine); a leaked read buffer per faulty exchange is
        # not caught by it, only leaks of 128 KiB and more per exchange.
        grown = H.rss_kib(pid) - base_rss
        sys.stderr.write("  fds %d -> %d, RSS %d KiB -> %+d KiB\n" % (base_fds, H.fds(pid),
                                                                   base_rss, grown))
        self.assertLess(grown, 4096, "RSS grew by %d KiB over 4 batches of faults" % grown)
        self.assertEqual(self.faulty()["state"], "up")


if __name__ == "__main__":
    H.main()
