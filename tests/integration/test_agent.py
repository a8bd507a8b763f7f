"""
dimmer-agent as a real process: it sends signed reports over UDP every
interval, and a receiver written here (Python's hmac, not the project's code)
checks each one: the format, the HMAC-SHA256 under the key file, sequence
numbers one apart from the start time in microseconds, a timestamp of now, an estimate between the configured idle
and full watts, and the ESTABLISHED connections of the served port counted
from /proc/net/tcp. Bad arguments get one line and exit code 2.
"""
import json
import os
import re
import socket
import struct
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


def tcp_state(sock):
    """The kernel's state (hex, as /proc/net/tcp gives it) of the connected socket sock."""
    return H.tcp_state(sock.getsockname()[1], sock.getpeername()[1])


def text(path):
    with open(path) as f:
        return f.read()


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
                           (["--name", "a", "--to", "127.0.0.1:9", "--key-file", key_file,
                             "--ports", ""], "--ports"),
                           # getaddrinfo() would take 99999 as port 34463
                           (["--name", "a", "--to", "127.0.0.1:99999", "--key-file", key_file,
                             "--ports", "80"], "--to"),
                           (["--name", "a", "--to", "127.0.0.1:0", "--key-file", key_file,
                             "--ports", "80"], "--to"),
                           (["--name", "a", "--to", "127.0.0.1:9", "--key-file", self.tmp,
                             "--ports", "80"], "Is a directory"),
                           (["--name", "a"] + base + ["--bogus", "1"], "unknown option"),
                           (["--name", "a"], "required"),
                           (["--name", "a"] + base + ["--control", "0.0.0.0:0", "--sleep-command",
                                                      "true"], "needs --control-token-file"),
                           (["--name", "a"] + base + ["--control", "127.0.0.1:0"],
                            "--sleep-command or --wake-command"),
                           (["--name", "a"] + base + ["--sleep-command", "true"], "need --control"),
                           (["--name", "a"] + base + ["--control", "127.0.0.1",
                                                      "--sleep-command", "true"], "--control")):
            self.assert_usage_error(H.DIMMER_AGENT, args, what)

    def start_control(self, *args):
        """An agent serving --control on a port of its choice, with args; its port."""
        key_file = self.path("k")
        with open(key_file, "w") as f:
            f.write("k")
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the reports go nowhere
        rx.bind((H.HOST, 0))
        self.addCleanup(rx.close)
        p = self.start_proc("agent-control-%d" % len(self.procs), [
            H.DIMMER_AGENT, "--name", "a", "--to", "%s:%d" % rx.getsockname(), "--key-file",
            key_file, "--ports", "80", "--control", "%s:0" % H.HOST] + list(args))
        line = re.compile(r"^dimmer-agent control on \S+:(\d+)$", re.M)
        H.wait_until(lambda: line.search(p.stdout()) or not p.alive(), 10, "the control port")
        self.assertTrue(p.alive(), p.stderr())
        return p, int(line.search(p.stdout()).group(1))

    def test_control_runs_one_command_at_a_time_and_kills_a_hung_one(self):
        mark = self.path("slept")
        p, port = self.start_control("--sleep-command", "echo slept >> %s" % mark,
                                     "--wake-command", "exec sleep 30", "--command-timeout", "400")
        r = H.request(port, "POST", "/sleep")
        self.assertEqual(r.status, 202, r.body)
        H.wait_until(lambda: os.path.exists(mark), 10, "the sleep command to run")
        # A wake that hangs holds its answer; a sleep meanwhile is refused.
        waker = H.Conn(port, timeout=10)
        self.addCleanup(waker.close)
        waker.send(H.build_request("POST", "/wake"))
        H.wait_until(lambda: 'running "exec sleep 30"' in p.stderr(), 10, "the wake command")
        r = H.request(port, "POST", "/sleep")
        self.assertEqual(r.status, 409, r.body)
        self.assertIn(b"the wake command is running", r.body)
        r = waker.read_response()
        self.assertEqual(r.status, 502, r.body)
        self.assertIn(b"killed by signal 9 (command timeout)", r.body)
        status = json.loads(H.get(port, "/status").body)
        self.assertEqual((status["sleeps"], status["wakes"], status["failed"], status["running"]),
                         (1, 1, 1, None))
        with open(mark) as f:
            self.assertEqual(f.read(), "slept\n")  # the 409 ran nothing

    def test_control_wakes_after_a_running_sleep_and_kills_a_hung_commands_children(self):
        child, mark = self.path("child"), self.path("woke")
        p, port = self.start_control(
            "--sleep-command", "sleep 30 & echo $! > %s; wait" % child,
            "--wake-command", "echo woke >> %s" % mark, "--command-timeout", "1500")
        self.assertEqual(H.request(port, "POST", "/sleep").status, 202)
        H.wait_until(lambda: os.path.exists(child) and text(child).strip(), 10,
                     "the sleep command's child")
        pid = int(text(child))
        # A wake while the machine goes to sleep waits for the sleep command
        # and then runs (dimmer counts a 409 as a failed wake); a second one
        # meanwhile is refused.
        waker = H.Conn(port, timeout=10)
        self.addCleanup(waker.close)
        waker.send(H.build_request("POST", "/wake"))
        H.wait_until(lambda: "wake: after the sleep command" in p.stderr(), 10, "the wake to wait")
        r = H.request(port, "POST", "/wake")
        self.assertEqual(r.status, 409, r.body)
        self.assertFalse(os.path.exists(mark))
        r = waker.read_response()
        self.assertEqual(r.status, 200, r.body)
        with open(mark) as f:
            self.assertEqual(f.read(), "woke\n")
        self.assertIn("sleep command: killed by signal 9", p.stderr())
        # The timeout killed the command's child too, not only its shell.

        def gone():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
            except FileNotFoundError:
                return True
        H.wait_until(gone, 10, "the sleep command's child to be killed")
        status = json.loads(H.get(port, "/status").body)
        self.assertEqual((status["sleeps"], status["wakes"], status["failed"]), (1, 1, 1))

    def test_control_answers_a_waiting_wake_within_its_command_timeout(self):
        p, port = self.start_control("--sleep-command", "exec sleep 30",
                                     "--wake-command", "exec sleep 30", "--command-timeout", "2000")
        self.assertEqual(H.request(port, "POST", "/sleep").status, 202)
        H.wait_until(lambda: 'running "exec sleep 30"' in p.stderr(), 10, "the sleep command")
        # A wake that waits for a hung sleep command shares one
        # --command-timeout with it from the wake's asking: the sleep is
        # killed after half of it, the wake has what is left, so it is
        # answered within the timeout of its asking (so within dimmer's
        # wait), not after the sleep's timeout and then its own.
        waker = H.Conn(port, timeout=20)
        self.addCleanup(waker.close)
        waker.send(H.build_request("POST", "/wake"))
        r = waker.read_response()
        self.assertIn(r.status, (502, 504), r.body)
        log = p.stderr()
        self.assertIn("sleep command: killed by signal 9 (command timeout)", log)
        budgets = [int(ms) for kind, ms in re.findall(
            r"dimmer-agent: (\w+): running \"exec sleep 30\" \(pid \d+, timeout (\d+) ms\)", log)
            if kind == "wake"]
        # The sleep ran 1000 ms or more after the wake's asking before it was killed.
        self.assertEqual(len(budgets), 1, log)
        self.assertLessEqual(budgets[0], 1000, log)

    def test_control_outlives_a_reset_requester_and_ignores_trailer_credentials(self):
        token = self.path("token")
        with open(token, "w") as f:
            f.write("s3cret")
        p, port = self.start_control("--wake-command", "sleep 0.3", "--control-token-file", token)
        # The answer to a wake whose requester closed and then reset its
        # connection meanwhile is a failed write (EPIPE: a reset after the
        # close), not a SIGPIPE that ends the agent.
        s = socket.create_connection((H.HOST, port), timeout=10)
        s.sendall(H.build_request("POST", "/wake", headers=[("Authorization", "Bearer s3cret")]))
        H.wait_until(lambda: 'running "sleep 0.3"' in p.stderr(), 10, "the wake command")
        s.shutdown(socket.SHUT_WR)
        H.wait_until(lambda: tcp_state(s) == "05", 5, "our close acknowledged (FIN_WAIT2)")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        H.wait_until(lambda: "wake command: exit status 0" in p.stderr() or not p.alive(), 10,
                     "the wake command to end")
        r = H.request(port, "GET", "/status")
        self.assertTrue(p.alive(), p.stderr())
        self.assertEqual(json.loads(r.body)["wakes"], 1)
        # Credentials in a chunked body's trailer are not the request's.
        got, closed = H.raw_exchange(port, b"POST /wake HTTP/1.1\r\nHost: x\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\n0\r\n"
                                     b"Authorization: Bearer s3cret\r\n\r\n")
        self.assertEqual(got.split(b" ")[1], b"401", got)
        # A browser's POST (it carries Origin; dimmer's never does) is
        # refused, token or not: a page of any site could otherwise post a
        # form to a loopback listener, which needs no token.
        for origin in ("http://evil.example", "null"):
            r = H.request(port, "POST", "/wake", headers=[
                ("Origin", origin), ("Authorization", "Bearer s3cret")])
            self.assertEqual((r.status, r.reason), (403, "Forbidden"), (origin, r.body))
        self.assertEqual(json.loads(H.request(port, "GET", "/status").body)["wakes"], 1)

    def test_control_connections_past_the_limit_close_the_floods_own(self):
        p, port = self.start_control("--wake-command", "true")
        # dimmer's request, half sent, then another address opens twice the
        # limit and sends nothing: the flood's own connections make room, not
        # the request half read (the oldest of all).
        mine = H.Conn(port, timeout=10)
        self.addCleanup(mine.close)
        mine.send(b"POST /wake HTTP/1.1\r\n")  # accepted first: the queue is in order
        flood = []
        for _ in range(32):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.addCleanup(s.close)
            s.bind(("127.0.0.2", 0))
            s.connect((H.HOST, port))
            s.setblocking(False)
            flood.append(s)

        def closed(s):
            try:
                return s.recv(1) == b""
            except BlockingIOError:
                return False
            except ConnectionResetError:
                return True

        # 1 + 32 connections, 16 at most: 17 of the flood's closed.
        H.wait_until(lambda: sum(closed(s) for s in flood) >= 17, 10, "17 of the flood closed")
        mine.send(b"Host: x\r\n\r\n")
        self.assertEqual(mine.read_response().status, 200)
        self.assertTrue(p.alive())

    def test_control_refuses_bad_requests(self):
        p, port = self.start_control("--wake-command", "true")
        self.assertEqual(H.request(port, "POST", "/sleep").status, 501)  # no --sleep-command
        self.assertEqual(H.request(port, "POST", "/nothing").status, 404)
        self.assertEqual(H.request(port, "DELETE", "/status").status, 405)
        for data, status in ((b"POST /wake HTTP/1.1\r\nHost x\r\n\r\n", b"400"),
                             (b"POST /wake HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 5000 +
                              b"\r\n\r\n", b"431")):
            got, closed = H.raw_exchange(port, data)
            self.assertEqual(got.split(b" ")[1], status, got)
            self.assertTrue(closed)
        # Past 16 connections, a new one closes the oldest still sending its
        # head: connections that send nothing do not keep a request out.
        held = [H.Conn(port, timeout=10) for _ in range(16)]
        try:
            for c in held:
                c.send(b"GET /st")
            H.wait_until(lambda: json.loads(H.get(port, "/status").body)["wakes"] == 0, 10,
                         "a request past 16 slow connections")
            try:  # the oldest, closed unanswered (reset if its bytes were not read yet)
                self.assertEqual(held[0].sock.recv(100), b"")
            except ConnectionResetError:
                pass
            held[15].send(b"atus HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(held[15].read_response().status, 200)
        finally:
            for c in held:
                c.close()
        H.wait_until(lambda: H.request(port, "POST", "/wake").status == 200, 10,
                     "a request once the connections are gone")
        # A head that never ends is answered 408 (after DM_CONTROL_READ_MS, 5 s).
        slow = socket.create_connection((H.HOST, port), timeout=15)
        self.addCleanup(slow.close)
        slow.sendall(b"POST /wake HTTP/1.1\r\n")
        self.assertIn(b" 408 ", slow.recv(200))
        self.assertEqual(json.loads(H.get(port, "/status").body)["wakes"], 1)


if __name__ == "__main__":
    H.main()
