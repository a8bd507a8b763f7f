"""
Commands from the control thread to every worker (proxy/worker.h), through
the admin listener's POST /hosts/ADDR/close-idle|drain|ready, with two real
worker threads under load: each command reaches every worker and is
acknowledged, idle connections close, and a drained host gets no request
once every worker has acknowledged the drain, while no client request fails.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

NO_PASSIVE = {"max_fails": 0}
CLIENTS = 8  # keep-alive clients of the load; with 2 workers both get some


def post(port, path):
    r = H.request(port, "POST", path, timeout=10.0)
    return r.status, (H.json.loads(r.body) if r.status in (200, 504) else r.body)


class Load:
    """CLIENTS threads sending GETs over keep-alive connections until stopped;
    every 20th request on a fresh connection. Records every status."""

    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.statuses = []
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def run(self, i):
        conn = None
        n = 0
        try:
            while not self.stop.is_set() and n < 100000:
                if conn is None or n % 20 == 0:
                    if conn is not None:
                        conn.close()
                    conn = H.Conn(self.port)
                r = conn.request("GET", "/bytes/%d" % (100 + i))
                with self.lock:
                    self.statuses.append((r.status, r.header("X-Backend")))
                n += 1
        except Exception as e:  # noqa: BLE001: reported by the test
            with self.lock:
                self.errors.append(repr(e))
        finally:
            if conn is not None:
                conn.close()

    def count(self):
        with self.lock:
            return len(self.statuses)

    def wait_for(self, n, what):
        start = self.count()
        H.wait_until(lambda: self.count() >= start + n, 10, what)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)


class CommandTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")

    def host(self, backend):
        key = "%s:%d" % (H.HOST, backend.port)
        return next(h for h in self.d.admin_stats()["hosts"] if h["host"] == key)

    def command(self, backend, what):
        status, body = post(self.d.admin, "/hosts/%s:%d/%s" % (H.HOST, backend.port, what))
        self.assertEqual(status, 200, body)
        self.assertEqual((body["command"], body["workers"], body["acked"]), (what, 2, 2))
        return body

    def test_close_idle_reaches_every_worker(self):
        pools = {"web": self.pool(self.b1, self.b2, passive=NO_PASSIVE)}
        self.d = self.start_dimmer(pools, workers=2)
        # Many client connections, so that both workers pool connections to both servers.
        conns = [H.Conn(self.d.port) for _ in range(16)]
        for c in conns:
            for _ in range(2):
                self.assertEqual(c.request("GET", "/bytes/10").status, 200)
        H.wait_until(lambda: self.host(self.b1)["inflight"] == 0, 5, "quiet")
        self.assertGreaterEqual(self.host(self.b1)["server_connections"], 2)
        b2_before = self.host(self.b2)["server_connections"]
        body = self.command(self.b1, "close-idle")
        # Acknowledged only once every worker's idle connections to b1 are closed.
        self.assertEqual(body["after"]["server_connections"], 0)
        self.assertEqual(body["after"]["power"], "awake")
        # The backend sees them closed; b2's pooled connections are untouched.
        H.wait_until(lambda: self.b1.stats()["open"] == 1, 5, "b1 sees no connection but ours")
        self.assertEqual(self.host(self.b2)["server_connections"], b2_before)
        # b1 still serves: the next requests open new connections to it.
        got = {c.request("GET", "/bytes/10").header("X-Backend") for c in conns}
        self.assertIn("b1", got)
        for c in conns:
            c.close()
        # A command for a host nobody configured, and a wrong method.
        self.assertEqual(post(self.d.admin, "/hosts/127.0.0.1:1/close-idle")[0], 404)
        self.assertEqual(post(self.d.admin, "/hosts/%s:%d/reboot" % (H.HOST, self.b1.port))[0],
                         404)
        self.assertEqual(H.get(self.d.admin, "/hosts/%s:%d/drain" % (H.HOST, self.b1.port)).status,
                         405)
        # HEAD is GET without the body, as monitoring probes send it.
        for path in ("/stats", "/metrics", "/"):
            r = H.request(self.d.admin, "HEAD", path)
            self.assertEqual(r.status, 200, path)
            self.assertGreater(int(r.header("Content-Length")), 0)
            self.assertEqual(r.body, b"")

    def drain_under_load(self, pool):
        self.d = self.start_dimmer({"web": pool}, workers=2)
        load = Load(self.d.port)
        try:
            load.wait_for(200, "load on both servers")
            body = self.command(self.b1, "drain")
            self.assertEqual(body["after"]["power"], "draining")
            # Every worker has acknowledged: whatever b1 has started is all it gets.
            started = body["after"]["started"]
            load.wait_for(300, "load after the drain")
            H.wait_until(lambda: self.host(self.b1)["inflight"] == 0 and
                         self.host(self.b1)["server_connections"] == 0, 10, "b1 drained")
            load.wait_for(300, "load on the drained pool")
            h = self.host(self.b1)
            self.assertEqual(h["started"], started)
            self.assertEqual(h["power"], "draining")
            # Every open client has sent a request since: none is bound to b1.
            self.assertEqual(h["bound_clients"], 0)
            after_drain = load.count()
        finally:
            load.finish()
        self.assertEqual(load.errors, [])
        self.assertTrue(all(s == 200 for s, _ in load.statuses), load.statuses[:20])
        # The backend saw exactly the requests the proxy started on it, and closed
        # connections: nothing was started on b1 behind the counter's back.
        self.assertEqual(self.b1.requests(), started)
        H.wait_until(lambda: self.b1.stats()["open"] == 1, 5, "b1 sees no connection but ours")
        late = [b for _, b in load.statuses[after_drain:]]
        self.assertNotIn("b1", late)
        self.assertIn("b2", late)
        # Ready again: b1 takes requests.
        self.assertEqual(self.command(self.b1, "ready")["after"]["power"], "awake")
        got = {H.get(self.d.port, "/bytes/10").header("X-Backend") for _ in range(6)}
        self.assertIn("b1", got)

    def test_drain_under_load_roundrobin(self):
        self.drain_under_load(self.pool(self.b1, self.b2, passive=NO_PASSIVE))

    def test_drain_under_load_with_affinity(self):
        # Clients bound to b1 go to b2 and bind to it; the counts follow them.
        pool = self.pool(self.b1, self.b2, balance="leastconn", passive=NO_PASSIVE)
        pool["affinity"] = "connection"
        self.drain_under_load(pool)

    def test_drain_survives_reload(self):
        pools = {"web": self.pool(self.b1, self.b2, passive=NO_PASSIVE)}
        self.d = self.start_dimmer(pools, workers=2)
        self.command(self.b1, "drain")
        gen = self.d.admin_stats()["generation"]
        self.d.proc.signal(H.signal.SIGHUP)
        H.wait_until(lambda: self.d.admin_stats()["generation"] == gen + 1, 5, "reload")
        self.assertEqual(self.host(self.b1)["power"], "draining")
        got = {H.get(self.d.port, "/bytes/10").header("X-Backend") for _ in range(6)}
        self.assertEqual(got, {"b2"})
        self.assertEqual(self.b1.requests(), 0)


if __name__ == "__main__":
    H.main()
