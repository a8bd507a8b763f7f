"""
The connection limits as a client sees them: at limits.max_conns a worker
stops accepting and new connections wait in the kernel's listen queue (no
reset), and are served once a slot frees; at limits.max_conns_per_client a
client address's next connection is closed at once, unanswered.
"""
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

NO_PASSIVE = {"max_fails": 0}
# How long a connection left waiting is watched for bytes it must not get.
QUIET = 1.0


def silent_for(conn, seconds):
    """True if conn gets no byte, no EOF and no reset for seconds."""
    conn.sock.settimeout(seconds)
    try:
        data = conn.sock.recv(1)
    except (socket.timeout, TimeoutError):
        return True
    except ConnectionResetError:
        raise AssertionError("connection reset while waiting for a slot")
    raise AssertionError("got %r (EOF when empty) while waiting for a slot" % data)


def answer_all(conns, timeout):
    """Reads one response from each of conns, in whatever order they come; statuses."""
    deadline = time.monotonic() + timeout
    pending = list(conns)
    statuses = []
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("%d connections not answered in %ss" % (len(pending), timeout))
        ready, _, _ = select.select([c.sock for c in pending], [], [], left)
        for c in [c for c in pending if c.sock in ready]:
            r = c.read_response(timeout=5)
            statuses.append(r.status)
            pending.remove(c)
            c.close()
    return statuses


class MaxConnsTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def limits(self):
        lim = self.d.admin_stats()["limits"]
        return {k: lim[k] for k in ("accept_pauses", "paused_workers")}

    def held(self, n):
        conns = []
        for _ in range(n):
            c = H.Conn(self.d.port)
            conns.append(c)
            self.assertEqual(c.request("GET", "/bytes/2").status, 200)
        return conns

    def test_full_worker_leaves_new_connections_in_the_listen_queue(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=1, limits={"max_conns": 2})
        first, second = self.held(2)
        self.assertEqual(self.limits(), {"accept_pauses": 0, "paused_workers": 0})
        # The TCP handshake completes (the kernel's backlog), but nothing answers.
        third = H.Conn(self.d.port)
        third.send(H.build_request("GET", "/bytes/3"))
        self.assertTrue(silent_for(third, QUIET))
        H.wait_until(lambda: "accepting paused" in self.d.proc.stderr(), 5, "the pause logged")
        self.assertIn("limits.max_conns (2) reached", self.d.proc.stderr())
        self.assertEqual(self.limits(), {"accept_pauses": 1, "paused_workers": 1})
        # The two held still work.
        self.assertEqual(second.request("GET", "/bytes/4").body, H.pattern(4))
        first.close()
        r = third.read_response(timeout=5)
        self.assertEqual((r.status, r.body), (200, H.pattern(3)))
        # Full again (second and third), with nothing waiting: still one pause.
        self.assertNotIn("accepting resumed", self.d.proc.stderr())
        second.close()
        H.wait_until(lambda: "accepting resumed" in self.d.proc.stderr(), 5, "the resume logged")
        self.assertEqual(self.limits(), {"accept_pauses": 1, "paused_workers": 0})
        self.assertEqual(third.request("GET", "/bytes/5").body, H.pattern(5))
        third.close()
        self.assertEqual(H.get(self.d.port, "/bytes/1").status, 200)
        log = self.d.proc.stderr()
        self.assertEqual(log.count("accepting paused"), 1)
        self.assertEqual(log.count("accepting resumed"), 1)

    def test_many_waiting_connections_are_neither_refused_nor_reset(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=1, limits={"max_conns": 2})
        holders = self.held(2)
        waiting = []
        try:
            for i in range(10):
                # A refused or reset connect raises here.
                c = H.Conn(self.d.port)
                waiting.append(c)
                c.send(H.build_request("GET", "/bytes/%d" % (i + 1)))
            for c in waiting:
                self.assertTrue(silent_for(c, QUIET / 10))
            for c in holders:
                c.close()
            # Each waiting one is served and closed in turn, frees its slot for the next.
            self.assertEqual(answer_all(waiting, 15), [200] * 10)
        finally:
            for c in holders + waiting:
                c.close()
        H.wait_until(lambda: "accepting resumed" in self.d.proc.stderr(), 5, "the resume logged")
        self.assertEqual(self.d.proc.stderr().count("accepting paused"), 1)
        self.assertEqual(self.limits()["accept_pauses"], 1)


class PerClientTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def refused(self):
        return self.d.admin_stats()["limits"]["refused"]["max_conns_per_client"]

    def test_address_at_its_cap_gets_new_connections_closed(self):
        # Two workers: the cap is per address across the process, whichever
        # worker's listener a connection lands on.
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)},
                                   workers=2, limits={"max_conns_per_client": 2})
        held = []
        try:
            for _ in range(2):
                c = H.Conn(self.d.port)
                held.append(c)
                self.assertEqual(c.request("GET", "/bytes/2").status, 200)
            self.assertEqual(self.refused(), 0)
            for i in range(3):
                with H.Conn(self.d.port) as extra:
                    try:
                        extra.send(H.build_request("GET", "/bytes/2"))
                    except OSError:
                        pass
                    self.assertTrue(extra.closed_by_peer(3), "connection %d over the cap kept" % i)
                    self.assertEqual(extra.buf, b"")
            self.assertEqual(self.refused(), 3)
            # The held ones keep working; closing one makes room for one.
            self.assertEqual(held[0].request("GET", "/bytes/3").body, H.pattern(3))
            held.pop().close()

            def served_on_new_connection():
                try:
                    with H.Conn(self.d.port, timeout=2) as c:
                        return c.request("GET", "/bytes/2", timeout=2).status == 200
                except (OSError, H.Closed):
                    return False

            # The close reaches dimmer a moment after the client's close() returns.
            H.wait_until(served_on_new_connection, 5, "room for a new connection")
        finally:
            for c in held:
                c.close()

    def test_no_cap_by_default(self):
        self.d = self.start_dimmer({"web": self.pool(self.b1, passive=NO_PASSIVE)})
        conns = [H.Conn(self.d.port) for _ in range(20)]
        try:
            for c in conns:
                self.assertEqual(c.request("GET", "/bytes/1").status, 200)
        finally:
            for c in conns:
                c.close()
        self.assertEqual(self.refused(), 0)


if __name__ == "__main__":
    H.main()
