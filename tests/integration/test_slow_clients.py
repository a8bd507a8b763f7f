"""
Clients that hold connections without finishing a request: silent ones, ones
that trickle a head (slowloris) or a body, and inputs a strict proxy must
answer at once (an HTTP/0.9 line) or refuse before anything invalid reaches
a server (a folded trailer). Each fault runs while a normal request on
another connection is served, and each wait is bounded.
"""
import hashlib
import os
import selectors
import socket
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

# Time dimmer may take beyond a timeout before the close is seen: the timeout
# tick (50 ms), a loaded 2-core machine and the sanitizer build.
SLACK = 4.0


def open_many(port, n, first=None):
    """
    n connections to port, non-blocking. With first, each one sends it at
    once and, when the port is a TLS listener (DIMMER_IT_TLS), speaks TLS
    (handshake first, so that the bytes are a request's, not a handshake's);
    without, each stays silent, which over TLS is a handshake never begun.
    """
    socks = []
    for _ in range(n):
        s = socket.create_connection((H.HOST, port), timeout=H.IO_TIMEOUT)
        if first is not None:
            if port in H.tls_ports:
                s = H.tls_client_context().wrap_socket(s, server_hostname="localhost")
            s.sendall(first)
        s.setblocking(False)
        socks.append(s)
    return socks


def wait_closed(socks, deadline, on_tick=None, tick=None):
    """
    Reads every socket until the peer closes it, or until deadline. Returns
    {socket: (monotonic time of the close, bytes received)} for the closed
    ones. on_tick(open_socks) is called every `tick` seconds meanwhile.
    """
    sel = selectors.DefaultSelector()
    got = {s: b"" for s in socks}
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed = {}
    next_tick = time.monotonic() + tick if tick else None
    try:
        while len(closed) < len(socks):
            now = time.monotonic()
            if now >= deadline:
                break
            wait = deadline - now
            if next_tick is not None:
                wait = max(0.0, min(wait, next_tick - now))
            for key, _ in sel.select(wait):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue  # no byte yet, or only part of a TLS record
                except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError,
                        ssl.SSLZeroReturnError):
                    data = b""
                if data:
                    got[s] += data
                    continue
                closed[s] = (time.monotonic(), got[s])
                sel.unregister(s)
            if next_tick is not None and time.monotonic() >= next_tick:
                on_tick([s for s in socks if s not in closed])
                next_tick += tick
    finally:
        sel.close()
    return closed


class Recorder:
    """
    A stand-in backend on 127.0.0.1:0 that records every byte it receives,
    per connection, and answers 200 and closes once a chunked request has
    ended (so that every request comes on a connection of its own).
    """

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((H.HOST, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []  # [bytearray, closed Event]
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            rec = [bytearray(), threading.Event()]
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self._serve, args=(c, rec), daemon=True).start()

    def _serve(self, c, rec):
        with c:
            c.settimeout(30)
            while True:
                try:
                    data = c.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    rec[1].set()
                    return
                rec[0] += data
                head_end = rec[0].find(b"\r\n\r\n")
                if head_end >= 0 and rec[0].endswith(b"\r\n\r\n") and \
                        b"\r\n0\r\n" in rec[0][head_end:]:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                              b"Connection: close\r\n\r\nok")
                    rec[0] += b"<answered>"
                    rec[1].set()
                    return

    def close(self):
        self.sock.close()


