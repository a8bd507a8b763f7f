"""
Listeners on port 0: dimmer binds a free port, every worker on that same
port, logs the bound address and writes it to --ports-file; the tests read
their ports from there (no port is picked here and handed over).
"""
import os
import select
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402


def listening_sockets(pid, port):
    """How many listening TCP sockets of process pid are on port (IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:
                    n += 1
    return n


def has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class PortZeroTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def test_two_workers_on_one_bound_port(self):
        d = self.start_dimmer({"web": self.pool(self.b1)}, workers=2)
        self.assertEqual([(kind, conf) for kind, conf, _ in d.lines],
                         [("listen", "127.0.0.1:0"), ("admin", "127.0.0.1:0")])
        self.assertNotIn(0, (d.port, d.admin))
        self.assertNotEqual(d.port, d.admin)
        with open(d.ports_file) as f:
            self.assertEqual(f.read(), "listen 127.0.0.1:0 127.0.0.1:%d\n"
                                       "admin 127.0.0.1:0 127.0.0.1:%d\n" % (d.port, d.admin))
        # The temp file it was written through is gone.
        self.assertEqual([n for n in os.listdir(self.tmp) if n.endswith(".tmp")], [])
        log = d.proc.stderr()
        self.assertIn("listening on 127.0.0.1:%d (2 workers)" % d.port, log)
        self.assertIn("admin listening on 127.0.0.1:%d" % d.admin, log)
        # One socket per worker on the bound port, not one worker per port.
        self.assertEqual(listening_sockets(d.proc.pid, d.port), 2)
        self.assertEqual(listening_sockets(d.proc.pid, d.admin), 1)
        for i in range(20):
            r = H.get(d.port, "/bytes/5")
            self.assertEqual((r.status, r.body), (200, H.pattern(5)), "connection %d" % i)
        # Counted once a response is complete, maybe just after the client read it.
        H.wait_until(lambda: d.servers()["b1"]["requests"] == 20, 5, "20 requests counted")

    def test_every_worker_serves_the_bound_port(self):
        # limits.max_conns is per worker: with one connection held open, the worker
        # that has it stops accepting, so whatever is answered at once on the bound
        # port is answered by the other worker, and the rest wait in the full
        # worker's listen queue until the held one closes. Connections are spread
        # across the SO_REUSEPORT sockets by a hash of their addresses: 20 tries
        # all landing on one worker would be a 1 in 2^20 chance.
        d = self.start_dimmer({"web": self.pool(self.b1)}, workers=2, limits={"max_conns": 1})
        held = H.Conn(d.port)
        self.assertEqual(held.request("GET", "/bytes/1").status, 200)
        conns = []
        try:
            for _ in range(20):
                c = H.Conn(d.port)
                conns.append(c)
                c.send(H.build_request("GET", "/bytes/1", headers=[("Connection", "close")]))
            # Served ones close after their answer, so the free worker takes them all.
            served = 0
            deadline = time.monotonic() + 10
            waiting = list(conns)
            while time.monotonic() < deadline:
                ready, _, _ = select.select([c.sock for c in waiting], [], [], 2.0)
                if not ready:
                    break  # the rest wait on the full worker
                for c in [c for c in waiting if c.sock in ready]:
                    self.assertEqual(c.read_response(timeout=5).status, 200)
                    waiting.remove(c)
                    served += 1
            self.assertGreater(served, 0, "only one worker accepts on the bound port")
            self.assertGreater(len(waiting), 0, "max_conns did not apply")
            self.assertEqual(held.request("GET", "/bytes/1").status, 200)
            held.close()
            for c in waiting:
                self.assertEqual(c.read_response(timeout=10).status, 200)
        finally:
            held.close()
            for c in conns:
                c.close()
        self.assertIn("limits.max_conns (1) reached", d.proc.stderr())

    def test_quick_start_on_port_0(self):
        d = self.start_dimmer_args(["--listen", "127.0.0.1:0", "--backend",
                                    "127.0.0.1:%d" % self.b1.port, "--workers", "2"])
        self.assertEqual(d.lines, [("listen", "127.0.0.1:0", d.port)])
        self.assertIsNone(d.admin)
        self.assertIn("listening on 127.0.0.1:%d (2 workers)" % d.port, d.proc.stderr())
        self.assertEqual(H.get(d.port, "/bytes/3").body, H.pattern(3))

    def test_several_port_0_listeners(self):
        # Two port-0 addresses are two listeners with a port each, not a duplicate.
        addrs = ["127.0.0.1:0", "127.0.0.1:0"] + (["[::1]:0"] if has_ipv6_loopback() else [])
        text = H.yaml_config(0, {"web": self.pool(self.b1)}, workers=2)
        # yaml_config writes one listener; this config has two or three.
        text = text.replace("listen:\n  - 127.0.0.1:0\n",
                            "listen: [%s]\n" % ", ".join('"%s"' % a for a in addrs))
        d = self.start_dimmer_conf(self.write_config(text))
        self.assertEqual([configured for _, configured, _ in d.lines], addrs)
        self.assertEqual(len(set(d.ports)), len(addrs), d.lines)
        for port in d.ports:
            self.assertEqual(listening_sockets(d.proc.pid, port), 2)
        for port in d.ports[:2]:
            self.assertEqual(H.get(port, "/bytes/2").status, 200)
        if len(addrs) == 3:
            with open(d.ports_file) as f:
                self.assertIn("listen [::1]:0 [::1]:%d\n" % d.ports[2], f.read())

    def test_an_address_another_process_listens_on_stops_the_start(self):
        # SO_REUSEPORT on both sides let a second dimmer bind the first's
        # port too, silently, each then getting some of the connections
        # (nginx, which binds without it, refuses: Address already in use).
        d = self.start_dimmer({"web": self.pool(self.b1)}, workers=2)
        p = self.start_proc("dimmer-second", [H.DIMMER, "--listen", "127.0.0.1:%d" % d.port,
                                              "--backend", "127.0.0.1:%d" % self.b1.port,
                                              "--ports-file", self.path("second.ports")])
        self.assertEqual(p.wait(10), 1)
        self.assertIn("cannot listen on 127.0.0.1:%d" % d.port, p.stderr())
        self.assertIn("Address already in use", p.stderr())
        self.assertFalse(os.path.exists(self.path("second.ports")))
        conf = self.write_config(H.yaml_config(0, {"web": self.pool(self.b1)}, admin=d.admin),
                                 "second.yaml")
        p = self.start_proc("dimmer-second-admin", [H.DIMMER, "-c", conf])
        self.assertEqual(p.wait(10), 1)
        self.assertIn("cannot listen on admin address 127.0.0.1:%d: Address already in use"
                      % d.admin, p.stderr())
        # The first one has every connection still.
        self.assertEqual(listening_sockets(d.proc.pid, d.port), 2)
        for i in range(10):
            self.assertEqual(H.get(d.port, "/bytes/5").status, 200, "connection %d" % i)
        H.wait_until(lambda: d.servers()["b1"]["requests"] == 10, 5, "10 requests counted")

    def test_unwritable_ports_file_stops_the_start(self):
        ports_file = self.path("no-such-dir/ports")
        p = self.start_proc("dimmer-nofile", [H.DIMMER, "--listen", "127.0.0.1:0", "--backend",
                                              "127.0.0.1:%d" % self.b1.port,
                                              "--ports-file", ports_file])
        self.assertEqual(p.wait(10), 1)
        self.assertIn("cannot write --ports-file %s" % ports_file, p.stderr())


if __name__ == "__main__":
    unittest.main()
