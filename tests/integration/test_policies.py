"""
The balancing policies through a running dimmer in front of three
dimmer-backends: every policy serves and spreads requests; hash keeps a key
on its server, with the key taken from the URI, a header or a cookie (and
the client address when the header is missing); affinity: connection keeps a
connection on one server.
"""
import collections
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402


class PolicyTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.backends = [self.start_backend("b%d" % i) for i in range(3)]

    def start_pool(self, pool_yaml):
        servers = "".join('      - {name: %s, address: "127.0.0.1:%d", capacity: %d}\n'
                          % (b.name, b.port, 10 * (i + 1)) for i, b in enumerate(self.backends))
        conf = ("workers: 1\nlisten: [\"127.0.0.1:0\"]\npools:\n  web:\n%s    servers:\n%s"
                % (pool_yaml, servers))
        d = self.start_dimmer_conf(self.write_config(conf))
        self.port = d.port
        self.dimmer = d.proc

    def stop_dimmer(self):
        """Stops this test's dimmer (the backends go on), for the next config."""
        self.dimmer.kill()
        self.assertNotIn("ERROR: AddressSanitizer", self.dimmer.stderr())
        self.assertNotIn("runtime error:", self.dimmer.stderr())

    def spread(self, n, path="/bytes/10", headers=(), fresh=True):
        seen = collections.Counter()
        conn = None if fresh else H.Conn(self.port)
        try:
            for i in range(n):
                p = path(i) if callable(path) else path
                h = headers(i) if callable(headers) else headers
                r = (H.get(self.port, p, headers=h) if fresh
                     else conn.request("GET", p, headers=h))
                self.assertEqual(r.status, 200, r.body)
                seen[r.header("X-Backend")] += 1
        finally:
            if conn is not None:
                conn.close()
        return seen

    def test_every_policy_serves_and_spreads(self):
        for policy in ("random", "p2c-shadow", "hybrid", "hash"):
            with self.subTest(policy=policy):
                self.start_pool("    balance: %s\n" % policy
                                + ("    hash: {key: uri}\n" if policy == "hash" else ""))
                seen = self.spread(60, path=lambda i: "/bytes/%d" % (i + 1))
                self.assertEqual(sum(seen.values()), 60)
                self.assertGreaterEqual(len(seen), 2, "%s used one server: %r" % (policy, seen))
                self.stop_dimmer()

    def test_hash_on_uri_keeps_each_uri_on_its_server(self):
        self.start_pool("    balance: hash\n    hash: {key: uri}\n")
        first = {}
        for rnd in range(3):
            for i in range(20):
                r = H.get(self.port, "/bytes/%d" % (i + 1))
                self.assertEqual(r.status, 200)
                first.setdefault(i, r.header("X-Backend"))
                self.assertEqual(r.header("X-Backend"), first[i], "uri %d moved" % i)
        self.assertGreaterEqual(len(set(first.values())), 2, first)

    def test_hash_on_header_and_cookie(self):
        for key, make in (("header", lambda v: [("X-User", v)]),
                          ("cookie", lambda v: [("Cookie", "a=1; user=%s; z=2" % v)])):
            with self.subTest(key=key):
                self.start_pool("    balance: hash\n    hash: {key: %s, name: %s}\n"
                                % (key, "X-User" if key == "header" else "user"))
                where = {}
                for rnd in range(2):
                    for u in range(12):
                        r = H.get(self.port, "/bytes/5", headers=make("u%d" % u))
                        self.assertEqual(r.status, 200)
                        self.assertEqual(where.setdefault(u, r.header("X-Backend")),
                                         r.header("X-Backend"))
                self.assertGreaterEqual(len(set(where.values())), 2, where)
                # No header or cookie: the client address is the key, so one server.
                seen = self.spread(10)
                self.assertEqual(len(seen), 1, seen)
                self.stop_dimmer()

    def test_affinity_connection_keeps_a_connection_on_one_server(self):
        self.start_pool("    balance: roundrobin\n    affinity: connection\n")
        for _ in range(3):
            seen = self.spread(10, fresh=False)
            self.assertEqual(len(seen), 1, seen)
        # Each new connection is balanced.
        seen = self.spread(9, fresh=True)
        self.assertEqual(len(seen), 3, seen)


if __name__ == "__main__":
    unittest.main()
