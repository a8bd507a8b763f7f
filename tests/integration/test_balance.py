"""
Balancing through a running dimmer: round robin splits evenly (and by
weight), leastconn avoids a server busy with a slow request, and the admin
listener's GET /stats reports the servers with their counters.
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402


class BalanceTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")

    def count_backends(self, n, path="/bytes/10", fresh=False):
        """Sends n GETs (on one connection, or one connection each); counts X-Backend."""
        seen = collections.Counter()
        conn = None if fresh else H.Conn(self.d.port)
        try:
            for _ in range(n):
                r = H.get(self.d.port, path) if fresh else conn.request("GET", path)
                self.assertEqual(r.status, 200, r.body)
                seen[r.header("X-Backend")] += 1
        finally:
            if conn is not None:
                conn.close()
        return seen

    def test_roundrobin_splits_evenly(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2)})
        self.assertEqual(self.count_backends(100), {"b1": 50, "b2": 50})
        # One connection per request: the split does not depend on the client connection.
        self.assertEqual(self.count_backends(20, fresh=True), {"b1": 10, "b2": 10})
        self.assertEqual(self.b1.requests(), 60)
        self.assertEqual(self.b2.requests(), 60)

    def test_roundrobin_alternates(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2)})
        with H.Conn(self.d.port) as c:
            order = [c.request("GET", "/bytes/1").header("X-Backend") for _ in range(10)]
        for a, b in zip(order, order[1:]):
            self.assertNotEqual(a, b, "round robin repeated a server: %r" % order)

    def test_weighted_roundrobin(self):
        pool = {"balance": "roundrobin",
                "servers": [("b1", self.b1.port, {"weight": 3}), ("b2", self.b2.port)]}
        self.d = self.start_dimmer({"web": pool})
        self.assertEqual(self.count_backends(100), {"b1": 75, "b2": 25})

    def test_leastconn_avoids_busy_server(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2, balance="leastconn")})
        with H.Conn(self.d.port, timeout=15) as slow:
            slow.send(H.build_request("GET", "/slow/2500"))

            def busy_server():
                for name, s in self.d.servers().items():
                    if s["inflight"] == 1:
                        return name
                return None

            busy = H.wait_until(busy_server, 5, "the slow request to be in flight")
            idle = {"b1", "b2"} - {busy}
            # While the slow one is in flight, every new request goes to the other server,
            # sequentially and also several at once.
            seen = self.count_backends(10)
            self.assertEqual(set(seen), idle, "leastconn sent to the busy server: %r" % seen)
            seen = self.count_backends(6, fresh=True)
            self.assertEqual(set(seen), idle)
            r = slow.read_response(timeout=10)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("X-Backend"), busy)
        # Once nothing is in flight, both servers get traffic again.
        seen = self.count_backends(10)
        self.assertEqual(set(seen), {"b1", "b2"})

    def test_leastconn_two_slow_requests_spread(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2, balance="leastconn")})
        conns = [H.Conn(self.d.port, timeout=15) for _ in range(2)]
        try:
            conns[0].send(H.build_request("GET", "/slow/800"))
            H.wait_until(lambda: sum(s["inflight"] for s in self.d.servers().values()) == 1, 5,
                         "the first slow request to be in flight")
            conns[1].send(H.build_request("GET", "/slow/800"))
            got = {c.read_response().header("X-Backend") for c in conns}
            self.assertEqual(got, {"b1", "b2"}, "two slow requests on one server")
        finally:
            for c in conns:
                c.close()

    def test_routes_choose_the_pool(self):
        b3 = self.start_backend("b3")
        pools = {"web": self.pool(self.b1), "api": self.pool(self.b2), "static": self.pool(b3)}
        routes = [{"host": '"*.static.test"', "pool": "static"},
                  {"path": "/api/", "pool": "api"}]
        self.d = self.start_dimmer(pools, routes=routes, default_pool="web")

        def backend(path, host):
            # Unknown paths get the backend's 404, which still names the backend.
            r = H.request(self.d.port, "GET", path, headers=[("Host", host)])
            self.assertIn(r.status, (200, 404), (path, host, r.body))
            return r.header("X-Backend")

        self.assertEqual(backend("/headers", "www.test"), "b1")
        self.assertEqual(backend("/api/x", "www.test"), "b2")
        self.assertEqual(backend("/apix", "www.test"), "b1")  # a prefix ending in "/"
        self.assertEqual(backend("/headers", "img.static.test"), "b3")
        self.assertEqual(backend("/headers", "IMG.Static.Test:8080"), "b3")
        self.assertEqual(backend("/api/x", "a.static.test"), "b3")  # the first match wins
        self.assertEqual(backend("/headers", "static.test"), "b1")  # not a subdomain
        # Absolute-form targets are routed by their path.
        r = H.request(self.d.port, "GET", "http://www.test/api/x", headers=[("Host", "www.test")])
        self.assertEqual(r.header("X-Backend"), "b2")
        self.assertEqual(self.b1.requests(), 3)
        self.assertEqual(self.b2.requests(), 2)
        self.assertEqual(b3.requests(), 3)

    def test_admin_stats_lists_servers_with_counters(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, self.b2)})
        seen = self.count_backends(30)
        st = self.d.admin_stats()
        self.assertEqual(len(st["pools"]), 1)
        pool = st["pools"][0]
        self.assertEqual(pool["name"], "web")
        self.assertEqual(pool["balance"], "roundrobin")
        servers = {s["name"]: s for s in pool["servers"]}
        self.assertEqual(set(servers), {"b1", "b2"})
        for b in (self.b1, self.b2):
            s = servers[b.name]
            self.assertEqual(s["address"], "%s:%d" % (H.HOST, b.port))
            self.assertEqual(s["state"], "up")
            self.assertEqual(s["picks"], seen[b.name])
            self.assertEqual(s["requests"], seen[b.name])
            self.assertEqual(s["inflight"], 0)
            self.assertEqual(s["failures"], 0)
        # Anything but /stats and / is a 404, and the admin port is not proxied.
        r = H.get(self.d.admin, "/bytes/10")
        self.assertEqual(r.status, 404)
        self.assertEqual(self.b1.requests() + self.b2.requests(), 30)

    def test_a_whole_response_is_counted_before_the_client_has_it(self):
        # Regression: the last bytes of a response reached the client (often at
        # once) before the request was counted and left `inflight`, so a
        # client asking /stats right after its response sometimes saw it
        # missing. The promise is in balancers/servers.h.
        self.d = self.start_dimmer({"web": self.pool(self.b1)})
        with H.Conn(self.d.port) as c:
            for i in range(1, 301):
                self.assertEqual(c.request("GET", "/bytes/10").status, 200)
                s = self.d.servers()["b1"]
                self.assertEqual((s["requests"], s["inflight"], s["connections"]), (i, 0, 0),
                                 "after response %d" % i)

    def test_admin_stats_counts_inflight(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1)})
        with H.Conn(self.d.port, timeout=15) as slow:
            slow.send(H.build_request("GET", "/slow/1000"))
            H.wait_until(lambda: self.d.servers()["b1"]["inflight"] == 1, 5,
                         "inflight to show the slow request")
            self.assertEqual(self.d.servers()["b1"]["requests"], 0)
            self.assertEqual(slow.read_response().status, 200)
        s = H.wait_until(lambda: (lambda s: s if s["inflight"] == 0 else None)(
            self.d.servers()["b1"]), 5, "inflight to drop to 0")
        self.assertEqual(s["requests"], 1)
        self.assertEqual(s["picks"], 1)


if __name__ == "__main__":
    H.main()
