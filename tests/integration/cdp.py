"""
A headless Chromium driven over the Chrome DevTools Protocol (CDP), standard
library only, for tests/integration/test_dashboard.py: start it, open a page,
evaluate JavaScript in it, take a screenshot. The WebSocket client is the
least RFC 6455 needs: masked text frames out, frames of any length (and
continuations) in.
"""
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.request

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    def __init__(self, host, port, path, timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.sock.recv(4096)
            if not data:
                raise ConnectionError("the browser closed the WebSocket handshake")
            head += data
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError("no WebSocket: %r" % head[:200])

    def send(self, text):
        data = text.encode()
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the browser closed the WebSocket")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """One whole text message (continuation frames joined)."""
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7f
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0f
            if op == 8:
                raise ConnectionError("the browser closed the WebSocket")
            if op in (9, 10):  # ping, pong: not ours to answer in a short test
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Browser:
    """A headless browser with one page, driven over CDP."""

    def __init__(self, path, profile, width=1280, height=900, start_timeout=30):
        self.proc = subprocess.Popen(
            [path, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--mute-audio",
             "--user-data-dir=" + profile, "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "--window-size=%d,%d" % (width, height),
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.ws = None
        self.next_id = 0
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + start_timeout
        port = None
        while port is None:
            if self.proc.poll() is not None:
                raise RuntimeError("the browser exited (code %s)" % self.proc.returncode)
            if time.monotonic() > deadline:
                self.quit()
                raise RuntimeError("no DevToolsActivePort within %ss" % start_timeout)
            try:
                with open(port_file) as f:
                    first = f.readline().strip()
                    port = int(first) if first else None
            except (OSError, ValueError):
                pass
            if port is None:
                time.sleep(0.05)
        self.port = port
        pages = []
        while not pages:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=5) as r:
                pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
            if not pages:
                if time.monotonic() > deadline:
                    self.quit()
                    raise RuntimeError("the browser has no page")
                time.sleep(0.05)
        url = pages[0]["webSocketDebuggerUrl"]
        path = "/" + url.split("/", 3)[3]
        self.ws = WebSocket("127.0.0.1", port, path)

    def call(self, method, timeout=15, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        self.ws.sock.settimeout(timeout)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page script: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def screenshot(self, path):
        r = self.call("Page.captureScreenshot", format="png", timeout=30)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def quit(self):
        if self.ws is not None:
            try:
                self.call("Browser.close", timeout=5)
            except (OSError, RuntimeError, ConnectionError, ValueError):
                pass
            self.ws.close()
            self.ws = None
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # Its renderer and helper processes are in its session: none outlives the test.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
