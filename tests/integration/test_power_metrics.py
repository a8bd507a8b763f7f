"""
The power manager's metrics intake and operator surface, with real
processes: agent reports over UDP to dimmer's metrics listener (signed here
with Python's hmac, and by a real dimmer-agent), each kind of bad report
dropped and counted by its reason in /stats and /power, the estimate falling
back to the proxy's counters when the agent goes silent, and the admin's
power actions: a bearer token when one is configured, pin and unpin, a
policy chosen by hand (kept over a reload, then given back), 409 for
a host that is not power-managed.

The actuators against real nodes (dimmer-backend): Wake-on-LAN (the magic
packet reaches the node's receiver), http (POST /sleep on its control; with
a bearer token the node asks for, refusing a missing or wrong one),
command (kill -USR1 / -USR2 on its pid, which sleep and wake it; a command
that outlives command_timeout is killed and counted as failed). A reload
with a bad power block keeps the running one, with file:line:column.
"""
import hashlib
import hmac
import json
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as H  # noqa: E402

KEY = b"the agents' key"
TOKEN = "s3cret-token"


def report(name, seq, ts_ms=None, est_w=55.5, tcp=7, key=KEY, measured="-"):
    ts = int(time.time() * 1000) if ts_ms is None else ts_ms
    signed = ("dimmer-agent/1 name=%s seq=%d ts=%d est_w=%.1f measured_w=%s tcp=%d" %
              (name, seq, ts, est_w, measured, tcp)).encode()
    return signed + b" hmac=" + hmac.new(key, signed, hashlib.sha256).hexdigest().encode()


