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


def assert_count(test, got, ours, ports, before):
    """
    got is the agent's count: ours (this test's connections) unless another
    process's connection shares the port number meanwhile (a test elsewhere
    restarting a server on a port it once had), which the kernel's count
    before and after the report shows too.
    """
    after = established(ports)
    lo, hi = min(before, after), max(before, after)
    test.assertGreaterEqual(got, ours)
    test.assertTrue(lo <= got <= hi, "agent %d, kernel %d then %d" % (got, before, after))
    if hi == ours:
        test.assertEqual(got, ours)


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
        before = established({port, 1})
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
            assert_count(self, r["tcp"], 3, {port, 1}, before)
            seqs.append(r["seq"])
            self.assertLess(abs(r["ts"] - time.time() * 1000), 5000)
            self.assertGreaterEqual(r["est_w"], 30)
            self.assertLessEqual(r["est_w"], 70)
        self.assertEqual(p.wait(10), 0)
        # One more each report, from the start time in microseconds.
        self.assertEqual(seqs, [seqs[0], seqs[0] + 1, seqs[0] + 2])
        self.assertLess(abs(seqs[0] / 1000 - time.time() * 1000), 60000)
        # A fourth connection shows in the next run's count.
        extra = socket.create_connection((H.HOST, port))
        self.addCleanup(extra.close)
        self.addCleanup(srv.accept()[0].close)
        before = established({port})
        p = self.start_proc("agent2", [H.DIMMER_AGENT, "--name", "web-1", "--to",
                                       "%s:%d" % rx.getsockname(), "--key-file", key_file,
                                       "--ports", str(port), "--count", "1"])
        data, _ = rx.recvfrom(2048)
        r = H.agent_report(data, KEY)
        assert_count(self, r["tcp"], 4, {port}, before)
        # A restarted agent goes on above the run before: dimmer takes its reports.
        self.assertGreater(r["seq"], seqs[-1])
        self.assertEqual(p.wait(10), 0)

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
