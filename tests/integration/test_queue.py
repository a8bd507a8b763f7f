"""
Per-server max_conns and the pool's queue, as HAProxy's maxconn and timeout
queue: a server never serves more requests at once than its max_conns; a
request that finds every server full waits in the pool's queue, in turn, and
is sent when a place frees; one that waits timeouts.queue, or finds the queue
at max_queue, is answered 503 and never reaches a server.

The servers are dimmer-backend nodes whose requests take ?ms=N of service
each; their /stats tell the most requests they ever had in service at once.
The queue's orders: arrival, size (the smaller expected response first) and
page (a connection's page in progress before new pages, a page past its
bound after every other).
"""
import hashlib
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

NO_PASSIVE = {"max_fails": 0}


def read_all(tc, conns, holder):
    """
    Each of conns' responses, read at once (one thread each), then the
    holder's (200): {key: (when it was read, status, body length)}.
    """
    done = {}

    def read(k):
        r = conns[k].read_response(timeout=15)
        done[k] = (time.monotonic(), r.status, len(r.body))

    threads = [threading.Thread(target=read, args=(k,)) for k in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    tc.assertEqual(holder.read_response(timeout=10).status, 200)
    return done


def fetch_all(port, paths, timeout=20):
    """One request on its own connection per path, all at once: [(status, body)]."""
    out = [None] * len(paths)

    def one(i):
        try:
            with H.Conn(port, timeout=timeout) as c:
                r = c.request("GET", paths[i], timeout=timeout)
                out[i] = (r.status, r.body)
        except Exception as e:  # reported by the assertion below
            out[i] = ("error", repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return out


class QueueTest(H.DimmerTest):
    def node(self, name):
        # capacity: the node counts its requests in service (it never queues them).
        return self.start_node("--capacity", 1000, name=name)

    def queue(self):
        return self.d.admin_stats()["pools"][0]["queue"]

    def test_server_serves_at_most_max_conns_and_the_rest_wait_their_turn(self):
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 2})], "passive": NO_PASSIVE}},
            timeouts={"queue": "20s"})
        results = fetch_all(self.d.port, ["/bytes/%d?ms=500" % (i + 1) for i in range(6)])
        self.assertEqual(results, [(200, H.pattern(i + 1)) for i in range(6)])
        st = n.stats()
        self.assertEqual(st["in_service_max"], 2)
        self.assertEqual(st["requests"], 6)
        q = self.queue()
        self.assertEqual((q["now"], q["timeouts"], q["full"]), (0, 0, 0))
        self.assertGreaterEqual(q["peak"], 1)
        self.assertLessEqual(q["peak"], 4)
        self.assertEqual(self.d.admin_stats()["pools"][0]["servers"][0]["max_conns"], 2)

    def test_full_servers_are_passed_over_for_one_with_room(self):
        a, b = self.node("a"), self.node("b")
        self.d = self.start_dimmer(
            {"web": {"servers": [(a.name, a.port, {"max_conns": 1}),
                                 (b.name, b.port, {"max_conns": 3})],
                     "passive": NO_PASSIVE}},
            timeouts={"queue": "20s"})
        results = fetch_all(self.d.port, ["/bytes/5?ms=300"] * 8)
        self.assertEqual(results, [(200, H.pattern(5))] * 8)
        self.assertEqual(a.stats()["in_service_max"], 1)
        self.assertEqual(b.stats()["in_service_max"], 3)
        self.assertEqual(a.stats()["requests"] + b.stats()["requests"], 8)

    def test_request_waiting_past_timeouts_queue_gets_503_and_never_reaches_a_server(self):
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE}},
            timeouts={"queue": "300ms"})
        holder = H.Conn(self.d.port, timeout=10)
        try:
            holder.send(H.build_request("GET", "/bytes/1?ms=3000"))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the first in service")
            with H.Conn(self.d.port, timeout=10) as c:
                start = time.monotonic()
                r = c.request("GET", "/bytes/2", timeout=10)
                waited = time.monotonic() - start
                self.assertEqual(r.status, 503)
                self.assertIn(b"timeouts.queue", r.body)
                # Answered at the end of timeouts.queue, not at the holder's end.
                self.assertGreaterEqual(waited, 0.25)
                self.assertLess(waited, 2.5)
                # Still usable: the connection is kept.
                self.assertEqual(self.queue()["timeouts"], 1)
            self.assertEqual(holder.read_response(timeout=10).status, 200)
        finally:
            holder.close()
        self.assertEqual(n.stats()["requests"], 1)
        self.assertEqual(self.queue()["now"], 0)
        self.assertIn("timeouts.queue", self.d.proc.stderr())

    def test_queue_at_max_queue_answers_503_at_once(self):
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE,
                     "max_queue": 1}},
            timeouts={"queue": "20s"})
        holder = H.Conn(self.d.port, timeout=10)
        waiter = H.Conn(self.d.port, timeout=10)
        try:
            holder.send(H.build_request("GET", "/bytes/1?ms=1500"))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the first in service")
            waiter.send(H.build_request("GET", "/bytes/2"))
            H.wait_until(lambda: self.queue()["now"] == 1, 5, "the second queued")
            with H.Conn(self.d.port, timeout=10) as c:
                r = c.request("GET", "/bytes/3", timeout=10)
                self.assertEqual(r.status, 503)
                self.assertIn(b"max_queue", r.body)
            self.assertEqual(self.queue()["full"], 1)
            self.assertEqual(holder.read_response(timeout=10).body, H.pattern(1))
            self.assertEqual(waiter.read_response(timeout=10).body, H.pattern(2))
        finally:
            holder.close()
            waiter.close()
        self.assertEqual(n.stats()["requests"], 2)
        self.assertEqual(self.queue()["now"], 0)

    def test_client_gone_while_queued_gives_its_turn_back(self):
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE}},
            timeouts={"queue": "20s"})
        holder = H.Conn(self.d.port, timeout=10)
        try:
            holder.send(H.build_request("GET", "/bytes/1?ms=3000"))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the first in service")
            gone = [H.Conn(self.d.port) for _ in range(4)]
            for c in gone[:3]:
                c.send(H.build_request("GET", "/bytes/2"))
            # A POST whose body comes after its head has queued: read while it
            # waits, so that its close is seen too.
            gone[3].send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6000\r\n\r\n")
            H.wait_until(lambda: self.queue()["now"] == 4, 5, "four queued")
            gone[3].send(b"b" * 6000)
            for c in gone:
                c.close()
            H.wait_until(lambda: self.queue()["now"] == 0, 5, "the queue emptied by the closes")
            self.assertEqual(holder.read_response(timeout=10).status, 200)
        finally:
            holder.close()
        # The next request is served at once; the gone ones never reached the server.
        self.assertEqual(H.get(self.d.port, "/bytes/4").body, H.pattern(4))
        self.assertEqual(n.stats()["requests"], 2)

    def test_a_queued_request_keeps_its_head_its_body_and_what_follows(self):
        """
        A waiting request's head moves out of the read buffer into one of its
        own size: its fields reach the server whole even after other
        connections have read into the buffer it came in, its body (more than
        the few hundred bytes of room the move leaves) follows once a place
        frees, and so does a request pipelined behind it.
        """
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE}},
            timeouts={"queue": "20s"})
        fields = [("X-Field-%02d" % i, "value %02d " % i + "v" * 40) for i in range(40)]
        body = bytes(range(256)) * 800  # 200 KiB
        holder = H.Conn(self.d.port, timeout=20)
        heads, post = H.Conn(self.d.port, timeout=20), H.Conn(self.d.port, timeout=20)
        try:
            holder.send(H.build_request("GET", "/bytes/1?ms=1500"))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the first in service")
            heads.send(H.build_request("GET", "/headers?first", headers=fields) +
                       H.build_request("GET", "/headers?second", headers=fields[:3]))
            H.wait_until(lambda: self.queue()["now"] == 1, 5, "the first /headers queued")
            sender = threading.Thread(target=post.send, args=(
                H.build_request("POST", "/sha256", body=body),))
            sender.start()
            H.wait_until(lambda: self.queue()["now"] == 2, 5, "the POST queued")
            # Other connections read into the pooled read buffers meanwhile.
            filler = [("X-Filler", "z" * 4000)]
            others = [H.Conn(self.d.port, timeout=20) for _ in range(3)]
            for c in others:
                self.addCleanup(c.close)
                c.send(H.build_request("GET", "/bytes/3", headers=filler))
            H.wait_until(lambda: self.queue()["now"] == 5, 5, "five queued")
            self.assertEqual(holder.read_response(timeout=20).status, 200)
            first = heads.read_response(timeout=20)
            self.assertEqual(first.status, 200)
            for name, value in fields:
                self.assertIn(("%s: %s\r\n" % (name, value)).encode(), first.body)
            self.assertIn(b"GET /headers?first HTTP/1.1\r\n", first.body)
            second = heads.read_response(timeout=20)
            self.assertEqual(second.status, 200)
            self.assertIn(b"GET /headers?second HTTP/1.1\r\n", second.body)
            self.assertNotIn(b"X-Field-03", second.body)
            sender.join(20)
            r = post.read_response(timeout=20)
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.body), {"bytes": len(body),
                                                  "sha256": hashlib.sha256(body).hexdigest()})
            for c in others:
                self.assertEqual(c.read_response(timeout=20).body, H.pattern(3))
        finally:
            for c in (holder, heads, post):
                c.close()
        self.assertEqual(n.stats()["in_service_max"], 1)

    def test_two_workers_share_the_places_of_a_server(self):
        n = self.node("n1")
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 2})], "passive": NO_PASSIVE}},
            workers=2, timeouts={"queue": "30s"})
        results = fetch_all(self.d.port, ["/bytes/%d?ms=100" % (i + 1) for i in range(16)],
                            timeout=30)
        self.assertEqual(results, [(200, H.pattern(i + 1)) for i in range(16)])
        self.assertEqual(n.stats()["in_service_max"], 2)
        self.assertEqual(n.stats()["requests"], 16)
        self.assertEqual(self.queue()["now"], 0)

    def served_order(self, order, sizes, ms=200):
        """The sizes, queued one after another in that order behind a busy
        server, in the order dimmer sends them under queue_order ORDER."""
        n = self.node("n-" + order)
        self.d = self.start_dimmer(
            {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE,
                     "queue_order": order}},
            timeouts={"queue": "20s"})
        paths = {b: "/bytes/%d?ms=%d" % (b, ms) for b in sizes}
        for path in paths.values():  # the catalog learns their sizes from these
            self.assertEqual(H.get(self.d.port, path).status, 200)
        holder = H.Conn(self.d.port, timeout=10)
        conns = {b: H.Conn(self.d.port, timeout=10) for b in sizes}
        try:
            holder.send(H.build_request("GET", "/bytes/1?ms=%d" % (800 + 100 * len(sizes))))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the holder in service")
            for k, b in enumerate(sizes):
                conns[b].send(H.build_request("GET", paths[b]))
                H.wait_until(lambda: self.queue()["now"] == k + 1, 5, "%d bytes queued" % b)
            done = read_all(self, conns, holder)
        finally:
            holder.close()
            for c in conns.values():
                c.close()
        self.assertEqual({b: done[b][1:] for b in done}, {b: (200, b) for b in sizes})
        self.assertEqual(n.stats()["in_service_max"], 1)
        self.assertEqual(self.queue()["order"], order)
        # One at a time: each ends a service time after the one before.
        served = sorted(done, key=lambda b: done[b][0])
        for a, b in zip(served, served[1:]):
            self.assertGreater(done[b][0] - done[a][0], ms / 1000 * 0.7)
        return served

    def test_queue_order_size_sends_the_smaller_expected_response_first(self):
        self.assertEqual(self.served_order("size", [200000, 10]), [10, 200000])

    def test_queue_order_size_sorts_many_sizes_and_keeps_arrival_within_a_class(self):
        # A request waits 1 ms a kB of its expected response before one that
        # came after it: 3.5 MB about 3.1 s, 1.5 MB 1 s, 300 kB 0.26 s, so
        # this order holds however far apart (under a tenth of a second) the
        # test queues them. 1.5 MB and 1.3 MB are of one class (sizes within
        # 1.5x of one another, dimmer.yaml(5)): they keep their arrival order.
        sizes = [3500000, 1500000, 300000, 1300000, 10]
        self.assertEqual(self.served_order("size", sizes, ms=100),
                         [10, 300000, 1500000, 1300000, 3500000])

    def test_queue_order_arrival_keeps_the_turn(self):
        self.assertEqual(self.served_order("arrival", [200000, 10]), [200000, 10])

    def page_order(self, late, order="page", split=False):
        """
        Connection P asks for /bytes/2 (its page begins), then, page_gap
        being 5 s, its next request belongs to the same page. A holder takes
        the server's one place for `hold` s; P's second request and two new
        pages (N1, N2, each on its own connection) wait. With late, P waits
        1.5 s first and is queued first: its page is within page_bound (3 s)
        then, and past it (by half a second) once the holder is done, while
        the new pages are still a second within theirs. Without, P is
        queued last. With split, P's first request goes to another pool
        (/fault/..., no queue order of its own): its page begins there all
        the same. The order they are served in.
        """
        n = self.node("n-page")
        pools = {"web": {"servers": [(n.name, n.port, {"max_conns": 1})], "passive": NO_PASSIVE,
                         "queue_order": order,
                         "page_gap": "5s" if order == "page" else None,
                         "page_bound": "3s" if order == "page" else None}}
        routes = None
        if split:
            other = self.node("n-other")
            pools["other"] = {"servers": [(other.name, other.port)], "passive": NO_PASSIVE}
            routes = [{"path": "/fault/", "pool": "other"}]
        self.d = self.start_dimmer(pools, routes=routes, default_pool="web" if split else None,
                                   timeouts={"queue": "20s"})
        p = H.Conn(self.d.port, timeout=10)
        holder = H.Conn(self.d.port, timeout=10)
        news = {name: H.Conn(self.d.port, timeout=10) for name in ("N1", "N2")}
        conns = dict(news, P=p)
        try:
            first = p.request("GET", "/fault/page" if split else "/bytes/2")
            self.assertNotEqual(first.status, 0)
            if not split:
                self.assertEqual(first.status, 200)
            if late:
                time.sleep(1.5)  # the page ages (no event to wait for: time is the point)
            holder.send(H.build_request("GET", "/bytes/1?ms=%d" % (2000 if late else 1000)))
            H.wait_until(lambda: n.stats()["in_service"] == 1, 5, "the holder in service")
            queued = (["P"] if late else []) + ["N1", "N2"] + ([] if late else ["P"])
            for k, name in enumerate(queued):
                conns[name].send(H.build_request("GET", "/bytes/%d?ms=100" % (k + 3)))
                H.wait_until(lambda: self.queue()["now"] == k + 1, 5, "%s queued" % name)
            done = read_all(self, conns, holder)
        finally:
            for c in list(conns.values()) + [holder]:
                c.close()
        self.assertEqual({k: v[1] for k, v in done.items()}, {"P": 200, "N1": 200, "N2": 200})
        self.assertEqual(self.queue()["order"], order)
        self.assertEqual(n.stats()["in_service_max"], 1)
        return sorted(done, key=lambda k: done[k][0])

    def test_queue_order_page_serves_a_page_in_progress_before_new_pages(self):
        self.assertEqual(self.page_order(late=False), ["P", "N1", "N2"])

    def test_queue_order_page_counts_a_page_begun_in_another_pool(self):
        self.assertEqual(self.page_order(late=False, split=True), ["P", "N1", "N2"])

    def test_queue_order_page_serves_a_page_past_its_bound_after_the_others(self):
        self.assertEqual(self.page_order(late=True), ["N1", "N2", "P"])

    def test_queue_order_arrival_serves_the_same_in_arrival_order(self):
        self.assertEqual(self.page_order(late=False, order="arrival"), ["N1", "N2", "P"])

    def test_no_limit_by_default(self):
        n = self.node("n1")
        self.d = self.start_dimmer({"web": {"servers": [(n.name, n.port)],
                                            "passive": NO_PASSIVE}})
        results = fetch_all(self.d.port, ["/bytes/3?ms=1000"] * 8)
        self.assertEqual(results, [(200, H.pattern(3))] * 8)
        self.assertGreaterEqual(n.stats()["in_service_max"], 3)
        q = self.queue()
        self.assertEqual((q["now"], q["peak"]), (0, 0))


if __name__ == "__main__":
    H.main()