class PowerMetricsTest(H.DimmerTest):
    def start(self, token=False, report_timeout="1s", power=""):
        key = self.path("agent.key")
        with open(key, "wb") as f:
            f.write(KEY + b"\n")
        extra = "power:\n  metrics: 127.0.0.1:0\n  key_file: %s\n  report_max_age: 3s\n" % key
        if token:
            tok = self.path("token")
            with open(tok, "w") as f:
                f.write(TOKEN + "\n")
            extra += "  admin_token_file: %s\n" % tok
        self.b1 = self.start_backend("b1")
        self.b2 = self.start_backend("b2")
        self.other = self.start_backend("other")
        conf = H.yaml_config(0, {
            "web": {"balance": "leastconn", "servers": [("b1", self.b1.port),
                                                       ("b2", self.b2.port)]},
            "plain": {"servers": [("o", self.other.port)]},
        }, admin=0, extra=extra)
        # The power block of pool web (always-on: nothing is slept under the test).
        conf = conf.replace("  web:\n", "  web:\n    power: {policy: always-on, report_timeout: %s%s}\n"
                            % (report_timeout, power))
        self.d = self.start_dimmer_conf(self.write_config(conf))
        self.metrics = next(p for kind, _, p in self.d.lines if kind == "metrics")
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(self.tx.close)

    def send(self, data):
        self.tx.sendto(data, (H.HOST, self.metrics))

    def power(self):
        r = H.get(self.d.admin, "/power", timeout=5.0)
        self.assertEqual(r.status, 200)
        return json.loads(r.body)

    def server(self, name):
        return next(s for s in self.power()["pools"][0]["servers"] if s["name"] == name)

    def reports(self):
        return self.d.admin_stats()["reports"]

    def test_reports_are_checked_and_counted(self):
        self.start()
        self.assertEqual(self.power()["pools"][0]["policy"], "always-on")
        t0 = int(time.time() * 1000)
        first = report("b1", 1, ts_ms=t0, est_w=61.5, tcp=9)
        self.send(first)
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "the report to be accepted")
        b1 = self.server("b1")
        self.assertEqual(b1["agent"]["est_w"], 61.5)
        self.assertEqual(b1["agent"]["tcp"], 9)
        self.assertEqual(b1["agent"]["seq"], 1)
        H.wait_until(lambda: self.server("b1")["watts_source"] == "agent", 5, "agent watts")
        self.assertEqual(self.server("b1")["watts"], 61.5)
        # The TCP count of the seed's rules is the proxy's own (tcp: proxy).
        self.assertEqual(self.server("b1")["tcp_source"], "proxy")
        self.assertEqual(self.server("b2")["watts_source"], "proxy")
        # One of each bad kind: none of them changes what the proxy believes.
        self.send(report("b1", 2, est_w=99, key=b"forged"))          # bad_hmac
        self.send(report("nobody", 1))                               # unknown
        self.send(first)                                             # replay
        self.send(report("b1", 5, est_w=99, ts_ms=t0 - 1))            # replay:
        # an older timestamp than the one taken, whatever its sequence number
        self.send(report("b1", 3, est_w=99, ts_ms=int(time.time() * 1000) - 60000))  # stale
        self.send(b"dimmer-agent/1 name=b1 seq=x")                   # malformed
        self.send(b"\xff" * 2000)                                    # malformed (too long)
        self.send(b"")                                               # malformed (empty)
        # Signed with the key but out of the format's bounds: a sequence
        # number whose thousands are above its timestamp (one such report would
        # make every later one a replay, a restarted agent's too), and more
        # connections than a machine holds (tcp_max: auto would learn it).
        now_ms = int(time.time() * 1000)
        self.send(report("b1", now_ms * 1000 + 1000, ts_ms=now_ms))  # malformed
        self.send(report("b1", 2**64 - 1))                           # malformed
        self.send(report("b1", 4, tcp=2**64 - 1))                    # malformed
        want = {"ok": 1, "bad_hmac": 1, "unknown": 1, "replay": 2, "stale": 1, "malformed": 6}
        H.wait_until(lambda: self.reports() == want, 10, "the drops to be counted: %s" % want)
        self.assertEqual(self.power()["reports"], want)
        self.assertEqual(self.server("b1")["agent"]["est_w"], 61.5)
        self.assertEqual(self.server("b1")["agent"]["seq"], 1)
        # Silent for longer than report_timeout: the proxy's estimate again.
        H.wait_until(lambda: self.server("b1")["watts_source"] == "proxy", 10,
                     "the estimate to fall back to the proxy's counters")
        self.assertEqual(self.server("b1")["watts"], 40.0)  # idle: 0 in flight, 0 bound

    def test_sigusr2_hands_the_metrics_socket_over(self):
        # The new process of a SIGUSR2 reads the reports on the same port
        # (the socket handed over, never closed in between); what the old one
        # believed (a sequence number) starts afresh, as at a restart.
        self.start()
        self.send(report("b1", 1, est_w=61.5))
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "the report to be accepted")
        self.sigusr2(self.d, self.d.proc.pid)
        self.assertIn("handing it 1 listening socket, the admin's, the metrics'",
                      self.d.proc.stderr())
        self.assertEqual(H.read_ports_file(self.d.ports_file), self.d.lines)
        self.assertEqual(self.reports()["ok"], 0)
        self.send(report("b1", 1, est_w=62.5))
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "the report to reach the new process")
        self.assertEqual(self.server("b1")["agent"]["est_w"], 62.5)

    def test_a_real_agent_reports(self):
        self.start(report_timeout="5s")
        key = self.path("agent.key")
        self.start_proc("agent", [H.DIMMER_AGENT, "--name", "b2", "--to",
                                  "%s:%d" % (H.HOST, self.metrics), "--key-file", key,
                                  "--ports", str(self.b2.port), "--interval", "100",
                                  "--idle-w", "30", "--sys-w", "70", "--count", "5"])
        started_us = time.time() * 1e6
        H.wait_until(lambda: self.reports()["ok"] == 5, 15, "five reports accepted")
        a = self.server("b2")["agent"]
        # The agent numbers from its start time in microseconds: the fifth is 5 above it.
        self.assertLess(abs(a["seq"] - 5 - started_us), 60e6)
        # A restarted agent goes on above: its reports are taken, not replays.
        self.start_proc("agent-again", [H.DIMMER_AGENT, "--name", "b2", "--to",
                                        "%s:%d" % (H.HOST, self.metrics), "--key-file", key,
                                        "--ports", str(self.b2.port), "--count", "1"])
        H.wait_until(lambda: self.reports()["ok"] == 6, 15, "the restarted agent's report")
        self.assertEqual(self.reports()["replay"], 0)
        self.assertGreater(self.server("b2")["agent"]["seq"], a["seq"])
        self.assertGreaterEqual(a["est_w"], 30)
        self.assertLessEqual(a["est_w"], 70)
        self.assertEqual(sum(self.reports().values()), 6)

    def reload_conf(self, edit):
        with open(self.d.conf_path) as f:
            text = f.read()
        with open(self.d.conf_path, "w") as f:
            f.write(edit(text))
        gen = self.d.admin_stats()["generation"]
        self.d.proc.signal(H.signal.SIGHUP)
        H.wait_until(lambda: self.d.admin_stats()["generation"] > gen, 10, "the reload")

    def test_a_new_key_starts_sequences_afresh_and_no_key_trusts_nothing(self):
        self.start(report_timeout="5s")
        self.send(report("b1", 1000))
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "the report to be accepted")
        # A reload with a new key: reports signed with the old one are
        # refused, and the sequence numbers taken under it are forgotten.
        key = self.path("agent.key")
        with open(key, "wb") as f:
            f.write(b"a new key\n")
        self.reload_conf(lambda t: t)
        self.send(report("b1", 1001))
        H.wait_until(lambda: self.reports()["bad_hmac"] == 1, 10, "the old key's report refused")
        self.send(report("b1", 5, key=b"a new key"))
        H.wait_until(lambda: self.reports()["ok"] == 2, 10, "the new key's report")
        self.assertEqual(self.reports()["replay"], 0)
        self.assertEqual(self.server("b1")["agent"]["seq"], 5)
        # A reload without the power block (no key): the listener stays until
        # a restart, and nothing it gets is trusted, a report signed with the
        # empty key (which HMAC takes) included.
        self.reload_conf(lambda t: re.sub(r"(?m)^power:\n(  .*\n)+", "", t))
        self.assertNotIn("key_file", open(self.d.conf_path).read())
        self.send(report("b1", 6, key=b"a new key"))
        self.send(report("b1", 7, key=b""))
        H.wait_until(lambda: self.reports()["bad_hmac"] == 3, 10, "both refused")
        self.assertEqual(self.reports()["ok"], 2)
        log = self.d.proc.stderr()
        self.assertIn("power metrics listener changes take effect at the next restart", log)
        self.assertIn("every agent report is dropped", log)

    def test_a_server_with_its_own_key_takes_reports_signed_with_it_only(self):
        self.start(report_timeout="5s")
        self.send(report("b2", 1000))
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "the shared key's report")
        own = self.path("b2.key")
        with open(own, "wb") as f:
            f.write(b"b2's own key\n")
        entry = '{name: b2, address: "127.0.0.1:%d"}' % self.b2.port
        self.reload_conf(lambda t: t.replace(entry, entry[:-1] + ", power: {key_file: %s}}" % own))
        # b2 takes its own key only, numbered afresh; b1 still the shared one,
        # which no longer speaks for b2 (a backend holding it cannot pass
        # for b2), nor b2's for b1.
        self.send(report("b2", 1001))
        self.send(report("b1", 1, key=b"b2's own key"))
        H.wait_until(lambda: self.reports()["bad_hmac"] == 2, 10, "both refused")
        self.send(report("b2", 3, key=b"b2's own key"))
        self.send(report("b1", 2))
        H.wait_until(lambda: self.reports()["ok"] == 3, 10, "b2's own and b1's shared key's")
        self.assertEqual((self.server("b1")["agent"]["seq"], self.server("b2")["agent"]["seq"]),
                         (2, 3))
        self.assertEqual(self.reports()["replay"], 0)
        # Back to the shared key: b2's sequence starts afresh again.
        self.reload_conf(lambda t: re.sub(r", power: \{key_file: [^}]*\}", "", t))
        self.send(report("b2", 1))
        H.wait_until(lambda: self.reports()["ok"] == 4, 10, "the shared key's again")
        self.assertEqual(self.reports()["bad_hmac"], 2)

    def test_tcp_max_auto_is_learned_from_the_reports_and_kept_on_reload(self):
        # The agents' TCP counts (tcp: agent) against their power: b1 at half
        # of its span (idle 40 W, full 70 W) with 60 connections, b2 at a
        # quarter with 30: 120 connections a server at full power. b2's
        # reports then say it is saturated (70 W) with 10: left out.
        self.start(report_timeout="5s",
                   power=", tcp_max: auto, tcp: agent, trend_interval: 100ms")
        pool = self.power()["pools"][0]
        self.assertEqual((pool["tcp_max_source"], pool["tcp_max"]), ("learning", 200))
        seq = [0]

        def send_both(b2_w, b2_tcp):
            seq[0] += 1
            self.send(report("b1", seq[0], est_w=55, tcp=60))
            self.send(report("b2", seq[0], est_w=b2_w, tcp=b2_tcp))

        def learned():
            send_both(47.5, 30)
            return self.power()["pools"][0]["tcp_max_source"] == "learned"

        H.wait_until(learned, 15, "tcp_max to be learned")
        self.assertAlmostEqual(self.power()["pools"][0]["tcp_max"], 120, delta=0.5)
        H.wait_until(lambda: send_both(70, 10) or self.server("b2")["watts"] == 70, 10,
                     "b2's saturated reports")
        # Half a second of them: trend readings every 100 ms take them in.
        for _ in range(10):
            send_both(70, 10)
            time.sleep(0.05)
        self.assertEqual(self.server("b2")["watts"], 70)
        self.assertAlmostEqual(self.power()["pools"][0]["tcp_max"], 120, delta=0.5)
        # A reload of the same config keeps what was learned.
        gen = self.d.admin_stats()["generation"]
        self.d.proc.signal(H.signal.SIGHUP)
        H.wait_until(lambda: self.d.admin_stats()["generation"] > gen, 10, "the reload")
        pool = self.power()["pools"][0]
        self.assertEqual(pool["tcp_max_source"], "learned")
        self.assertAlmostEqual(pool["tcp_max"], 120, delta=0.5)

    def test_operator_actions_need_the_token(self):
        self.start(token=True)
        addr = "127.0.0.1:%d" % self.b1.port
        r = H.request(self.d.admin, "POST", "/hosts/%s/maint" % addr)
        self.assertEqual(r.status, 401, r.body)
        r = H.request(self.d.admin, "POST", "/hosts/%s/maint" % addr,
                      headers=[("Authorization", "Bearer wrong")])
        self.assertEqual(r.status, 401, r.body)
        self.assertEqual(self.server("b1")["state"], "active")
        auth = [("Authorization", "Bearer " + TOKEN)]
        r = H.request(self.d.admin, "POST", "/hosts/%s/maint" % addr, headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(json.loads(r.body)["acked"], 1)
        self.assertEqual(self.server("b1")["state"], "maint")
        self.assertTrue(self.server("b1")["held"])
        # Out of service: every request goes to b2.
        before = self.b1.requests()
        for _ in range(10):
            self.assertEqual(H.get(self.d.port, "/").status, 200)
        self.assertEqual(self.b1.requests(), before)
        r = H.request(self.d.admin, "POST", "/hosts/%s/ready" % addr, headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.server("b1")["state"], "active")
        self.assertFalse(self.server("b1")["held"])
        # A host of a pool without power management has no power actions.
        r = H.request(self.d.admin, "POST", "/hosts/127.0.0.1:%d/sleep" % self.other.port,
                      headers=auth)
        self.assertEqual(r.status, 409, r.body)
        # Pin and unpin; GET is not allowed, an unknown pool is 404.
        r = H.request(self.d.admin, "POST", "/power/web/pin?servers=1", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.power()["pools"][0]["pinned"], 1)
        self.assertEqual(H.request(self.d.admin, "POST", "/power/nope/pin?servers=1",
                                   headers=auth).status, 404)
        self.assertEqual(H.request(self.d.admin, "POST", "/power/web/pin?servers=x",
                                   headers=auth).status, 400)
        # More servers than the pool has is refused, saying how many it has.
        r = H.request(self.d.admin, "POST", "/power/web/pin?servers=50", headers=auth)
        self.assertEqual(r.status, 400, r.body)
        self.assertIn(b"has 2 servers", r.body)
        self.assertEqual(self.power()["pools"][0]["pinned"], 1)
        # A token with more or fewer bytes than the configured one is not it.
        for wrong in (TOKEN + "x", TOKEN[:-1], "x" + TOKEN):
            r = H.request(self.d.admin, "POST", "/power/web/unpin",
                          headers=[("Authorization", "Bearer " + wrong)])
            self.assertEqual(r.status, 401, (wrong, r.body))
        self.assertEqual(self.power()["pools"][0]["pinned"], 1)
        self.assertEqual(H.get(self.d.admin, "/power/web/pin").status, 405)
        # Another policy by hand (pinned still, so that nothing sleeps): it
        # runs, /power says whose choice it is, and it outlasts a reload.
        r = H.request(self.d.admin, "POST", "/power/web/policy?name=multi", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        pool = self.power()["pools"][0]
        self.assertEqual((pool["policy"], pool["policy_source"], pool["config_policy"]),
                         ("multi", "operator", "always-on"))
        r = H.request(self.d.admin, "POST", "/power/web/policy?name=mutli", headers=auth)
        self.assertEqual(r.status, 400, r.body)
        self.assertIn(b"boot-aware", r.body)  # the policies there are
        self.assertEqual(H.request(self.d.admin, "POST", "/power/web/policy?multi",
                                   headers=auth).status, 400)
        # A query is one known parameter, its value percent-decoded: a second
        # parameter or an unknown one is refused, never read as none.
        for target in ("/power/web/policy?name=always-on&x=1", "/power/web/policy?nam=always-on",
                       "/power/web/pin?servers=2&servers=1", "/power/web/pin?servers=2;x",
                       "/power/web/unpin?now=1", "/power/web/policy?name=%zz",
                       "/hosts/%s/drain?x=1" % addr):
            r = H.request(self.d.admin, "POST", target, headers=auth)
            self.assertEqual(r.status, 400, (target, r.body))
        self.assertEqual((self.power()["pools"][0]["policy"], self.power()["pools"][0]["pinned"]),
                         ("multi", 1))
        self.assertEqual(self.server("b1")["state"], "active")
        r = H.request(self.d.admin, "POST", "/power/web/policy?name=%64ual", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.power()["pools"][0]["policy"], "dual")
        r = H.request(self.d.admin, "POST", "/power/web/policy?name=multi", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(H.request(self.d.admin, "POST", "/power/nope/policy?name=multi",
                                   headers=auth).status, 404)
        self.assertEqual(self.power()["pools"][0]["policy"], "multi")
        gen = self.d.admin_stats()["generation"]
        self.d.proc.signal(H.signal.SIGHUP)
        H.wait_until(lambda: self.d.admin_stats()["generation"] > gen, 10, "the reload")
        self.assertEqual(self.power()["pools"][0]["policy"], "multi")
        r = H.request(self.d.admin, "POST", "/power/web/policy", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        pool = self.power()["pools"][0]
        self.assertEqual((pool["policy"], pool["policy_source"]), ("always-on", "config"))
        r = H.request(self.d.admin, "POST", "/power/web/unpin", headers=auth)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.power()["pools"][0]["pinned"], -1)
        texts = [d["text"] for d in self.power()["decisions"]]
        self.assertTrue(any("operator: maint b1" in t for t in texts), texts)

    def node_pool(self, power, action_interval="0"):
        """One node, alone in pool web, with the server power block `power`."""
        node = self.start_node("--control", "%s:0" % H.HOST, "--wol", "%s:0" % H.HOST,
                               "--mac", "02:00:00:00:00:07", "--boot-ms", 300, name="n1")
        power = power.replace("CONTROL", "%s:%d" % (H.HOST, node.control)).replace(
            "WOL", "%s:%d" % (H.HOST, node.wol)).replace("PID", str(node.proc.pid))
        conf = ("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  web:\n"
                "    health_check: {interval: 100ms, timeout: 300ms, rise: 1, fall: 1}\n"
                "    power: {policy: always-on, min_change_interval: 0, action_interval: %s, "
                "command_timeout: 500ms}\n"
                "    servers:\n      - {name: n1, address: \"%s:%d\", power: {%s}}\n"
                % (action_interval, H.HOST, node.port, power))
        self.d = self.start_dimmer_conf(self.write_config(conf))
        return node

    def act(self, node, what):
        r = H.request(self.d.admin, "POST", "/hosts/%s:%d/%s" % (H.HOST, node.port, what))
        self.assertEqual(r.status, 200, r.body)

    def test_sigusr2_hands_the_power_states_over(self):
        # Two nodes; n1 slept by hand while a slow request of the old process
        # runs on it (it drains first). The new process of a SIGUSR2 takes
        # the states over: n1 draining and held, n2 active, their energy; it
        # sleeps n1 only once the old process, which still has the slow
        # request on n1, has exited (the request completes, nothing is lost
        # at the sleep), and it never sends n1 a request, as a restart would
        # until n1's health checks failed.
        n1 = self.start_node("--control", "%s:0" % H.HOST, "--boot-ms", 300, name="n1")
        n2 = self.start_node("--control", "%s:0" % H.HOST, name="n2")
        conf = ("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n"
                "timeouts: {shutdown: 20s}\npools:\n  web:\n    balance: leastconn\n"
                "    health_check: {interval: 200ms, timeout: 300ms, rise: 1, fall: 1}\n"
                "    power: {policy: always-on, min_change_interval: 0, action_interval: 0}\n"
                "    servers:\n"
                "      - {name: n1, address: \"%s:%d\", power: {control: \"%s:%d\"}}\n"
                "      - {name: n2, address: \"%s:%d\", power: {control: \"%s:%d\"}}\n"
                % (H.HOST, n1.port, H.HOST, n1.control, H.HOST, n2.port, H.HOST, n2.control))
        self.d = self.start_dimmer_conf(self.write_config(conf))
        # The slow request goes to n1 (leastconn: n2 is busy with one of its own).
        slow = [H.Conn(self.d.port, timeout=30) for _ in range(2)]
        for k, c in enumerate(slow):
            self.addCleanup(c.close)
            c.send(H.build_request("GET", "/slow/3000"))
            H.wait_until(lambda: sum(s["inflight"] for s in self.d.servers().values()) == k + 1,
                         5, "the slow request")
        H.wait_until(lambda: self.server("n1")["energy_wh"] > 0, 10, "n1's energy counted")
        self.act(n1, "sleep")
        self.assertEqual(self.server("n1")["state"], "draining")
        energy = self.server("n1")["energy_wh"]
        pid = self.sigusr2(self.d, self.d.proc.pid)
        log = self.d.proc.stderr()
        self.assertIn("took the health of 2 hosts from the process this one replaces (0 down)", log)
        n1s = self.server("n1")
        self.assertIn(n1s["state"], ("draining", "sleeping"))
        self.assertTrue(n1s["held"])
        self.assertGreaterEqual(n1s["energy_wh"], energy)
        self.assertEqual(self.server("n2")["state"], "active")
        for c in slow:
            r = c.read_response(timeout=30)
            self.assertEqual(r.status, 200)
        n1.wait_state("asleep")
        H.wait_until(lambda: self.server("n1")["state"] == "sleeping", 10, "n1 asleep")
        self.assertEqual(n1.stats()["lost_at_sleep"], 0)
        self.assertIn("the process this one replaced has exited: drained servers may sleep",
                      self.d.proc.stderr())
        # n1 asleep and down: a second SIGUSR2 hands that over, and its new
        # process sends every request to n2 from its first.
        before = n1.stats()["refused"]
        self.sigusr2(self.d, pid)
        self.assertIn("(1 down)", self.d.proc.stderr())
        for _ in range(10):
            self.assertEqual(H.get(self.d.port, "/bytes/3").status, 200)
        self.assertEqual(n1.stats()["refused"], before)
        self.assertEqual(self.server("n1")["state"], "sleeping")
        self.assertEqual(n1.power()["state"], "asleep")

    def test_sigusr2_lets_a_wake_under_way_finish(self):
        # n1 asleep; its wake command runs until the test lets it go, which
        # it does only once the new process of a SIGUSR2 is ready and the old
        # one stops. The wake is not cut short: n1 boots, and the new
        # process, which took n1 over as booting, puts it in service.
        go = self.path("go")
        n1 = self.start_node("--control", "%s:0" % H.HOST, "--boot-ms", 300, name="n1")
        n2 = self.start_node(name="n2")
        conf = ("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  web:\n"
                "    health_check: {interval: 100ms, timeout: 300ms, rise: 1, fall: 1}\n"
                "    power: {policy: always-on, min_change_interval: 0, action_interval: 0, "
                "command_timeout: 15s, boot_timeout: 30s}\n"
                "    servers:\n"
                "      - {name: n1, address: \"%s:%d\", power: {sleep_command: \"kill -USR1 %d\", "
                "wake_command: \"i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; "
                "i=$((i+1)); done; kill -USR2 %d\"}}\n"
                "      - {name: n2, address: \"%s:%d\"}\n"
                % (H.HOST, n1.port, n1.proc.pid, go, n1.proc.pid, H.HOST, n2.port))
        self.d = self.start_dimmer_conf(self.write_config(conf))
        self.act(n1, "sleep")
        n1.wait_state("asleep")
        H.wait_until(lambda: self.server("n1")["state"] == "sleeping", 5, "n1 sleeping")
        self.act(n1, "wake")
        H.wait_until(lambda: "running \"i=0;" in self.d.proc.stderr(), 5, "the wake command")

        def let_it_go():
            self.assertIn("wake n1 (command): under way as dimmer stops: left to finish",
                          self.d.proc.stderr())
            open(go, "w").close()

        self.sigusr2(self.d, self.d.proc.pid, ready_then=let_it_go)
        self.assertIn("wake n1 (command), under way when dimmer stopped: exit status 0",
                      self.d.proc.stderr())
        n1.wait_state("awake")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "n1 in service")
        self.assertEqual(self.server("n1")["action_failures"], 0)

    def test_wol_and_http_actuators(self):
        node = self.node_pool('mac: "02:00:00:00:00:07", wol_to: "WOL", control: "CONTROL"')
        self.act(node, "sleep")
        node.wait_state("asleep")  # drained (nothing on it), then POST /sleep
        H.wait_until(lambda: self.server("n1")["state"] == "sleeping", 5, "sleeping")
        self.assertEqual(node.stats()["wol_ignored"], 0)
        self.act(node, "wake")
        node.wait_state("awake")  # the magic packet, then its 300 ms boot
        self.assertEqual(node.stats()["wakes"], 1)
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        self.assertEqual(H.get(self.d.port, "/healthz").status, 200)
        self.assertEqual(self.server("n1")["action_failures"], 0)

    def sleep_and_wake_through(self, node, ctl, tok):
        """dimmer's http actuator posting to ctl with the token of file tok sleeps node, then
        wakes it, both asked by the operator; back in service after."""
        conf = ("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  web:\n"
                "    health_check: {interval: 100ms, timeout: 300ms, rise: 1, fall: 1}\n"
                "    power: {policy: always-on, min_change_interval: 0, action_interval: 0}\n"
                "    servers:\n      - {name: n1, address: \"%s:%d\", power: {control: \"%s:%d\", "
                "control_token_file: %s}}\n" % (H.HOST, node.port, H.HOST, ctl, tok))
        self.d = self.start_dimmer_conf(self.write_config(conf))
        self.act(node, "sleep")
        node.wait_state("asleep")
        H.wait_until(lambda: self.server("n1")["state"] == "sleeping", 5, "sleeping")
        self.act(node, "wake")
        node.wait_state("awake")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")

    def test_http_actuator_with_a_bearer_token(self):
        tok = self.path("control.token")
        with open(tok, "w") as f:
            f.write("node-s3cret\n")
        node = self.start_node("--control", "%s:0" % H.HOST, "--control-token-file", tok,
                               "--boot-ms", 300, name="n1")
        ctl = node.control
        # Without the token, or with another, the node refuses to sleep.
        for headers in ([], [("Authorization", "Bearer node-s3cre")],
                        [("Authorization", "Bearer node-s3cret2")],
                        [("Authorization", "Basic node-s3cret")]):
            r = H.request(ctl, "POST", "/sleep", headers=headers)
            self.assertEqual(r.status, 401, (headers, r.body))
        self.assertEqual(node.power()["state"], "awake")
        # dimmer with the token: the http actuator sleeps and wakes it.
        self.sleep_and_wake_through(node, ctl, tok)
        self.assertEqual(self.server("n1")["action_failures"], 0)

    def test_http_actuator_through_dimmer_agent(self):
        # dimmer posts to the machine's dimmer-agent, which runs the operator's
        # commands (here kill -USR1 / -USR2 on the node, which sleep and wake it).
        tok = self.path("agent-control.token")
        with open(tok, "w") as f:
            f.write("agent-s3cret\n")
        key = self.path("agent.key")
        with open(key, "wb") as f:
            f.write(KEY + b"\n")
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the reports go nowhere
        sink.bind((H.HOST, 0))
        self.addCleanup(sink.close)
        # The node's own control listener only shows its state here (GET /power).
        node = self.start_node("--control", "%s:0" % H.HOST, "--boot-ms", 300, name="n1")
        agent = self.start_proc("agent", [
            H.DIMMER_AGENT, "--name", "n1", "--to", "%s:%d" % (H.HOST, sink.getsockname()[1]),
            "--key-file", key, "--ports", str(node.port), "--control", "%s:0" % H.HOST,
            "--control-token-file", tok, "--sleep-command", "kill -USR1 %d" % node.proc.pid,
            "--wake-command", "kill -USR2 %d" % node.proc.pid, "--command-timeout", "5000"])
        line = re.compile(r"^dimmer-agent control on \S+:(\d+)$", re.M)
        H.wait_until(lambda: line.search(agent.stdout()) or not agent.alive(), 10,
                     "the agent's control port")
        ctl = int(line.search(agent.stdout()).group(1))
        # Refused without the token; GET /status says nothing ran.
        for headers in ([], [("Authorization", "Bearer agent-s3cre")],
                        [("Authorization", "Bearer agent-s3cret"),
                         ("Authorization", "Bearer agent-s3cret")]):
            self.assertEqual(H.request(ctl, "POST", "/sleep", headers=headers).status, 401)
        self.assertEqual(H.request(ctl, "GET", "/sleep").status, 405)
        status = json.loads(H.get(ctl, "/status").body)
        self.assertEqual((status["sleeps"], status["wakes"], status["running"]), (0, 0, None))
        self.assertEqual(node.power()["state"], "awake")
        self.sleep_and_wake_through(node, ctl, tok)
        self.assertEqual(H.get(self.d.port, "/healthz").status, 200)
        self.assertEqual(self.server("n1")["action_failures"], 0)
        status = json.loads(H.get(ctl, "/status").body)
        self.assertEqual((status["sleeps"], status["wakes"], status["failed"]), (1, 1, 0))
        self.assertIn("wake command: exit status 0", agent.stderr())
        self.assertIn("wake n1 (http): HTTP/1.1 200 OK", self.d.proc.stderr())

    def test_command_actuator_and_its_timeout(self):
        node = self.node_pool('sleep_command: "kill -USR1 PID", wake_command: "kill -USR2 PID"')
        self.act(node, "sleep")
        node.wait_state("asleep")
        self.act(node, "wake")
        node.wait_state("awake")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        self.assertIn('running "kill -USR1 %d"' % node.proc.pid, self.d.proc.stderr())
        self.assertIn("wake n1 (command): exit status 0", self.d.proc.stderr())
        self.assertEqual(self.server("n1")["action_failures"], 0)

    def test_actions_wait_for_action_interval(self):
        # A wake asked right after a sleep runs action_interval after it, not at once.
        stamps = self.path("stamps")
        node = self.node_pool('sleep_command: "date +%%s.%%N >> %s; kill -USR1 PID", '
                              'wake_command: "date +%%s.%%N >> %s; kill -USR2 PID"'
                              % (stamps, stamps), action_interval="1500ms")
        self.act(node, "sleep")
        node.wait_state("asleep")
        self.act(node, "wake")
        self.assertEqual(self.server("n1")["state"], "booting")
        node.wait_state("awake")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        with open(stamps) as f:
            t = [float(x) for x in f.read().split()]
        self.assertEqual(len(t), 2, t)
        self.assertGreaterEqual(t[1] - t[0], 1.4)
        self.assertIn("wake n1: after action_interval", self.d.proc.stderr())
        self.assertEqual(self.server("n1")["action_failures"], 0)

    def test_a_command_that_hangs_is_killed(self):
        node = self.node_pool('sleep_command: "exec sleep 30", wake_command: "kill -USR2 PID"')
        self.act(node, "sleep")
        H.wait_until(lambda: self.server("n1")["action_failures"] == 1, 10,
                     "the command to be killed at command_timeout")
        self.assertIn("sleep n1 (command): killed by signal 9", self.d.proc.stderr())
        self.assertEqual(node.power()["state"], "awake")  # it never slept
        # Still up, so back in service once its health check passes.
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        H.wait_until(lambda: H.get(self.d.port, "/healthz").status == 200, 10, "served again")

    def test_a_command_that_writes_without_end_is_read_to_1_mib(self):
        # Regression: its output was read 4 KiB at a time for as long as it
        # ran, a core of the control thread until command_timeout; past 1 MiB
        # it is not read, and it waits on the pipe until it is killed.
        node = self.node_pool('sleep_command: "exec yes", wake_command: "kill -USR2 PID"')
        self.act(node, "sleep")
        H.wait_until(lambda: self.server("n1")["action_failures"] == 1, 10,
                     "the command to be killed at command_timeout")
        log = self.d.proc.stderr()
        self.assertIn('sleep n1 (command): killed by signal 9, output "y y y', log)
        self.assertIn('" and more, not read past 1 MiB', log)
        self.assertEqual(node.power()["state"], "awake")

    def test_a_commands_output_is_logged_short_and_what_it_leaves_is_killed(self):
        left = self.path("left.pid")
        # 300 kB on stdout, a line on stderr, and a process left running.
        node = self.node_pool('sleep_command: "yes chatter | head -c 300000; echo done >&2; '
                              'sleep 300 & echo $! > %s; kill -USR1 PID", '
                              'wake_command: "kill -USR2 PID"' % left)
        self.act(node, "sleep")
        node.wait_state("asleep")
        H.wait_until(lambda: "sleep n1 (command): exit status 0" in self.d.proc.stderr(), 10,
                     "the sleep's outcome")
        log = self.d.proc.stderr()
        self.assertIn('sleep n1 (command): exit status 0, output "chatter chatter', log)
        self.assertIn('" and more', log)
        # Its output went to dimmer, read and dropped, not to dimmer's stderr
        # (which is not error_log, and was written without end).
        self.assertLess(len(log), 30000)
        with open(left) as f:
            pid = int(f.read())

        def gone():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().split(")")[-1].split()[0] == "Z"
            except FileNotFoundError:
                return True

        H.wait_until(gone, 10, "what the command left running to be killed")
        # A sleep the operator asked that fails leaves the server active and
        # no longer held (held, the policy never counted it again).
        self.act(node, "wake")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        with open(self.d.conf_path) as f:
            conf = f.read()
        self.reload_config(re.sub(r'sleep_command: "[^"]*"', 'sleep_command: "echo no; exit 1"',
                                  conf))
        self.act(node, "sleep")
        H.wait_until(lambda: self.server("n1")["action_failures"] == 1, 10, "the failed sleep")
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        self.assertFalse(self.server("n1")["held"])
        self.assertIn('sleep n1 (command): exit status 1, output "no"', self.d.proc.stderr())

    def test_an_http_actuators_reply_is_checked_and_cleaned(self):
        replies = []
        ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ctl.bind((H.HOST, 0))
        ctl.listen(8)
        self.addCleanup(ctl.close)

        def serve():
            while True:
                try:
                    c, _ = ctl.accept()
                except OSError:
                    return
                with c:
                    c.recv(4096)
                    c.sendall(replies.pop(0) if replies else b"HTTP/1.1 200 OK\r\n\r\n")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        node = self.node_pool('control: "%s:%d"' % (H.HOST, ctl.getsockname()[1]))
        # A status that is not three digits is no success.
        replies.append(b"HTTP/1.1 2\r\n\r\n")
        self.act(node, "sleep")
        H.wait_until(lambda: self.server("n1")["action_failures"] == 1, 10, "the sleep to fail")
        self.assertIn("sleep n1 (http): HTTP/1.1 2\n", self.d.proc.stderr())
        H.wait_until(lambda: self.server("n1")["state"] == "active", 10, "active again")
        # Bytes that are not text (escapes for a terminal, no UTF-8) are
        # neither in the log nor in /power, which stays JSON.
        replies.extend([b"HTTP/1.1 202 Accepted\r\n\r\n", b"HTTP/1.1 500 \xff\xfe\x1b[31m\r\n\r\n"])
        self.act(node, "sleep")
        H.wait_until(lambda: self.server("n1")["state"] == "sleeping", 10, "sleeping")
        self.act(node, "wake")
        # (Failed, then active at its next health check: the node never slept.)
        H.wait_until(lambda: "wake n1 (http): HTTP/1.1 500 ???[31m\n" in self.d.proc.stderr(), 10,
                     "the failed wake")
        r = H.get(self.d.admin, "/power")
        texts = [d["text"] for d in json.loads(r.body.decode("utf-8"))["decisions"]]
        self.assertIn("pool web: n1: its wake failed (HTTP/1.1 500 ???[31m): failed", texts)

    def test_a_bad_power_block_on_reload_keeps_the_running_one(self):
        self.start()
        self.send(report("b1", 1))
        H.wait_until(lambda: self.reports()["ok"] == 1, 10, "a report")
        with open(self.d.conf_path) as f:
            good = f.read()
        with open(self.d.conf_path, "w") as f:
            f.write(good.replace("policy: always-on", "policy: mulit"))
        gen = self.d.admin_stats()["generation"]
        self.d.proc.signal(H.signal.SIGHUP)
        H.wait_until(lambda: "unknown power policy" in self.d.proc.stderr(), 10, "the error")
        self.assertRegex(self.d.proc.stderr(),
                         r"%s:\d+:\d+: unknown power policy \"mulit\"" % re.escape(self.d.conf_path))
        self.assertEqual(self.d.admin_stats()["generation"], gen)
        self.assertEqual(self.power()["pools"][0]["policy"], "always-on")
        self.assertEqual(self.server("b1")["agent"]["seq"], 1)  # the manager's state is kept


if __name__ == "__main__":
    H.main()
