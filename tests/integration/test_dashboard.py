"""
The dashboard (GET / on the admin listener) in a real browser: headless
Chromium loads the page, which polls /stats and /power; the test waits for
live data, takes a backend out, and checks in the DOM that the page shows
it; then it saves a screenshot under the build folder (dashboard.png).
Without Chromium (apt-get install chromium) the test is skipped, saying why.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import cdp  # noqa: E402
import harness as H  # noqa: E402

HEALTH = {"interval": "200ms", "timeout": "200ms", "rise": 1, "fall": 1}
CELL = ("(() => { const c = document.querySelector('[data-server=\"%s\"] .%s');"
        " return c ? c.firstChild.textContent : null; })()")


class DashboardTest(H.DimmerTest):
    def test_page_is_served_from_the_binary(self):
        b1 = self.start_backend("b1")
        self.d = self.start_dimmer({"web": self.pool(b1)})
        r = H.get(self.d.admin, "/", timeout=5)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "text/html; charset=utf-8")
        page = r.body.decode()
        self.assertIn("<canvas", page)
        # Nothing fetched from elsewhere: no URL but the admin's own paths.
        for needle in ("http://", "https://", "//cdn", "src=\""):
            self.assertNotIn(needle, page)
        self.assertIn('getJSON("/stats")', page)
        # The text index moved to /help.
        self.assertIn("GET  /metrics", H.get(self.d.admin, "/help", timeout=5).body.decode())

    def test_live_page_in_chromium_follows_a_backend_taken_out(self):
        path = cdp.find_browser()
        if path is None:
            reason = "chromium not installed (apt-get install chromium): dashboard not checked"
            sys.stderr.write("  SKIPPED: %s\n" % reason)
            self.skipTest(reason)
        b1, b2 = self.start_backend("b1"), self.start_backend("b2")
        self.d = self.start_dimmer({"web": self.pool(b1, b2, health_check=HEALTH)})
        for i in range(20):
            self.assertEqual(H.get(self.d.port, "/bytes/%d" % (i + 1)).status, 200)
        profile = tempfile.mkdtemp(prefix="chromium-", dir=self.tmp)
        browser = cdp.Browser(path, profile)
        self.addCleanup(browser.quit)
        browser.call("Page.enable")
        browser.call("Page.navigate", url="http://%s:%d/" % (H.HOST, self.d.admin))

        def cell(server, kind):
            return browser.evaluate(CELL % ("web/" + server, kind))

        H.wait_until(lambda: cell("b2", "health") == "up" and cell("b1", "health") == "up", 20,
                     "both servers up on the page")
        H.wait_until(lambda: browser.evaluate("document.getElementById('status').textContent")
                     == "live", 10, "the page live")
        self.assertEqual(cell("b1", "power"), "awake")
        H.wait_until(lambda: browser.evaluate("window.dimmerSamples.length") >= 3, 10,
                     "three polls charted")
        summary = "document.querySelector('[data-pool=\"web\"] .summary').textContent"
        self.assertTrue(browser.evaluate(summary).startswith("2 of 2 servers up"))
        # The page counts the requests from /stats, as dimmer did.
        reqs = browser.evaluate("[...document.querySelectorAll('[data-pool=\"web\"] tbody tr')]"
                                ".map(r => +r.children[8].textContent).reduce((a, b) => a + b, 0)")
        self.assertEqual(reqs, 20)
        # Take b2 out: its health checks fail, and the page, still open, shows it.
        b2.proc.kill()
        H.wait_until(lambda: cell("b2", "health") == "down", 20, "b2 down on the page")
        self.assertEqual(cell("b1", "health"), "up")
        H.wait_until(lambda: browser.evaluate(summary).startswith("1 of 2 servers up"), 10,
                     "the pool's summary")
        # Traffic on: the requests-per-second chart has a figure.
        for i in range(30):
            self.assertEqual(H.get(self.d.port, "/bytes/7").status, 200)
        H.wait_until(lambda: (browser.evaluate(
            "Math.max(...window.dimmerSamples.map(s => s.rps || 0))") or 0) > 0, 10,
            "a requests/s figure")
        shot = os.path.join(os.path.dirname(H.DIMMER), "dashboard.png")
        browser.screenshot(shot)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        sys.stderr.write("  screenshot: %s\n" % shot)

    def test_reads_need_the_token_with_admin_token_reads(self):
        b1 = self.start_backend("b1")
        tok = self.path("admin.token")
        with open(tok, "w") as f:
            f.write("s3cret-reads\n")
        self.d = self.start_dimmer({"web": self.pool(b1)},
                                   extra="power:\n  admin_token_file: %s\n"
                                         "  admin_token_reads: true\n" % tok)
        auth = [("Authorization", "Bearer s3cret-reads")]
        for path in ("/stats", "/metrics", "/power"):
            for method in ("GET", "HEAD"):
                r = H.request(self.d.admin, method, path)
                self.assertEqual(r.status, 401, (method, path, r.body))
            r = H.request(self.d.admin, "GET", path, headers=[("Authorization", "Bearer x")])
            self.assertEqual(r.status, 401, (path, r.body))
            r = H.request(self.d.admin, "GET", path, headers=auth)
            self.assertEqual(r.status, 200, (path, r.body))
        # The pages that are the same for everyone are not.
        self.assertEqual(H.get(self.d.admin, "/").status, 200)
        self.assertEqual(H.get(self.d.admin, "/help").status, 200)
        # The dashboard sends the token of its #token= fragment with its reads.
        path = cdp.find_browser()
        if path is None:
            reason = "chromium not installed (apt-get install chromium): dashboard not checked"
            sys.stderr.write("  SKIPPED: %s\n" % reason)
            self.skipTest(reason)
        browser = cdp.Browser(path, tempfile.mkdtemp(prefix="chromium-", dir=self.tmp))
        self.addCleanup(browser.quit)
        browser.call("Page.enable")
        status = "(document.getElementById('status') || {}).textContent"
        browser.call("Page.navigate", url="http://%s:%d/" % (H.HOST, self.d.admin))
        H.wait_until(lambda: browser.evaluate(status) == "needs #token=", 10,
                     "the page saying it needs the token")
        browser.call("Page.navigate",
                     url="http://%s:%d/#token=s3cret-reads" % (H.HOST, self.d.admin))
        H.wait_until(lambda: browser.evaluate(status) == "live", 10, "the page live")
        self.assertEqual(browser.evaluate(CELL % ("web/b1", "power")), "awake")

    def test_admin_token_reads_needs_a_token(self):
        conf = self.write_config(H.yaml_config(0, {"web": {"servers": [("b1", 9)]}}, admin=0,
                                               extra="power:\n  admin_token_reads: true\n"))
        r = subprocess.run([H.DIMMER, "-t", "-c", conf], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr.decode(), r"dimmer\.yaml:\d+:\d+: power: admin_token_reads "
                                             r"needs admin_token_file")


if __name__ == "__main__":
    H.main()
