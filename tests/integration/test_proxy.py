"""
The basic proxy path through dimmer to two dimmer-backends: GET and POST with
curl, request bodies by length and chunked, large downloads in the three
framings, keep-alive on both sides, pipelining, bodiless responses,
Expect: 100-continue, WebSocket through Upgrade, the headers the backend
receives, and HTTP/1.0 clients.
"""
import base64
import hashlib
import json
import os
import re
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ProxyTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")
        # No health checks: the backends' connection counters see only proxied traffic.
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2)})
        self.url = "http://%s:%d" % (H.HOST, self.d.port)

    def curl_ok(self, *args, timeout=60):
        r = H.curl(*args, timeout=timeout)
        self.assertEqual(r.returncode, 0, "curl %s: %s" % (" ".join(args), r.stderr.decode()))
        return r

    def random_file(self, name, size):
        data = os.urandom(size)
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path, hashlib.sha256(data).hexdigest()

    # ---- curl ----

    def test_curl_get_reaches_both_backends(self):
        seen = set()
        for i in range(4):
            r = self.curl_ok("-D", "-", self.url + "/headers?i=%d" % i)
            out = r.stdout.decode("latin-1")
            self.assertTrue(out.startswith("HTTP/1.1 200"), out[:200])
            m = re.search(r"^X-Backend: (\S+)\r$", out, re.M | re.I)
            self.assertIsNotNone(m, out)
            seen.add(m.group(1))
            self.assertIn("GET /headers?i=%d HTTP/1.1\r\n" % i, out)
        self.assertEqual(seen, {"b1", "b2"})

    def test_curl_post_body_sha256(self):
        path, digest = self.random_file("body.bin", 3 * 1024 * 1024 + 17)
        r = self.curl_ok("--data-binary", "@" + path, "-H", "Content-Type: application/x-bin",
                         "-H", "Expect:", self.url + "/sha256")
        got = json.loads(r.stdout)
        self.assertEqual(got["bytes"], 3 * 1024 * 1024 + 17)
        self.assertEqual(got["sha256"], digest)

    def test_chunked_body_ending_at_the_read_buffer_edge(self):
        # Regression (a hung upload of the soak, 1 in 32768 chunked uploads):
        # the last-chunk line "0\r\n" ending exactly at the end of dimmer's
        # 32 KiB read buffer left the full buffer in place, the next read had
        # no room and reading stopped for good; the server never saw the
        # final CRLF and the exchange hung with no timeout running. Each
        # shift is a fresh connection whose request is sent in one write.
        head = b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        for shift in (-2, -1, 0, 1, 2, 32768):
            with self.subTest(shift=shift):
                n = 32768 + shift - len(head) - 3 - 4 - 4  # "%x\r\n" (4 hex digits), "\r\n", "0\r\n"
                body = bytes((i * 7) & 255 for i in range(n))
                req = head + b"%x\r\n" % n + body + b"\r\n0\r\n"
                self.assertEqual(len(req), 32768 + shift)
                with H.Conn(self.d.port) as c:
                    c.send(req + b"\r\n")
                    r = c.read_response(timeout=5)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.body, body)

    def test_curl_chunked_upload_sha256(self):
        path, digest = self.random_file("body.bin", 2 * 1024 * 1024 + 5)
        r = self.curl_ok("-H", "Transfer-Encoding: chunked", "--data-binary", "@" + path,
                         self.url + "/sha256")
        got = json.loads(r.stdout)
        self.assertEqual(got["bytes"], 2 * 1024 * 1024 + 5)
        self.assertEqual(got["sha256"], digest)

    def test_raw_chunked_upload_with_extensions_and_trailer(self):
        chunks = [b"hello ", b"x" * 70000, b"", b"world"]
        body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks if c)
        body += b"0\r\nX-Trailer: t\r\n\r\n"
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("POST", "/sha256", [("Transfer-Encoding", "chunked")]) + body)
            r = c.read_response()
            self.assertEqual(r.status, 200, r.body)
            got = json.loads(r.body)
            whole = b"".join(chunks)
            self.assertEqual(got["bytes"], len(whole))
            self.assertEqual(got["sha256"], hashlib.sha256(whole).hexdigest())
            # The connection stays usable: the body was framed correctly.
            self.assertEqual(c.request("GET", "/bytes/10").body, H.pattern(10))

    def test_large_download_content_length(self):
        n = 64 * 1024 * 1024 + 3
        out = self.path("big.bin")
        r = self.curl_ok("-o", out, "-w", "%{http_code} %{size_download}",
                         self.url + "/bytes/%d" % n, timeout=120)
        self.assertEqual(r.stdout.decode(), "200 %d" % n)
        self.assertEqual(H.file_sha256(out), H.pattern_sha256(n))

    def test_large_download_chunked(self):
        n = 24 * 1024 * 1024 + 1
        with H.Conn(self.d.port, timeout=30) as c:
            r = c.request("GET", "/chunked/%d" % n, digest=True, timeout=60)
            self.assertEqual(r.status, 200)
            self.assertTrue(r.chunked, r.headers)
            self.assertIsNone(r.header("Content-Length"))
            self.assertEqual(r.body_len, n)
            self.assertEqual(r.body_sha256, H.pattern_sha256(n))
            # Keep-alive survives a chunked response.
            self.assertEqual(c.request("GET", "/bytes/7").body, H.pattern(7))
        # And through curl, which decodes the chunks.
        out = self.path("chunked.bin")
        self.curl_ok("-o", out, self.url + "/chunked/%d" % n, timeout=120)
        self.assertEqual(H.file_sha256(out), H.pattern_sha256(n))

    def test_large_download_close_delimited(self):
        n = 24 * 1024 * 1024 + 9
        with H.Conn(self.d.port, timeout=30) as c:
            r = c.request("GET", "/close/%d" % n, digest=True, timeout=60)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body_len, n)
            self.assertEqual(r.body_sha256, H.pattern_sha256(n))
            self.assertTrue(c.eof, "a close-delimited body must end with the connection")
            self.assertEqual((r.header("Connection") or "").lower(), "close")

    # ---- connections ----

    def test_keepalive_reuses_client_and_server_connections(self):
        before = self.b1.stats()["connections"] + self.b2.stats()["connections"]
        with H.Conn(self.d.port) as c:
            for i in range(50):
                r = c.request("GET", "/bytes/%d" % (100 + i))
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, H.pattern(100 + i))
                self.assertIsNone(r.header("Connection"), "request %d: %r" % (i, r.headers))
                self.assertFalse(c.eof)
        after = self.b1.stats()["connections"] + self.b2.stats()["connections"]
        # Each stats() call opens one connection of its own: two after the first two.
        opened = after - before - 2
        self.assertGreaterEqual(opened, 1)
        self.assertLessEqual(opened, 4, "50 sequential requests opened %d server connections"
                             % opened)
        served = self.b1.requests() + self.b2.requests()
        self.assertEqual(served, 50)

    def test_pipelined_requests_answered_in_order(self):
        reqs = [
            H.build_request("GET", "/bytes/11"),
            H.build_request("POST", "/echo", body=b"second body"),
            H.build_request("GET", "/status/204"),
            H.build_request("HEAD", "/bytes/999"),
            H.build_request("GET", "/headers", [("X-Seq", "5")]),
            H.build_request("GET", "/chunked/33"),
        ]
        with H.Conn(self.d.port) as c:
            c.send(b"".join(reqs))
            r = [c.read_response(head_request=(i == 3)) for i in range(len(reqs))]
        self.assertEqual([x.status for x in r], [200, 200, 204, 200, 200, 200])
        self.assertEqual(r[0].body, H.pattern(11))
        self.assertEqual(r[1].body, b"second body")
        self.assertEqual(r[2].body, b"")
        self.assertEqual(r[3].header("Content-Length"), "999")
        self.assertEqual(r[3].body, b"")
        self.assertIn(b"X-Seq: 5\r\n", r[4].body)
        self.assertEqual(r[5].body, H.pattern(33))

    def test_head_has_no_body_and_keeps_length(self):
        with H.Conn(self.d.port) as c:
            r = c.request("HEAD", "/bytes/123456")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("Content-Length"), "123456")
            # A body leaking after the HEAD head would be read as the next status line.
            r2 = c.request("GET", "/bytes/5")
            self.assertEqual(r2.status, 200)
            self.assertEqual(r2.body, H.pattern(5))
            self.assertEqual(c.buf, b"")

    def test_204_and_304_have_no_body(self):
        with H.Conn(self.d.port) as c:
            for code in (204, 304, 204):
                r = c.request("GET", "/status/%d" % code)
                self.assertEqual(r.status, code)
                self.assertIsNone(r.header("Content-Length"))
                self.assertIsNone(r.header("Transfer-Encoding"))
            r = c.request("GET", "/bytes/4")
            self.assertEqual(r.body, H.pattern(4))
            # A marker on the same connection: stray body bytes of the 204/304
            # would come before its status line, and a close would fail it.
            r = c.request("GET", "/bytes/3")
            self.assertEqual(r.body, H.pattern(3))
            self.assertEqual(c.buf, b"")

    def test_expect_100_continue(self):
        body = os.urandom(100000)
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("POST", "/sha256", [("Expect", "100-continue"),
                                                       ("Content-Length", str(len(body)))]))
            interim = c.read_response(stop_at_1xx=True)
            self.assertEqual(interim.status, 100, "expected 100 Continue before the body")
            c.send(body)
            r = c.read_response()
            self.assertEqual(r.status, 200)
            got = json.loads(r.body)
            self.assertEqual(got["sha256"], hashlib.sha256(body).hexdigest())
            # The same connection carries on.
            self.assertEqual(c.request("GET", "/bytes/3").body, H.pattern(3))

    def test_curl_expect_100_continue(self):
        path, digest = self.random_file("body.bin", 200000)
        r = self.curl_ok("-v", "-H", "Expect: 100-continue", "--data-binary", "@" + path,
                         self.url + "/sha256")
        self.assertIn("HTTP/1.1 100 Continue", r.stderr.decode())
        self.assertEqual(json.loads(r.stdout)["sha256"], digest)

    def test_interim_1xx_response_forwarded(self):
        # The backend's /status/103 sends 103 Early Hints, then a final 200.
        with H.Conn(self.d.port) as c:
            r = c.request("GET", "/status/103")
            self.assertEqual([x.status for x in r.interim], [103])
            self.assertEqual(r.status, 200)
            self.assertEqual(c.request("GET", "/bytes/6").body, H.pattern(6))

    # ---- load and aborted transfers ----

    def test_large_echo_with_backpressure(self):
        # A 24 MiB upload echoed back while it is still being sent: both directions
        # stream through the proxy's bounded buffers at once.
        n = 24 * 1024 * 1024
        body = H.pattern(n)
        errors = []
        with H.Conn(self.d.port, timeout=30) as c:
            c.send(H.build_request("PUT", "/echo", [("Content-Length", str(n))]))

            def sender():
                try:
                    view = memoryview(body)
                    for off in range(0, n, 1 << 20):
                        c.sock.sendall(view[off:off + (1 << 20)])
                except OSError as e:
                    errors.append(e)

            t = threading.Thread(target=sender, daemon=True)
            t.start()
            r = c.read_response(digest=True, timeout=60)
            t.join(30)
            self.assertFalse(t.is_alive(), "the upload never finished")
            self.assertEqual(errors, [])
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body_len, n)
            self.assertEqual(r.body_sha256, H.pattern_sha256(n))

    def test_concurrent_clients(self):
        results = []
        lock = threading.Lock()

        def client(k):
            ok = 0
            try:
                with H.Conn(self.d.port, timeout=20) as c:
                    for i in range(20):
                        n = 1000 + 97 * k + i
                        r = c.request("GET", "/bytes/%d" % n)
                        if r.status == 200 and r.body == H.pattern(n):
                            ok += 1
            except Exception as e:  # reported through the count
                with lock:
                    results.append(("error", k, repr(e)))
            with lock:
                results.append(("ok", k, ok))

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(sorted(r for r in results if r[0] == "error"), [])
        self.assertEqual(sum(r[2] for r in results if r[0] == "ok"), 40 * 20)
        self.assertEqual(self.b1.requests() + self.b2.requests(), 800)

    def test_client_aborts_download(self):
        for _ in range(3):
            with H.Conn(self.d.port) as c:
                c.send(H.build_request("GET", "/bytes/%d" % (64 * 1024 * 1024)))
                got = 0
                deadline = time.monotonic() + 10
                while got < 1 << 20 and c._fill(deadline):
                    got += len(c.buf)
                    c.buf = b""
        # The proxy goes on serving, and no half-read server connection is reused.
        with H.Conn(self.d.port) as c:
            for n in (10, 100000, 20):
                r = c.request("GET", "/bytes/%d" % n)
                self.assertEqual(r.body, H.pattern(n))
        H.wait_until(lambda: all(s["inflight"] == 0 for s in self.d.servers().values()), 5,
                     "inflight back to 0")
        self.assertTrue(self.d.proc.alive())

    def test_client_aborts_while_waiting(self):
        for _ in range(3):
            c = H.Conn(self.d.port)
            c.send(H.build_request("GET", "/slow/300"))
            H.wait_until(lambda: sum(s["inflight"] for s in self.d.servers().values()) == 1, 5,
                         "the slow request in flight")
            c.close()
            H.wait_until(lambda: all(s["inflight"] == 0 for s in self.d.servers().values()), 5,
                         "inflight back to 0 after the client left")
        # Half-sent bodies too.
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("POST", "/sha256", [("Content-Length", "100000")]) + b"x" * 5)
        for _ in range(4):
            self.assertEqual(H.get(self.d.port, "/bytes/9").body, H.pattern(9))
        self.assertTrue(self.d.proc.alive())

    # ---- WebSocket ----

    @staticmethod
    def ws_frame(opcode, payload, fin=True):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([(0x80 if fin else 0) | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n <= 0xffff:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        return head + mask + masked

    @staticmethod
    def ws_read(c, timeout=10):
        """(fin, opcode, payload) of one server frame, which must be unmasked."""
        deadline = time.monotonic() + timeout

        def need(n):
            while len(c.buf) < n:
                if not c._fill(deadline):
                    raise H.Closed("closed inside a WebSocket frame")

        need(2)
        b0, b1 = c.buf[0], c.buf[1]
        if b1 & 0x80:
            raise AssertionError("server frame is masked")
        n, hl = b1 & 0x7f, 2
        if n == 126:
            need(4)
            n, hl = struct.unpack("!H", c.buf[2:4])[0], 4
        elif n == 127:
            need(10)
            n, hl = struct.unpack("!Q", c.buf[2:10])[0], 10
        need(hl + n)
        payload = c.buf[hl:hl + n]
        c.buf = c.buf[hl + n:]
        return bool(b0 & 0x80), b0 & 0x0f, payload

    def test_websocket_echo_through_upgrade(self):
        key = base64.b64encode(os.urandom(16)).decode()
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("GET", "/ws", [
                ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13")]))
            r = c.read_response()
            self.assertEqual(r.status, 101)
            self.assertEqual((r.header("Upgrade") or "").lower(), "websocket")
            self.assertIn("upgrade", (r.header("Connection") or "").lower())
            self.assertEqual(r.header("Sec-WebSocket-Accept"), accept)

            c.send(self.ws_frame(1, b"hello through dimmer"))
            self.assertEqual(self.ws_read(c), (True, 1, b"hello through dimmer"))

            big = os.urandom(70000)  # 64-bit length form
            mid = os.urandom(300)  # 16-bit length form
            c.send(self.ws_frame(2, big) + self.ws_frame(2, mid))
            self.assertEqual(self.ws_read(c), (True, 2, big))
            self.assertEqual(self.ws_read(c), (True, 2, mid))

            c.send(self.ws_frame(9, b"ping!"))
            self.assertEqual(self.ws_read(c), (True, 10, b"ping!"))

            c.send(self.ws_frame(8, struct.pack("!H", 1000) + b"bye"))
            fin, op, payload = self.ws_read(c)
            self.assertEqual(op, 8)
            self.assertEqual(payload[:2], struct.pack("!H", 1000))
            self.assertTrue(c.closed_by_peer(5), "the tunnel must close after the close frame")

    def test_idle_tunnel_closes_after_timeouts_tunnel(self):
        # A tunnel that carries bytes stays open past the timeout; one that
        # carries none for timeouts.tunnel is closed, both sides (as
        # HAProxy's timeout tunnel, nginx's proxy_read_timeout).
        d = self.start_dimmer({"web": self.pool(self.b1)}, timeouts={"tunnel": "2s"})
        with H.Conn(d.port) as c:
            c.send(H.ws_upgrade())
            self.assertEqual(c.read_response().status, 101)
            self.assertEqual(self.b1.stats()["open"] - 1, 1)  # the tunnel (and /stats)
            start = time.monotonic()
            n = 0
            while time.monotonic() - start < 4:  # twice the timeout, a message every 0.1 s
                c.send(self.ws_frame(1, b"m%d" % n))
                self.assertEqual(self.ws_read(c), (True, 1, b"m%d" % n))
                n += 1
                time.sleep(0.1)
            self.assertTrue(c.closed_by_peer(30), "the idle tunnel must be closed")
        H.wait_until(lambda: "no byte either way for timeouts.tunnel" in d.proc.stderr(), 10,
                     "the close logged")
        H.wait_until(lambda: self.b1.stats()["open"] - 1 == 0, 10, "the server side closed")

    # ---- headers ----

    def backend_head(self, conn, headers):
        r = conn.request("GET", "/headers", headers)
        self.assertEqual(r.status, 200)
        head = r.body.decode("latin-1")
        lines = head.split("\r\n")
        fields = []
        for ln in lines[1:]:
            if ln:
                n, _, v = ln.partition(":")
                fields.append((n.lower(), v.strip()))
        return r, lines[0], fields

    def test_backend_receives_forwarding_headers_without_hop_by_hop(self):
        with H.Conn(self.d.port) as c:
            r, line, fields = self.backend_head(c, [
                ("Connection", "close, X-Secret"),
                ("X-Secret", "must not pass"),
                ("Keep-Alive", "timeout=5"),
                ("TE", "trailers"),
                ("Trailer", "X-Checksum"),
                ("Proxy-Connection", "keep-alive"),
                ("Upgrade", "h2c"),
                ("X-Forwarded-For", "203.0.113.7"),
                ("X-Forwarded-Proto", "https"),
                ("Via", "1.0 edge"),
                ("X-Kept", "yes"),
            ])
            names = [n for n, _ in fields]
            self.assertEqual(line, "GET /headers HTTP/1.1")
            for hop in ("connection", "keep-alive", "te", "proxy-connection", "upgrade",
                        "x-secret"):
                self.assertNotIn(hop, names, "hop-by-hop %r reached the backend: %r" %
                                 (hop, fields))
            self.assertEqual([v for n, v in fields if n == "x-forwarded-for"],
                             ["203.0.113.7, 127.0.0.1"])
            self.assertEqual([v for n, v in fields if n == "x-forwarded-proto"], ["http"])
            self.assertEqual([v for n, v in fields if n == "via"], ["1.0 edge, 1.1 dimmer"])
            self.assertEqual([v for n, v in fields if n == "x-kept"], ["yes"])
            # Trailer is end-to-end (RFC 9110, 6.6.2), not hop-by-hop.
            self.assertEqual([v for n, v in fields if n == "trailer"], ["X-Checksum"])
            self.assertEqual([v for n, v in fields if n == "host"], ["test"])
            # Connection: close from the client: answered, then closed.
            self.assertEqual((r.header("Connection") or "").lower(), "close")
            self.assertTrue(c.closed_by_peer(3))

    def test_a_method_llhttp_does_not_know_is_forwarded(self):
        # A server of our own that records what reaches it (dimmer-backend
        # parses with llhttp, which knows a fixed list of methods).
        srv = socket.create_server((H.HOST, 0))
        self.addCleanup(srv.close)
        srv.settimeout(10)
        got = []

        def serve():
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(10)
                data = b""
                # Each request is a head and a 2-byte body; one answer each.
                for answer in (b"one", b"two"):
                    while len(data) < sum(len(x) for x in got) + 2 or b"\r\n\r\n" not in \
                            data[sum(len(x) for x in got):]:
                        more = conn.recv(65536)
                        if not more:
                            return
                        data += more
                    start = sum(len(x) for x in got)
                    end = data.index(b"\r\n\r\n", start) + 4
                    while len(data) < end + 2:
                        more = conn.recv(65536)
                        if not more:
                            return
                        data += more
                    got.append(data[start:end + 2])
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n" + answer)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        port = srv.getsockname()[1]
        self.d2 = self.start_dimmer({"raw": {"servers": [("r", port)]}})
        with H.Conn(self.d2.port) as c:
            # Pipelined: QUERY with a body, then a site's own method.
            c.send(b"QUERY /search HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nq="
                   b"PURGE-ALL_X /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok")
            self.assertEqual(c.read_response().body, b"one")
            self.assertEqual(c.read_response().body, b"two")
        t.join(10)
        self.assertEqual(len(got), 2)
        self.assertRegex(got[0], rb"^QUERY /search HTTP/1\.1\r\n(.*\r\n)*\r\nq=$")
        self.assertRegex(got[1], rb"^PURGE-ALL_X /x HTTP/1\.1\r\n(.*\r\n)*\r\nok$")
        # Lower case is no method (nginx's rule): 400, and nothing forwarded.
        with H.Conn(self.d2.port) as c:
            c.send(b"query /search HTTP/1.1\r\nHost: t\r\n\r\n")
            self.assertEqual(c.read_response().status, 400)
        # The demo backend does not implement it, and says so (RFC 9110: 501).
        r = H.request(self.d.port, "QUERY", "/bytes/5")
        self.assertEqual((r.status, r.body), (501, b"method not implemented\n"))
        self.assertIsNotNone(r.header("X-Backend"))

    def test_backend_receives_added_headers(self):
        with H.Conn(self.d.port) as c:
            _, _, fields = self.backend_head(c, [])
            self.assertEqual([v for n, v in fields if n == "x-forwarded-for"], ["127.0.0.1"])
            self.assertEqual([v for n, v in fields if n == "x-forwarded-proto"], ["http"])
            self.assertEqual([v for n, v in fields if n == "via"], ["1.1 dimmer"])
            # Several X-Forwarded-For fields are one list: the address goes on the last.
            _, _, fields = self.backend_head(c, [("X-Forwarded-For", "10.0.0.1"),
                                                 ("X-Forwarded-For", "10.0.0.2")])
            self.assertEqual([v for n, v in fields if n == "x-forwarded-for"],
                             ["10.0.0.1", "10.0.0.2, 127.0.0.1"])

    def test_response_hop_by_hop_removed(self):
        # The backend's /close/N answers "Connection: close": the client sees the
        # proxy's own Connection field only once.
        r = H.get(self.d.port, "/close/10")
        self.assertEqual(r.header_all("Connection"), ["close"])
        self.assertEqual(r.body, H.pattern(10))

    # ---- HTTP/1.0 ----

    def test_http10_client(self):
        with H.Conn(self.d.port) as c:
            c.send(b"GET /bytes/1000 HTTP/1.0\r\n\r\n")
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, H.pattern(1000))
            self.assertTrue(c.closed_by_peer(3), "HTTP/1.0 without keep-alive must be closed")

    def test_http10_keepalive(self):
        with H.Conn(self.d.port) as c:
            for n in (10, 20):
                c.send(b"GET /bytes/%d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" % n)
                r = c.read_response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, H.pattern(n))
                self.assertEqual((r.header("Connection") or "").lower(), "keep-alive")

    def test_http10_client_gets_chunked_response_dechunked(self):
        n = 300000
        with H.Conn(self.d.port) as c:
            c.send(b"GET /chunked/%d HTTP/1.0\r\nHost: x\r\n\r\n" % n)
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertIsNone(r.header("Transfer-Encoding"), r.headers)
            self.assertEqual(r.body, H.pattern(n))
            self.assertTrue(c.eof, "the end of the body must be the end of the connection")

    def test_http10_post_with_length(self):
        body = b"an HTTP/1.0 body"
        with H.Conn(self.d.port) as c:
            c.send(b"POST /echo HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body)


if __name__ == "__main__":
    H.main()
