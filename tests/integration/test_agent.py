"""
dimmer-agent as a real process: it sends signed reports over UDP every
interval, and a receiver written here (Python's hmac, not the project's code)
checks each one: the format, the HMAC-SHA256 under the key file, sequence
numbers one apart from the start time in microseconds, a timestamp of now, an estimate between the configured idle
and full watts, and the ESTABLISHED connections of the served port counted
from /proc/net/tcp. Bad arguments get one line and exit code 2.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

KEY = b"a key only the proxy and the agent know"


def established(ports):
    """The kernel's own count: ESTABLISHED sockets whose local port is in ports."""
    n = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) in ports:
                        n += 1
        except FileNotFoundError:
            pass
    return n


# Attempts at a count taken while no other process has a connection on the
# served port number. The agent counts by port, as a server's agent must, so
# a connection another test makes meanwhile from an address of its own can
# share the number; a fresh port is tried then, at most this many times.
ATTEMPTS = 10


class AgentTest(H.DimmerTest):
    def test_reports(self):
        key_file = self.path("agent.key")
        with open(key_file, "wb") as f:
            f.write(KEY + b"\n")  # a final newline is not part of the key
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((H.HOST, 0))
        rx.settimeout(10)
        self.addCleanup(rx.close)
        # A served port with three connections to it.
        srv = socket.socket()
        srv.bind((H.HOST, 0))
        srv.listen(8)
        self.addCleanup(srv.close)
        port = srv.getsockname()[1]
        clients = [socket.create_connection((H.HOST, port)) for _ in range(3)]
        accepted = [srv.accept()[0] for _ in range(3)]
        for s in clients + accepted:
            self.addCleanup(s.close)
        p = self.start_proc("agent", [H.DIMMER_AGENT, "--name", "web-1", "--to",
                                      "%s:%d" % rx.getsockname(), "--key-file", key_file,
                                      "--ports", "%d,1" % port, "--interval", "100",
                                      "--idle-w", "30", "--sys-w", "70", "--io-w", "60",
                                      "--wait-w", "50", "--count", "3"])
        seqs = []
        for _ in range(3):
            data, _ = rx.recvfrom(2048)
            r = H.agent_report(data, KEY)
            self.assertEqual(r["name"], "web-1")
            # Ours are open all along; another process's can only add.
            self.assertGreaterEqual(r["tcp"], 3)
            seqs.append(r["seq"])
            self.assertLess(abs(r["ts"] - time.time() * 1000), 5000)
            self.assertGreaterEqual(r["est_w"], 30)
            self.assertLessEqual(r["est_w"], 70)
        self.assertEqual(p.wait(10), 0)
        # One more each report, from the start time in microseconds.
        self.assertEqual(seqs, [seqs[0], seqs[0] + 1, seqs[0] + 2])
        self.assertLess(abs(seqs[0] / 1000 - time.time() * 1000), 60000)
        # A restarted agent goes on above the run before: dimmer takes its reports.
        p = self.start_proc("agent2", [H.DIMMER_AGENT, "--name", "web-1", "--to",
                                       "%s:%d" % rx.getsockname(), "--key-file", key_file,
                                       "--ports", str(port), "--count", "1"])
        data, _ = rx.recvfrom(2048)
        self.assertGreater(H.agent_report(data, KEY)["seq"], seqs[-1])
        self.assertEqual(p.wait(10), 0)

    def test_counts_the_served_ports_connections(self):
        """
        The agent's count is the kernel's: exactly the ESTABLISHED
        connections on the served ports (3, then 4 once one more comes, and
        those of a second port added), taken where the kernel shows only this
        test's connections on those ports before and after the report.
        """
        key_file = self.path("agent.key")
        with open(key_file, "wb") as f:
            f.write(KEY)
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((H.HOST, 0))
        rx.settimeout(10)
        self.addCleanup(rx.close)
        for conns in ((3,), (4,), (2, 1)):
            self.assert_agent_counts(rx, key_file, conns)

    def assert_agent_counts(self, rx, key_file, conns):
        """conns[i] connections to served port i; the agent must count sum(conns)."""
        seen = []
        for attempt in range(ATTEMPTS):
            socks, ports = [], set()
            try:
                for n in conns:
                    srv = socket.socket()
                    srv.bind((H.HOST, 0))
                    srv.listen(8)
                    socks.append(srv)
                    port = srv.getsockname()[1]
                    ports.add(port)
                    socks += [socket.create_connection((H.HOST, port)) for _ in range(n)]
                    socks += [srv.accept()[0] for _ in range(n)]
                before = established(ports)
                p = self.start_proc("agent-%d-%d" % (sum(conns), attempt), [
                    H.DIMMER_AGENT, "--name", "web-1", "--to", "%s:%d" % rx.getsockname(),
                    "--key-file", key_file, "--ports", ",".join(str(q) for q in sorted(ports)),
                    "--count", "1"])
                data, _ = rx.recvfrom(2048)
                got = H.agent_report(data, KEY)["tcp"]
                after = established(ports)
                self.assertEqual(p.wait(10), 0)
            finally:
                for sk in socks:
                    sk.close()
            self.assertGreaterEqual(got, sum(conns))
            if before == after == sum(conns):
                self.assertEqual(got, sum(conns), "agent %d, kernel %d then %d" % (
                    got, before, after))
                return
            seen.append((got, before, after))
        self.fail("no report without another process on the port in %d attempts "
                  "(agent, kernel before, after): %s" % (ATTEMPTS, seen))

    def test_bad_arguments(self):
        key_file = self.path("k")
        with open(key_file, "w") as f:
            f.write("k")
        base = ["--to", "127.0.0.1:9", "--key-file", key_file, "--ports", "80"]
        for args, what in ((["--name", "web 1"] + base, "--name"),
                           (["--name", "a", "--to", "127.0.0.1", "--key-file", key_file,
                             "--ports", "80"], "--to"),
                           (["--name", "a", "--to", "127.0.0.1:9", "--key-file", key_file,
                             "--ports", "0"], "--ports"),
                           (["--name", "a"] + base + ["--bogus", "1"], "unknown option"),
                           (["--name", "a"], "required")):
            self.assert_usage_error(H.DIMMER_AGENT, args, what)


if __name__ == "__main__":
    H.main()
