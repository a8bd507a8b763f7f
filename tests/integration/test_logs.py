"""
The logs as an operator meets them: the access log in nginx's combined
format, the error log's level (log_level, changed by a reload), and SIGUSR1
reopening both files after logrotate moved them, losing no line.
"""
import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

COMBINED = re.compile(r'^(\S+) - - \[(\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4})\] '
                      r'"([^"]*)" (\d{3}) (\d+) "([^"]*)" "([^"]*)"$')


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class LogsTest(H.DimmerTest):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_backend("b1")

    def test_combined_format(self):
        log = self.path("access.log")
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   extra='access_log: {path: "%s", format: combined}\n' % log)
        with H.Conn(self.d.port) as c:
            r = c.request("GET", "/bytes/10?a=b", headers=[("Referer", "http://ref.example/x"),
                                                           ("User-Agent", 'agent "q" \\ 1.0')])
            self.assertEqual(r.status, 200)
            self.assertEqual(c.request("GET", "/status/404").status, 404)
            self.assertEqual(c.request("HEAD", "/bytes/100").status, 200)
        with H.Conn(self.d.port) as c:  # answered by dimmer itself, never forwarded
            c.send(b"GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            self.assertEqual(c.read_response(timeout=5).status, 400)
        H.wait_until(lambda: len(lines(log)) == 4, 5, "four access-log lines")
        got = [COMBINED.match(line) for line in lines(log)]
        self.assertTrue(all(got), lines(log))
        first = got[0].groups()
        self.assertEqual(first[0], "127.0.0.1")
        self.assertEqual(first[2:], ("GET /bytes/10?a=b HTTP/1.1", "200", "10",
                                     "http://ref.example/x", 'agent \\x22q\\x22 \\x5C 1.0'))
        # Body bytes only ($body_bytes_sent): none for a HEAD; "-" for no referer or agent.
        self.assertEqual(got[1].group(4), "404")
        self.assertEqual(got[2].groups()[2:], ("HEAD /bytes/100 HTTP/1.1", "200", "0", "-", "-"))
        bad = got[3].groups()
        self.assertEqual(bad[3], "400")
        self.assertGreater(int(bad[4]), 0)

    def test_server_names_cannot_break_a_line(self):
        # A server's name is any YAML string: the JSON line stays JSON, the
        # default line keeps its fields (a space or a control byte is '_').
        for fmt in ("json", "default"):
            log = self.path("access-%s.log" % fmt)
            conf = ('listen: ["127.0.0.1:0"]\nadmin: 127.0.0.1:0\n'
                    'access_log: {path: "%s", format: %s}\n'
                    'pools:\n  web:\n    servers:\n'
                    '      - {name: "a\\"b c\\tz", address: "127.0.0.1:%d"}\n'
                    % (log, fmt, self.b1.port))
            self.d = self.start_dimmer_conf(self.write_config(conf, "dimmer-%s.yaml" % fmt))
            self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
            H.wait_until(lambda: len(lines(log)) == 1, 5, "one access-log line")
            line = lines(log)[0]
            if fmt == "json":
                self.assertEqual(json.loads(line)["upstream"], 'a"b c\tz')
            else:
                fields = line.split(" ")
                self.assertEqual(len(fields), 10, line)
                self.assertEqual(fields[7], 'a"b_c_z')

    def test_names_cannot_break_an_error_log_line(self):
        # The error log too: a pool or server name with a newline stays on the
        # record's own line (control bytes are '_'), so nothing can pass for
        # a record of its own.
        conf = ('listen: ["127.0.0.1:0"]\nadmin: 127.0.0.1:0\n'
                'pools:\n  "p\\nwarn: x":\n    servers:\n'
                '      - {name: "s\\r\\nerror: y", address: "127.0.0.1:1"}\n')
        self.d = self.start_dimmer_conf(self.write_config(conf, "names.yaml"))
        self.assertEqual(H.get(self.d.port, "/").status, 502)  # nothing listens on port 1
        H.wait_until(lambda: "p_warn: x/s__error: y" in self.d.proc.stderr(), 5,
                     "the failure logged with the names on one line")
        for line in self.d.proc.stderr().splitlines():
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\S+ dimmer\[\d+\]: ", line)

    def test_a_flood_of_bad_requests_does_not_flood_the_error_log(self):
        # One client sending bad requests as fast as it can: at most 20 lines
        # a second a worker say what each was, one more says how many were
        # left out (it was a line each: 44,000 lines in 3 s). The access log has every one.
        log = self.path("access.log")
        self.d = self.start_dimmer({"web": self.pool(self.b1)},
                                   extra='access_log: {path: "%s", format: combined}\n' % log)
        n = 300
        for _ in range(n):
            with H.Conn(self.d.port) as c:
                self.assertEqual(c.request("GET", "/bytes/1", host=None).status, 400)
        shown = re.compile(r"client 127\.0\.0\.1: 400 ")
        left = re.compile(r"worker 0: (\d+) more client errors \(4xx\) not logged")

        def counted():
            err = self.d.proc.stderr()
            return (len(shown.findall(err)), sum(int(m) for m in left.findall(err)))

        H.wait_until(lambda: sum(counted()) == n, 5, "every bad request shown or counted")
        logged, dropped = counted()
        self.assertGreater(dropped, 0)
        self.assertGreaterEqual(logged, 20)
        H.wait_until(lambda: len(lines(log)) == n, 5, "an access log line each")
        self.assertTrue(all(COMBINED.match(x).group(4) == "400" for x in lines(log)))

    def test_log_level_and_its_reload(self):
        conf = H.yaml_config(0, {"web": self.pool(self.b1)}, admin=0, extra="log_level: warn\n")
        path = self.write_config(conf)
        self.d = self.start_dimmer_conf(path)
        self.assertEqual(H.get(self.d.port, "/bytes/1").status, 200)
        err = self.d.proc.stderr()
        self.assertNotIn("info: listening on", err)
        self.assertNotIn(": info: ", err)
        # A bad level is an error with its place, and the reload keeps warn.
        with open(path, "w") as f:
            f.write(conf.replace("log_level: warn", "log_level: loud"))
        self.d.proc.p.send_signal(signal.SIGHUP)
        H.wait_until(lambda: "log_level" in self.d.proc.stderr(), 5, "the bad level reported")
        self.assertRegex(self.d.proc.stderr(), r"dimmer\.yaml:\d+:\d+: .*log_level")
        with open(path, "w") as f:
            f.write(conf.replace("log_level: warn", "log_level: info"))
        self.d.proc.p.send_signal(signal.SIGHUP)
        H.wait_until(lambda: "info: configuration reloaded" in self.d.proc.stderr(), 5,
                     "the reload logged at info")

    def test_sigusr1_reopens_both_logs(self):
        access, error = self.path("access.log"), self.path("error.log")
        self.d = self.start_dimmer(
            {"web": self.pool(self.b1)},
            extra='access_log: "%s"\nerror_log: "%s"\n' % (access, error))
        self.assertEqual(H.get(self.d.port, "/bytes/1").status, 200)
        H.wait_until(lambda: len(lines(access)) == 1, 5, "the first access line")
        self.assertTrue(any("listening on" in line for line in lines(error)))
        # logrotate: move both away, then SIGUSR1.
        os.rename(access, access + ".1")
        os.rename(error, error + ".1")
        self.assertEqual(H.get(self.d.port, "/bytes/2").status, 200)  # into the moved file
        H.wait_until(lambda: len(lines(access + ".1")) == 2, 5, "the second line, moved file")
        self.d.proc.p.send_signal(signal.SIGUSR1)
        H.wait_until(lambda: any("SIGUSR1: logs reopened" in line for line in lines(error)), 5,
                     "the new error log")
        self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
        H.wait_until(lambda: len(lines(access)) == 1, 5, "a line in the new access log")
        self.assertIn('"GET /bytes/3 HTTP/1.1" 200', lines(access)[0])
        self.assertEqual(len(lines(access + ".1")), 2)
        self.assertFalse(any("reopened" in line for line in lines(error + ".1")))
        # Still serving, nothing logged twice.
        self.assertEqual(H.get(self.d.port, "/bytes/4").status, 200)
        H.wait_until(lambda: len(lines(access)) == 2, 5, "the fourth line")


if __name__ == "__main__":
    H.main()
