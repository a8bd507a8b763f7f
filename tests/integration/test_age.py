"""
AGE through a running dimmer in front of three dimmer-backends: the catalog
learns pages and object sizes from traffic; the first request of a keep-alive
connection writes its page's potential load to the load table (admin /stats),
the embedded objects fetched on the connection take it down again, it ages
with time, and whatever a connection still holds leaves the table when the
connection closes (FIN correction), so the table is exactly zero at rest.
"""
import os
import random
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402


def objects_of(backend, page):
    """The page's embedded objects, as the demo backend lists them."""
    r = H.get(backend.port, "/page/%d.objects" % page)
    assert r.status == 200, r
    return r.body.decode().split()


class AgeBase(H.DimmerTest):
    """Three backends and helpers to read the load table and the catalog."""

    def setUp(self):
        super().setUp()
        self.backends = [self.start_backend("b%d" % i) for i in range(3)]

    def start_with(self, half_life, weight="0.1", workers=1, catalog=""):
        servers = "".join('      - {name: %s, address: "127.0.0.1:%d"}\n' % (b.name, b.port)
                          for b in self.backends)
        conf = ("workers: %d\nlisten: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\n"
                "%s"
                "pools:\n  web:\n    balance: age\n"
                "    age: {weight: %s, half_life: %s, request_cost: 8k}\n"
                "    servers:\n%s") % (workers, catalog, weight, half_life, servers)
        d = self.start_dimmer_conf(self.write_config(conf))
        self.port = d.port
        self.admin_port = d.admin

    def servers(self):
        st = H.stats(self.admin_port)
        return {s["name"]: s for s in st["pools"][0]["servers"]}

    def potentials(self):
        return {n: s["potential"] for n, s in self.servers().items()}

    def total_potential(self):
        return sum(self.potentials().values())

    def catalog(self):
        return H.stats(self.admin_port)["catalog"]

    def learn(self, page):
        """Loads a page and its objects once on a fresh connection, then closes it."""
        with H.Conn(self.port) as c:
            r = c.request("GET", "/page/%d.html" % page)
            self.assertEqual(r.status, 200)
            for o in objects_of(self.backends[0], page):
                self.assertEqual(c.request("GET", o).status, 200)
        H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")

class AgeTest(AgeBase):
    def test_page_load_adds_potential_objects_take_it_back_and_close_zeroes(self):
        self.start_with("600s")
        page = 3
        objs = objects_of(self.backends[0], page)
        self.assertGreater(len(objs), 0)
        self.learn(page)
        cat = self.catalog()
        self.assertGreaterEqual(cat["pages"], 1)
        self.assertGreaterEqual(cat["objects"], len(set(objs)))

        # Three connections load the page and hold on: each server gets one
        # (the potential of the first makes its server the most loaded), and
        # every server holds the same potential: the page's objects' work.
        conns = [H.Conn(self.port) for _ in range(3)]
        try:
            seen = []
            for c in conns:
                r = c.request("GET", "/page/%d.html" % page)
                self.assertEqual(r.status, 200)
                seen.append(r.header("X-Backend"))
            self.assertEqual(sorted(seen), ["b0", "b1", "b2"], seen)
            pots = self.potentials()
            one = pots["b0"]
            self.assertGreater(one, 0)
            self.assertEqual(set(pots.values()), {one}, pots)
            # Each object's work is its size plus the 8 KiB request cost.
            self.assertGreaterEqual(one, len(set(objs)) * 8192)

            # The objects, on the first connection: bound to its server
            # (affinity), and its potential goes down to zero as they come.
            last = one
            for o in objs:
                r = conns[0].request("GET", o)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("X-Backend"), seen[0])
                now = self.potentials()[seen[0]]
                self.assertLessEqual(now, last)
                last = now
            self.assertEqual(self.potentials()[seen[0]], 0)
            self.assertGreater(self.total_potential(), 0)
        finally:
            for c in conns:
                c.close()
        # FIN correction: the other two never fetched their objects.
        H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")
        for s in self.servers().values():
            self.assertEqual(s["inflight_work"], 0, s)

    def test_potential_ages_with_time(self):
        self.start_with("400ms")
        self.learn(1)
        with H.Conn(self.port) as c:
            self.assertEqual(c.request("GET", "/page/1.html").status, 200)
            start = self.total_potential()
            self.assertGreater(start, 0)
            # After about two half-lives at most a third is left (ticks are 100 ms).
            H.wait_until(lambda: self.total_potential() < start / 3, 5,
                         "the potential to age below a third of %d" % start)
        H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")

    def test_many_clients_at_once_leave_the_table_at_zero(self):
        self.start_with("2s", workers=2)
        pages = [0, 1, 2, 4, 5]
        for p in pages:
            self.learn(p)
        objs = {p: objects_of(self.backends[0], p) for p in pages}
        errors = []

        def client(seed):
            rng = random.Random(seed)
            try:
                for _ in range(6):
                    with H.Conn(self.port) as c:
                        p = rng.choice(pages)
                        if c.request("GET", "/page/%d.html" % p).status != 200:
                            errors.append("page %d" % p)
                        # Some fetch all objects, some part, some none, then close.
                        for o in objs[p][:rng.randint(0, len(objs[p]))]:
                            if c.request("GET", o).status != 200:
                                errors.append(o)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        peak = 0
        while any(t.is_alive() for t in threads):
            pots = self.potentials()
            self.assertTrue(all(v >= 0 for v in pots.values()), pots)
            peak = max(peak, sum(pots.values()))
            threads[0].join(0.05)
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertGreater(peak, 0)
        H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")
        H.wait_until(lambda: all(s["inflight_work"] == 0 for s in self.servers().values()), 5,
                     "in-flight work back to zero")

    def test_learned_sizes_come_from_responses(self):
        self.start_with("600s")
        self.learn(7)
        objs = set(objects_of(self.backends[0], 7))
        # The page and each object: sizes learnt as they passed. The last one is
        # learnt when its response is done on dimmer's side, which the client,
        # having read it, may see a moment before: wait for it, with a bound.
        H.wait_until(lambda: self.catalog()["objects"] >= len(objs) + 1, 5,
                     "the catalog to learn the page and its %d objects" % len(objs))
        cat = self.catalog()
        self.assertGreater(cat["hits"] + cat["misses"], 0)


