"""
GET /metrics on the admin listener: the Prometheus text format (0.0.4), each
family declared once with HELP and TYPE before its samples, and figures that
agree with what the clients did and what the backends saw: requests,
responses by status class, bytes, retries, connections, the duration
histogram, health and power states, agent reports by verdict, decisions.
promtool (Debian package prometheus) checks the text when it is installed;
the test says so when it is not.
"""
import hashlib
import hmac
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
KEY = b"metrics-test-key"


def parse(text):
    """{family: {"type": t, "samples": [(name, {label: value}, float)]}}, checking the format."""
    fams = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert NAME.match(name), line
            assert name not in fams, "family %s declared twice" % name
            fams[name] = {"type": None, "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            assert name == current, "TYPE of %s outside its HELP" % name
            assert typ in ("counter", "gauge", "histogram"), line
            fams[name]["type"] = typ
        elif line:
            m = SAMPLE.match(line)
            assert m, "bad sample line %r" % line
            name, _, labels, value = m.groups()
            base = current
            assert base is not None and (name == base or (
                fams[base]["type"] == "histogram" and name in
                (base + "_bucket", base + "_sum", base + "_count"))), \
                "sample %s outside its family (%s)" % (name, base)
            lab = {}
            if labels:
                pos = 0
                while pos < len(labels):
                    lm = LABEL.match(labels, pos)
                    assert lm, "bad labels in %r" % line
                    lab[lm.group(1)] = re.sub(r"\\(.)", lambda x: {"n": "\n"}.get(
                        x.group(1), x.group(1)), lm.group(2))
                    pos = lm.end()
            v = float(value)
            assert not math.isnan(v), line
            if fams[base]["type"] == "counter":
                assert name.endswith("_total") and v >= 0, line
            fams[base]["samples"].append((name, lab, v))
    return fams


def maybe(fams, name, **labels):
    """The value of the one sample of name with labels, or None when there is none."""
    family = name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[:-len(suffix)] in fams:
            family = name[:-len(suffix)]
    hits = [v for n, lab, v in fams.get(family, {"samples": []})["samples"]
            if n == name and all(lab.get(k) == str(x) for k, x in labels.items())]
    assert len(hits) <= 1, "%s %s: %d samples" % (name, labels, len(hits))
    return hits[0] if hits else None


def value(fams, name, **labels):
    """The value of the one sample of name with labels; there must be one."""
    v = maybe(fams, name, **labels)
    assert v is not None, "%s %s: no sample" % (name, labels)
    return v


class Scraping(H.DimmerTest):
    def scrape(self):
        r = H.get(self.d.admin, "/metrics", timeout=5)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8")
        text = r.body.decode()
        self.promtool(text)
        return parse(text)

    def promtool(self, text):
        tool = shutil.which("promtool")
        if tool is None:
            sys.stderr.write("  promtool not installed (apt-get install prometheus): "
                             "the format is checked by this test's own parser only\n")
            return
        p = subprocess.run([tool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        # Lint warnings go to stdout with rc 0 in some versions: none wanted.
        self.assertEqual(p.stdout.decode().strip() + p.stderr.decode().strip(), "")


class MetricsTest(Scraping):
    def test_traffic_is_counted_per_server_pool_and_listener(self):
        b1, b2 = self.start_backend("b1"), self.start_backend("b2")
        self.d = self.start_dimmer({"web": {"servers": [("b1", b1.port, {"max_conns": 50}),
                                                       ("b2", b2.port)],
                                            "passive": {"max_fails": 0}}}, workers=2)
        sent_out = 0
        with H.Conn(self.d.port) as c:  # keep-alive: pooled server connections
            for i in range(10):
                r = c.request("GET", "/bytes/%d" % (1000 + i))
                self.assertEqual(r.status, 200)
                sent_out += 1000 + i
            r = c.request("POST", "/echo", body=b"z" * 5000)
            self.assertEqual(r.body, b"z" * 5000)
            for _ in range(3):
                self.assertEqual(c.request("GET", "/status/404").status, 404)
            self.assertEqual(c.request("GET", "/status/503").status, 503)
        for _ in range(4):
            self.assertEqual(H.get(self.d.port, "/bytes/10").status, 200)
        # Answered by dimmer itself: a malformed request (never forwarded).
        with H.Conn(self.d.port) as c:
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            self.assertEqual(c.read_response(timeout=5).status, 400)
        total = 10 + 1 + 3 + 1 + 4
        # The last response reaches the client just before dimmer counts it.
        H.wait_until(lambda: sum(v for _, _, v in self.scrape()[
            "dimmer_server_responses_total"]["samples"]) == total, 5, "every response counted")
        m = self.scrape()
        seen = b1.requests() + b2.requests()
        self.assertEqual(seen, total)
        for s, be in (("b1", b1), ("b2", b2)):
            lab = {"pool": "web", "server": s}
            got = sum(value(m, "dimmer_server_responses_total", code=k, **lab)
                      for k in ("1xx", "2xx", "3xx", "4xx", "5xx", "none"))
            self.assertEqual(got, be.requests(), s)
            self.assertEqual(value(m, "dimmer_server_requests_total", **lab), be.requests())
            count = value(m, "dimmer_server_request_duration_seconds_count", **lab)
            self.assertEqual(count, got)
            buckets = [v for n, lab2, v in m["dimmer_server_request_duration_seconds"]["samples"]
                       if n.endswith("_bucket") and lab2["server"] == s]
            self.assertEqual(buckets, sorted(buckets))
            self.assertEqual(buckets[-1], count)
            self.assertEqual(value(m, "dimmer_server_request_duration_seconds_bucket",
                                   le="+Inf", **lab), count)
            self.assertEqual(value(m, "dimmer_server_status", state="up", **lab), 1)
            self.assertEqual(value(m, "dimmer_server_power_state", state="awake", **lab), 1)
            self.assertEqual(value(m, "dimmer_server_inflight_requests", **lab), 0)
        by_code = {k: sum(value(m, "dimmer_server_responses_total", pool="web", server=s, code=k)
                          for s in ("b1", "b2")) for k in ("2xx", "4xx", "5xx")}
        self.assertEqual(by_code, {"2xx": 15, "4xx": 3, "5xx": 1})
        listener = "%s:%d" % (H.HOST, self.d.port)
        self.assertEqual(value(m, "dimmer_listener_local_responses_total", listener=listener,
                               code="4xx"), 1)
        self.assertEqual(value(m, "dimmer_pool_local_responses_total", pool="web", code="4xx"), 0)
        self.assertEqual(value(m, "dimmer_server_max_conns", pool="web", server="b1"), 50)
        out = sum(value(m, "dimmer_server_bytes_out_total", pool="web", server=s)
                  for s in ("b1", "b2"))
        self.assertGreater(out, sent_out + 5000)
        bytes_in = sum(value(m, "dimmer_server_bytes_in_total", pool="web", server=s)
                       for s in ("b1", "b2"))
        self.assertGreater(bytes_in, 5000)
        self.assertEqual(value(m, "dimmer_listener_requests_total", listener=listener), total + 1)
        self.assertEqual(value(m, "dimmer_listener_connections_total", listener=listener), 6)
        H.wait_until(lambda: value(self.scrape(), "dimmer_listener_connections",
                                   listener=listener) == 0, 5, "the client connections closed")
        # Pooled keep-alive connections: idle now, open to the host.
        idle = sum(value(m, "dimmer_server_idle_connections", pool="web", server=s)
                   for s in ("b1", "b2"))
        self.assertGreaterEqual(idle, 1)
        conns = sum(value(m, "dimmer_host_server_connections", host="%s:%d" % (H.HOST, b.port))
                    for b in (b1, b2))
        self.assertGreaterEqual(conns, idle)
        self.assertEqual(value(m, "dimmer_workers"), 2)
        self.assertEqual(value(m, "dimmer_config_generation"), 1)
        self.assertAlmostEqual(value(m, "dimmer_start_time_seconds"), time.time(), delta=120)

    def test_a_refused_server_counts_a_retry_and_its_failure(self):
        b1 = self.start_backend("b1")
        dead = socket.socket()
        dead.bind((H.HOST, 0))  # bound, not listening: connections are refused
        self.addCleanup(dead.close)
        self.d = self.start_dimmer({"web": {"servers": [("dead", dead.getsockname()[1]),
                                                       ("b1", b1.port)],
                                            "passive": {"max_fails": 0}}})
        for _ in range(4):
            self.assertEqual(H.get(self.d.port, "/bytes/5").status, 200)
        H.wait_until(lambda: value(self.scrape(), "dimmer_server_requests_total", pool="web",
                                   server="b1") == 4, 5, "the four counted")
        m = self.scrape()
        # Round robin sends at least every other request to the dead server
        # first (its retry moves the turn on too); each such one is a retry on b1.
        retries = value(m, "dimmer_server_retries_total", pool="web", server="b1")
        self.assertGreaterEqual(retries, 2)
        self.assertEqual(value(m, "dimmer_server_failures_total", pool="web", server="dead"),
                         retries)
        self.assertEqual(value(m, "dimmer_host_requests_started_total",
                               host="%s:%d" % (H.HOST, b1.port)), 4)
        self.assertEqual(value(m, "dimmer_server_requests_total", pool="web", server="dead"), 0)

    def test_cut_short_and_listener_answers(self):
        b1 = self.start_backend("b1")
        self.d = self.start_dimmer({"web": self.pool(b1, passive={"max_fails": 0})})
        # The client goes away mid-response: counted as none, not as a 2xx.
        with H.Conn(self.d.port) as c:
            c.send(H.build_request("GET", "/bytes/%d" % (64 << 20)))
            c.sock.recv(1000)
        lab = {"pool": "web", "server": "b1"}
        H.wait_until(lambda: value(self.scrape(), "dimmer_server_responses_total", code="none",
                                   **lab) == 1, 10, "the cut response counted")
        m = self.scrape()
        self.assertEqual(value(m, "dimmer_server_responses_total", code="2xx", **lab), 0)
        self.assertEqual(value(m, "dimmer_server_request_duration_seconds_count", **lab), 1)
        # A bad head is the listener's, not a pool's.
        with H.Conn(self.d.port) as c:
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            self.assertEqual(c.read_response(timeout=5).status, 400)
        listener = "%s:%d" % (H.HOST, self.d.port)
        H.wait_until(lambda: value(self.scrape(), "dimmer_listener_local_responses_total",
                                   listener=listener, code="4xx") == 1, 5, "the 400 counted")
        m = self.scrape()
        self.assertEqual(value(m, "dimmer_pool_local_responses_total", pool="web", code="4xx"), 0)
        self.assertEqual(value(m, "dimmer_listener_requests_total", listener=listener), 2)

    def test_names_with_quotes_and_backslashes(self):
        # Names from a config may hold any character: /stats stays JSON and
        # /metrics stays the text format (both escape them).
        b1 = self.start_backend("b1")
        conf = ('listen: ["127.0.0.1:0"]\nadmin: 127.0.0.1:0\n'
                'pools:\n  "we\\"b \\\\ 1":\n    servers:\n'
                '      - {name: "a\\"q\\\\z", address: "127.0.0.1:%d"}\n' % b1.port)
        self.d = self.start_dimmer_conf(self.write_config(conf))
        self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
        stats = self.d.admin_stats()  # parses as JSON
        self.assertEqual(stats["pools"][0]["name"], 'we"b \\ 1')
        self.assertEqual(stats["pools"][0]["servers"][0]["name"], 'a"q\\z')
        H.wait_until(lambda: maybe(self.scrape(), "dimmer_server_requests_total",
                                   pool='we"b \\ 1', server='a"q\\z') == 1, 5, "the request")

    def test_health_states_follow_the_checks(self):
        b1, b2 = self.start_backend("b1"), self.start_backend("b2")
        self.d = self.start_dimmer({"web": self.pool(b1, b2, health_check={
            "interval": "200ms", "timeout": "200ms", "rise": 1, "fall": 1})})
        b2.proc.kill()

        def b2_down():
            m = self.scrape()
            return value(m, "dimmer_server_status", pool="web", server="b2", state="down") == 1

        H.wait_until(b2_down, 10, "b2 down in /metrics")
        m = self.scrape()
        self.assertEqual(value(m, "dimmer_server_status", pool="web", server="b2", state="up"), 0)
        self.assertEqual(value(m, "dimmer_server_status", pool="web", server="b1", state="up"), 1)

    def test_a_crowd_of_reads_gets_whole_answers_and_the_next_read_new_figures(self):
        b1 = self.start_backend("b1")
        self.d = self.start_dimmer({"web": self.pool(b1, passive={"max_fails": 0})})
        own = ("%s:%d" % (H.HOST, self.d.admin)).encode()
        built = value(self.scrape(), "dimmer_metrics_bodies_total")
        kinds = [("GET", "/metrics"), ("GET", "/stats"), ("GET", "/metrics"), ("GET", "/power"),
                 ("HEAD", "/metrics"), ("HEAD", "/stats")]
        # Stopped, dimmer reads every request of the crowd in one turn once it
        # goes on: one body a page for all of them, its last holder freed last.
        self.d.proc.signal(signal.SIGSTOP)
        try:
            conns = [H.Conn(self.d.admin) for _ in range(24)]
            for i, c in enumerate(conns):
                self.addCleanup(c.close)
                c.send(b"%s %s HTTP/1.1\r\nHost: %s\r\n\r\n"
                       % (kinds[i % 6][0].encode(), kinds[i % 6][1].encode(), own))
        finally:
            self.d.proc.signal(signal.SIGCONT)
        bodies = {page: set() for _, page in kinds}
        lengths = {page: set() for _, page in kinds}
        for i in reversed(range(len(conns))):  # read last first: any order of the frees
            method, page = kinds[i % 6]
            r = conns[i].read_response(timeout=10, head_request=method == "HEAD")
            self.assertEqual(r.status, 200, page)
            lengths[page].add(int(r.header("content-length")))
            if method == "GET":
                self.assertEqual(len(r.body), int(r.header("content-length")))
                bodies[page].add(r.body)
            conns[i].close()
        for page in bodies:
            self.assertEqual(len(bodies[page]), 1, page)
            self.assertEqual(lengths[page], {len(b) for b in bodies[page]}, page)
        json.loads(bodies["/stats"].pop())
        json.loads(bodies["/power"].pop())
        m = parse(bodies["/metrics"].pop().decode())
        self.assertEqual(value(m, "dimmer_metrics_bodies_total"), built + 1)
        self.assertEqual(value(m, "dimmer_server_requests_total", pool="web", server="b1"), 0)
        # A scrape after the crowd's answers is built anew: it sees a request
        # made since (the response reaches the client just before it counts).
        self.assertEqual(H.get(self.d.port, "/bytes/10").status, 200)
        H.wait_until(lambda: value(self.scrape(), "dimmer_server_requests_total", pool="web",
                                   server="b1") == 1, 5, "the request counted")
        self.assertGreater(value(self.scrape(), "dimmer_metrics_bodies_total"), built + 1)


def report(name, seq, est_w=55.5, tcp=7, key=KEY):
    signed = ("dimmer-agent/1 name=%s seq=%d ts=%d est_w=%.1f measured_w=- tcp=%d" %
              (name, seq, int(time.time() * 1000), est_w, tcp)).encode()
    return signed + b" hmac=" + hmac.new(key, signed, hashlib.sha256).hexdigest().encode()


class PowerMetricsTest(Scraping):
    def test_power_figures_and_reports(self):
        key = self.path("agent.key")
        with open(key, "wb") as f:
            f.write(KEY + b"\n")
        extra = "power:\n  metrics: 127.0.0.1:0\n  key_file: %s\n  report_max_age: 3s\n" % key
        b1, b2 = self.start_backend("b1"), self.start_backend("b2")
        conf = H.yaml_config(0, {"web": {"servers": [("b1", b1.port), ("b2", b2.port)]}},
                             admin=0, extra=extra)
        conf = conf.replace("  web:\n", "  web:\n    power: {policy: always-on, "
                                        "report_timeout: 30s, trend_interval: 200ms}\n")
        self.d = self.start_dimmer_conf(self.write_config(conf))
        port = next(p for kind, _, p in self.d.lines if kind == "metrics")
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        first = report("b1", 1, est_w=61.5)
        tx.sendto(first, (H.HOST, port))
        tx.sendto(first, (H.HOST, port))                              # replay
        tx.sendto(report("b1", 2, key=b"forged"), (H.HOST, port))     # bad_hmac
        tx.sendto(b"dimmer-agent/1 nonsense", (H.HOST, port))         # malformed

        def counted():
            m = self.scrape()
            return [value(m, "dimmer_power_reports_total", verdict=v)
                    for v in ("ok", "replay", "bad_hmac", "malformed")] == [1, 1, 1, 1]

        H.wait_until(counted, 10, "the reports counted by verdict")
        H.wait_until(lambda: maybe(self.scrape(), "dimmer_power_server_watts", pool="web",
                                   server="b1", source="agent") == 61.5, 10, "b1's agent watts")
        m = self.scrape()
        self.assertEqual(value(m, "dimmer_power_server_watts", pool="web", server="b2",
                               source="proxy"), 40.0)
        self.assertEqual(value(m, "dimmer_power_server_state", pool="web", server="b1",
                               state="active"), 1)
        self.assertEqual(value(m, "dimmer_power_pool_active_servers", pool="web"), 2)
        self.assertEqual(value(m, "dimmer_power_pool_servers", pool="web"), 2)
        e1 = value(m, "dimmer_power_server_energy_wh_total", pool="web", server="b1")

        def decided():
            m = self.scrape()
            return sum(v for _, lab, v in m["dimmer_power_decisions_total"]["samples"])

        H.wait_until(lambda: decided() >= 2, 10, "two decisions of the policy")
        m = self.scrape()
        # always-on keeps both on: every decision is a stay.
        samples = m["dimmer_power_decisions_total"]["samples"]
        self.assertGreaterEqual(sum(v for _, lab, v in samples if lab["action"] == "stay"), 2)
        self.assertEqual(sum(v for _, lab, v in samples if lab["action"] != "stay"), 0)
        # Energy only grows.
        H.wait_until(lambda: value(self.scrape(), "dimmer_power_server_energy_wh_total",
                                   pool="web", server="b1") > e1, 10, "energy to grow")


if __name__ == "__main__":
    H.main()
