"""
dimmer as a systemd service, without systemd: the notify protocol is a
datagram socket named by NOTIFY_SOCKET, so the test binds one and reads what
a Type=notify unit's manager would (READY=1 once listening, RELOADING=1 and
READY=1 around a SIGHUP, STOPPING=1 on SIGTERM, WATCHDOG=1 every half of
WATCHDOG_USEC); user: and group: drop root once everything is bound; the
unit file passes systemd-analyze verify where systemd-analyze is installed.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "dist", "systemd", "dimmer.service")


class Notify:
    """The manager's end of NOTIFY_SOCKET: every datagram dimmer sends, in order."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setblocking(False)
        self.msgs = []

    def drain(self):
        while True:
            try:
                self.msgs.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.msgs

    def wait_for(self, field, after=0, timeout=10):
        """The index of the first message past index after with the line field."""
        def seen():
            for i, m in enumerate(self.drain()[after:], after):
                if field in m.split("\n"):
                    return i + 1
            return None

        return H.wait_until(seen, timeout, "%r from dimmer on NOTIFY_SOCKET" % field) - 1


class ServiceTest(H.DimmerTest):
    def notify_env(self, watchdog_usec=None):
        path = self.path("notify.sock")
        n = Notify(path)
        self.addCleanup(n.sock.close)
        env = {"NOTIFY_SOCKET": path}
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        return n, env

    def test_notify_ready_reloading_stopping(self):
        b1 = self.start_backend("b1")
        n, env = self.notify_env()
        conf = self.write_config(H.yaml_config(0, {"web": self.pool(b1)}, admin=0))
        self.d = self.start_dimmer_conf(conf, env=env)
        i = n.wait_for("READY=1")
        ready = n.msgs[i].split("\n")
        self.assertIn("MAINPID=%d" % self.d.proc.pid, ready)
        self.assertTrue(any(f.startswith("STATUS=serving on 1 listener") for f in ready), ready)
        # READY comes once everything listens: a request is served now.
        self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
        self.d.proc.p.send_signal(signal.SIGHUP)
        j = n.wait_for("RELOADING=1", after=i + 1)
        self.assertTrue(any(f.startswith("MONOTONIC_USEC=") for f in n.msgs[j].split("\n")))
        n.wait_for("READY=1", after=j + 1)
        H.wait_until(lambda: "configuration reloaded" in self.d.proc.stderr(), 5, "the reload")
        self.d.proc.p.send_signal(signal.SIGTERM)
        n.wait_for("STOPPING=1", after=j + 1)
        self.assertEqual(self.d.proc.p.wait(timeout=15), 0)

    def test_watchdog_is_fed_while_workers_tick(self):
        b1 = self.start_backend("b1")
        n, env = self.notify_env(watchdog_usec=400000)  # fed every 200 ms
        conf = self.write_config(H.yaml_config(0, {"web": self.pool(b1)}, admin=0, workers=2))
        self.d = self.start_dimmer_conf(conf, env=env)
        i = n.wait_for("READY=1")
        k = n.wait_for("WATCHDOG=1", after=i)
        k = n.wait_for("WATCHDOG=1", after=k + 1)
        n.wait_for("WATCHDOG=1", after=k + 1)
        self.assertIn("systemd watchdog: fed every 200 ms", self.d.proc.stderr())
        self.assertNotIn("has not ticked", self.d.proc.stderr())
        self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)

    def test_no_notify_socket_no_messages(self):
        b1 = self.start_backend("b1")
        self.d = self.start_dimmer({"web": self.pool(b1)})
        self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
        self.assertNotIn("watchdog", self.d.proc.stderr())

    def test_runs_as_the_configured_user_once_bound(self):
        if os.geteuid() != 0:
            self.skipTest("not root: no privileges to drop")
        b1 = self.start_backend("b1")
        conf = self.write_config(H.yaml_config(0, {"web": self.pool(b1)}, admin=0,
                                               extra="user: nobody\ngroup: nogroup\n"))
        self.d = self.start_dimmer_conf(conf)
        H.wait_until(lambda: "running as user nobody" in self.d.proc.stderr(), 5,
                     "the privileges dropped")
        with open("/proc/%d/status" % self.d.proc.pid) as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        nobody = int(subprocess.check_output(["id", "-u", "nobody"]).decode())
        nogroup = int(subprocess.check_output(["getent", "group", "nogroup"]).decode()
                      .split(":")[2])
        self.assertEqual({int(x) for x in status["Uid"].split()}, {nobody})
        self.assertEqual({int(x) for x in status["Gid"].split()}, {nogroup})
        self.assertEqual(status["Groups"].split(), [str(nogroup)])
        self.assertEqual(int(status["CapEff"], 16), 0)
        self.assertEqual(H.get(self.d.port, "/bytes/5").body, H.pattern(5))
        self.assertEqual(H.get(self.d.admin, "/stats").status, 200)

    def test_unknown_user_is_an_error_of_the_file(self):
        b1 = self.start_backend("b1")
        conf = self.write_config(H.yaml_config(0, {"web": self.pool(b1)}, admin=0,
                                               extra="user: no-such-user-here\n"))
        p = subprocess.run([H.DIMMER, "-t", "-c", conf], capture_output=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr.decode(), r"dimmer\.yaml:\d+:7: unknown user \"no-such-user-here\"")

    def test_unit_file_verifies(self):
        tool = shutil.which("systemd-analyze")
        if tool is None:
            self.skipTest("systemd-analyze not installed (package systemd)")
        with open(UNIT) as f:
            unit = f.read().replace("/usr/sbin/dimmer", os.path.abspath(H.DIMMER))
        # Only the documentation is not installed here: man pages are checked elsewhere.
        unit = "\n".join(line for line in unit.splitlines() if not line.startswith("Documentation="))
        path = self.path("dimmer.service")
        with open(path, "w") as f:
            f.write(unit + "\n")
        p = subprocess.run([tool, "verify", path], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())


if __name__ == "__main__":
    H.main()