class PreloadTest(AgeBase):
    def test_manifest_gives_the_first_visit_its_potential(self):
        page = 9
        objs = objects_of(self.backends[0], page)
        sizes = {}
        for o in objs:
            r = H.get(self.backends[0].port, o)
            sizes[o] = len(r.body)
        manifest = self.path("site.manifest")
        with open(manifest, "w") as f:
            f.write("# the demo site's page %d\npage /page/%d.html\n" % (page, page))
            for o in objs:
                f.write("  %s %d\n" % (o, sizes[o]))
        # Nothing is learnt from traffic: the potential can only come from the manifest.
        self.start_with("600s", catalog="catalog: {manifest: \"%s\", learn: false}\n" % manifest)
        self.assertGreaterEqual(self.catalog()["pages"], 1)
        with H.Conn(self.port) as c:
            self.assertEqual(c.request("GET", "/page/%d.html" % page).status, 200)
            want = sum(sizes[o] + 8192 for o in set(objs))
            self.assertEqual(self.total_potential(), want)
        H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")

    def test_a_bad_manifest_stops_the_start(self):
        manifest = self.path("bad.manifest")
        with open(manifest, "w") as f:
            f.write("page /a.html\n  /b.png notanumber\n")
        conf = self.write_config(
            "listen: [\"127.0.0.1:0\"]\ncatalog: {manifest: \"%s\"}\n"
            "pools:\n  web:\n    servers:\n      - {name: a, address: \"127.0.0.1:%d\"}\n"
            % (manifest, self.backends[0].port), name="bad.yaml")
        p = self.start_proc("dimmer-bad", [H.DIMMER, "-c", conf])
        self.assertNotEqual(p.wait(10), 0)
        self.assertIn("bad.manifest:2:", p.stderr())


class AgeBurstTest(AgeBase):
    def burst(self, n, page):
        """n new connections send a page's first request at once; {server: count}."""
        conns = [H.Conn(self.port) for _ in range(n)]
        try:
            req = H.build_request("GET", "/page/%d.html" % page)
            for c in conns:
                c.send(req)
            seen = {}
            for c in conns:
                r = c.read_response()
                self.assertEqual(r.status, 200)
                seen[r.header("X-Backend")] = seen.get(r.header("X-Backend"), 0) + 1
            return seen
        finally:
            for c in conns:
                c.close()
            H.wait_until(lambda: self.total_potential() == 0, 5, "the table back to zero")

    def test_a_burst_of_new_connections_is_spread(self):
        # Regression: the expected work and the potential of a pick were
        # written when the server connection was ready, so every pick of a
        # burst read the same scores and most went to one server.
        self.start_with("600s")
        self.learn(3)
        for _ in range(3):
            seen = self.burst(60, 3)
            counts = [seen.get(b.name, 0) for b in self.backends]
            self.assertEqual(sum(counts), 60)
            self.assertLessEqual(max(counts) - min(counts), 6, counts)


if __name__ == "__main__":
    unittest.main()