class OneShotServer:
    """
    A stand-in backend on 127.0.0.1:0 that serves each connection with
    serve(sock, head_bytes) in a thread of its own.
    """

    def __init__(self, serve):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((H.HOST, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.serve = serve
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        with c:
            c.settimeout(30)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    data = c.recv(65536)
                    if not data:
                        return
                    head += data
                self.serve(c, head)
            except OSError:
                pass

    def close(self):
        self.sock.close()


class SlowClientTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def assert_served(self):
        r = H.get(self.d.port, "/bytes/100", timeout=5)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, H.pattern(100))

    def test_silent_connections_all_close_at_client_header(self):
        # Regression: every accept used to cut the header-timeout list, so of
        # many silent connections only the last one was ever closed.
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"client_header": "1s"})
        opened = time.monotonic()
        socks = open_many(self.d.port, 300)
        try:
            self.assert_served()  # a normal client is served meanwhile
            closed = wait_closed(socks, opened + 1.0 + SLACK)
            self.assertEqual(len(closed), len(socks), "%d of %d silent connections still open" %
                             (len(socks) - len(closed), len(socks)))
            first = min(t for t, _ in closed.values())
            self.assertGreaterEqual(first - opened, 0.9, "closed before client_header")
            # Nothing was asked, so nothing is answered: a plain close.
            self.assertEqual({data for _, data in closed.values()}, {b""})
            self.assert_served()
        finally:
            for s in socks:
                s.close()

    def test_trickled_heads_get_408_at_client_header(self):
        # Slowloris: a header line every 200 ms does not extend the bound on
        # the whole head.
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"client_header": "1s"})
        opened = time.monotonic()
        socks = open_many(self.d.port, 150, first=b"GET /bytes/10 HTTP/1.1\r\nHost: test\r\n")
        try:
            n = [0]

            def trickle(open_socks):
                n[0] += 1
                for s in open_socks:
                    try:
                        s.send(b"X-Line-%d: x\r\n" % n[0])
                    except OSError:
                        pass  # closed under us: the read side says how

            closed = wait_closed(socks, opened + 1.0 + SLACK, on_tick=trickle, tick=0.2)
            self.assert_served()
            self.assertEqual(len(closed), len(socks), "%d of %d trickling heads still open" %
                             (len(socks) - len(closed), len(socks)))
            for t, data in closed.values():
                self.assertTrue(data.startswith(b"HTTP/1.1 408 "), data[:100])
                self.assertGreaterEqual(t - opened, 0.9)
            self.assertGreaterEqual(n[0], 4, "the heads were not trickled for long")
            self.assertEqual(self.b1.requests(), 1, "a trickled head reached the backend")
        finally:
            for s in socks:
                s.close()

    def test_keepalive_request_head_is_bounded_from_its_first_byte(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"client_header": "1s", "client_keepalive": "30s"})
        with H.Conn(self.d.port) as c:
            self.assertEqual(c.request("GET", "/bytes/5").status, 200)
            # Idle past client_header: the keep-alive bound applies, not the head's.
            time.sleep(1.5)
            start = time.monotonic()
            c.send(b"GET /bytes/5 HTTP/1.1\r\nHost: test\r\n")
            self.assertTrue(c.closed_by_peer(timeout=1.0 + SLACK))
            self.assertTrue(c.buf.startswith(b"HTTP/1.1 408 "), c.buf[:100])
            self.assertGreaterEqual(time.monotonic() - start, 0.9)

    def upload(self, port, total, piece, every, chunked=False):
        """Sends a POST /sha256 body of `total` bytes, `piece` bytes every `every` s."""
        body = H.pattern(total)
        c = H.Conn(port, timeout=30)
        head = [("Transfer-Encoding", "chunked")] if chunked else [("Content-Length",
                                                                    str(total))]
        c.send(H.build_request("POST", "/sha256", head))
        sent = 0
        try:
            while sent < total:
                part = body[sent:sent + piece]
                c.send(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                sent += len(part)
                if sent < total:
                    time.sleep(every)  # the pace is the test's input, not a wait
            if chunked:
                c.send(b"0\r\n\r\n")
        except OSError:
            pass  # answered and closed early: the response says how
        return c, hashlib.sha256(body).hexdigest()

    def test_trickled_body_gets_408_and_a_steady_one_passes(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"client_body": "1s"},
                                   limits={"body_min_rate": "1k"})
        for chunked in (False, True):
            with self.subTest(chunked=chunked):
                # 20 bytes every 100 ms is 200 B/s, under 1 KiB/s: refused.
                start = time.monotonic()
                result = {}

                def slow():
                    c, _ = self.upload(self.d.port, 4000, 20, 0.1, chunked)
                    with c:
                        try:
                            result["r"] = c.read_response(timeout=1.0 + SLACK)
                        except Exception as e:  # noqa: BLE001
                            result["e"] = e
                    result["t"] = time.monotonic() - start

                t = threading.Thread(target=slow)
                t.start()
                t.join(30)
                self.assertFalse(t.is_alive())
                self.assertNotIn("e", result, result.get("e"))
                self.assertEqual(result["r"].status, 408, result["r"].body)
                self.assertLess(result["t"], 1.0 + SLACK)
                # 400 bytes every 100 ms is 4 KB/s: accepted, whole.
                c, digest = self.upload(self.d.port, 12000, 400, 0.1, chunked)
                with c:
                    r = c.read_response(timeout=10)
                self.assertEqual(r.status, 200, r.body)
                self.assertIn(digest.encode(), r.body)
                self.assert_served()

    def test_a_client_waiting_for_100_continue_is_not_timed_out(self):
        # The server takes longer than a body window to say 100 Continue; the
        # client rightly waits: that time is the server's, not the client's.
        def serve(c, head):
            rest = head.split(b"\r\n\r\n", 1)[1]
            time.sleep(2.5)  # the server's pace is the test's input
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            while len(rest) < 1000:
                data = c.recv(65536)
                if not data:
                    return
                rest += data
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%d" %
                      (len(str(len(rest))), len(rest)))

        srv = OneShotServer(serve)
        self.addCleanup(srv.close)
        self.d = self.start_dimmer({"web": {"balance": "roundrobin",
                                            "servers": [("s", srv.port)]}},
                                   timeouts={"client_body": "1s"})
        with H.Conn(self.d.port, timeout=15) as c:
            c.send(H.build_request("POST", "/up", [("Expect", "100-continue"),
                                                   ("Content-Length", "1000")]))
            interim = c.read_response(stop_at_1xx=True, timeout=10)
            self.assertEqual(interim.status, 100)
            c.send(b"x" * 1000)
            r = c.read_response(timeout=10)
            self.assertEqual((r.status, r.body), (200, b"1000"))

    def test_a_response_before_the_whole_body_closes_the_connection(self):
        # The server answers at once, without reading the body: the rest of the
        # body can never be read as a request on the client connection.
        def serve(c, head):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            while c.recv(65536):
                pass

        srv = OneShotServer(serve)
        self.addCleanup(srv.close)
        self.d = self.start_dimmer({"web": {"balance": "roundrobin",
                                            "servers": [("s", srv.port)]}})
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("POST", "/up", [("Content-Length", "100000")]) + b"x" * 100)
            r = c.read_response()
            self.assertEqual((r.status, r.body), (200, b"ok"))
            # What the client sends next is still body: it must not be read as
            # a request. The connection closes after the response.
            try:
                c.send(b"GET /bytes/1 HTTP/1.1\r\nHost: test\r\n\r\n")
            except OSError:
                pass
            self.assertTrue(c.closed_by_peer(timeout=5))
            self.assertEqual(c.buf, b"")

    def test_timeouts_request_bounds_a_steady_upload_too(self):
        # The whole-exchange bound runs beside the body's minimum rate.
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"request": "1s", "client_body": "10s"})
        start = time.monotonic()
        c, _ = self.upload(self.d.port, 40000, 1000, 0.1)  # 10 KB/s for 4 s
        with c:
            r = c.read_response(timeout=10)
        self.assertEqual(r.status, 504, r.body)
        self.assertLess(time.monotonic() - start, 1.0 + SLACK)
        self.assert_served()

    def test_pipelined_requests_wait_for_a_client_that_does_not_read(self):
        # A client that pipelines requests and reads nothing: each request
        # waits for the responses before it to be taken, so what dimmer holds
        # for it is bounded (it used to serve all of them, the responses
        # queued in its memory: 775 MB for 200,000 small ones).
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   timeouts={"client_send": "60s"})
        # 48 MB of responses, far past any socket buffer, each small enough to
        # come whole at once (a large one pauses its server mid-response).
        n, size = 3000, 16384
        with H.Conn(self.d.port, timeout=30) as c:
            c.send(H.build_request("GET", "/bytes/%d" % size) * n)
            seen = [-1, time.monotonic()]

            def settled():
                served = self.d.servers()["b1"]["requests"]
                if served != seen[0]:
                    seen[0], seen[1] = served, time.monotonic()
                return served > 0 and time.monotonic() - seen[1] > 1.0

            H.wait_until(settled, 30, "the served count to stop growing")
            self.assertLess(seen[0], n // 4, "served before the client read")
            # Nothing is lost: reading, the client gets every response, in order.
            for _ in range(n):
                r = c.read_response(timeout=30)
                self.assertEqual((r.status, len(r.body)), (200, size))
        self.assertEqual(self.d.servers()["b1"]["requests"], n)
        self.assert_served()

    def test_http09_request_line_is_answered_400_at_once(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1)})  # client_header 10s
        start = time.monotonic()
        data, closed = H.raw_exchange(self.d.port, b"GET /bytes/10\r\n", timeout=3.0)
        self.assertTrue(closed, "no close within 3 s: %r" % data)
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertTrue(data.startswith(b"HTTP/1.1 400 "), data)
        self.assertEqual(self.b1.requests(), 0)

    def test_folded_trailer_never_reaches_the_server(self):
        rec = Recorder()
        self.addCleanup(rec.close)
        self.d = self.start_dimmer({"web": {"balance": "roundrobin",
                                            "servers": [("rec", rec.port)]}})
        head = H.build_request("POST", "/t", [("Transfer-Encoding", "chunked")])
        # Good trailers are forwarded after they are checked.
        with H.Conn(self.d.port) as c:
            c.send(head + b"3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n")
            self.assertEqual(c.read_response().status, 200)
        H.wait_until(lambda: len(rec.conns) == 1, 5, "the recorder to see the request")
        # The recorder marks its answer after sending it: wait for it to be done.
        self.assertTrue(rec.conns[0][1].wait(5), "the recorder did not finish")
        self.assertTrue(bytes(rec.conns[0][0]).endswith(
            b"3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n<answered>"), bytes(rec.conns[0][0]))
        with rec.lock:
            rec.conns.clear()
        for name, trailer in [("obs-fold", b"X-A: 1\r\n folded\r\n\r\n"),
                              ("bare LF", b"X-A: 1\n\r\n"),
                              ("framing", b"Content-Length: 5\r\n\r\n"),
                              ("space before colon", b"X-A : 1\r\n\r\n")]:
            with self.subTest(name):
                with H.Conn(self.d.port) as c:
                    # The trailer arrives in a later read than the chunk before it.
                    c.send(head + b"3\r\nabc\r\n")
                    H.wait_until(lambda: len(rec.conns) == 1 and
                                 rec.conns[-1][0].endswith(b"abc\r\n"), 5,
                                 "the chunk to reach the recorder")
                    c.send(b"0\r\n" + trailer)
                    r = c.read_response()
                    self.assertEqual(r.status, 400, r.body)
                # The server connection is closed: what it got is all it gets.
                conn = rec.conns[-1]
                self.assertTrue(conn[1].wait(5), "the server connection stayed open")
                got = bytes(conn[0])
                # The body up to the last-chunk line at most (a message cut
                # short), never a byte of the trailer section.
                body = got[got.find(b"\r\n\r\n") + 4:]
                self.assertIn(body, (b"3\r\nabc\r\n", b"3\r\nabc\r\n0\r\n"), got)
                with rec.lock:
                    rec.conns.clear()


if __name__ == "__main__":
    H.main()
