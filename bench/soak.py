#!/usr/bin/env python3
"""
The python half of bench/soak.sh (plain python3, stdlib only):

  soak.py uploads --port P --duration S --json FILE   POST /echo, Content-Length
                                                      and chunked, 1 KiB to 1 MiB,
                                                      echo verified
  soak.py ws --port P --duration S --json FILE        WebSocket echo sessions through
                                                      the proxy, some held tens of s
  soak.py slow --port P --duration S --json FILE      slow header senders (some
                                                      complete, some get 408) and
                                                      slow readers of 4 MiB
  soak.py sample --pid PID --admin P --t0 T --until T --csv FILE
                                                      RSS, fds, requests/s each second
  soak.py probe --port P                              one GET through the proxy
  soak.py report --dir DIR --warmup S --duration S    summary.txt and soak.png

Every client counts each exchange by outcome: ok; status_N (answered with a
non-success status N); closed (the peer closed or reset the connection before
the response was complete, which a killed backend may cause: allowed, as long
as the client saw that the body was short of its Content-Length or its last
chunk); hung (no progress for HANG seconds: never allowed); bad (a response
that looked complete but was wrong, or an unexpected outcome: never allowed);
connect_failed (the proxy refused a connection: never allowed).
"""
import argparse
import base64
import csv
import hashlib
import json
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time

HANG = 15.0  # no progress this long: the exchange hung
HOST = "127.0.0.1"
BLOCK = bytes((j * 2654435761 >> 13) & 255 for j in range(65521))
CLIENT_HEADER = 10.0  # timeouts.client_header in soak.sh's config
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def pattern(n):
    return (BLOCK * (n // len(BLOCK) + 1))[:n]


class Hung(Exception):
    pass


class Closed(Exception):
    pass


class Bad(Exception):
    pass


class Tally:
    """Outcome counts of one kind of client, shared by its threads."""

    def __init__(self, kind):
        self.kind = kind
        self.lock = threading.Lock()
        self.counts = {}
        self.examples = []
        self.bytes = 0

    def add(self, outcome, detail=None, nbytes=0):
        with self.lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            self.bytes += nbytes
            if detail and outcome in ("hung", "bad", "connect_failed") and len(self.examples) < 20:
                self.examples.append("%s %s: %s" % (time.strftime("%H:%M:%S"), outcome, detail))

    def dump(self, path, extra=None):
        with self.lock:
            d = {"kind": self.kind, "total": sum(self.counts.values()), "outcomes": self.counts,
                 "bytes": self.bytes, "examples": self.examples}
        d.update(extra or {})
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)


class Conn:
    """A client connection with a read buffer; every wait is bounded by HANG."""

    def __init__(self, port, rcvbuf=0):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(HANG)
        try:
            self.s.connect((HOST, port))
        except OSError as e:
            self.s.close()
            raise ConnectionError("connect: %s" % e)
        self.buf = bytearray()
        self.port = self.s.getsockname()[1]  # to find the exchange in dimmer's access log
        self.sent = 0  # bytes sent and received so far, for the report of a hang
        self.got = 0

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def fill(self, n=65536):
        try:
            d = self.s.recv(n)
        except socket.timeout:
            raise Hung("nothing read for %.0f s" % HANG)
        except OSError as e:
            raise Closed(str(e))
        if not d:
            raise Closed("closed by the peer")
        self.buf += d
        self.got += len(d)
        return len(d)

    def take(self, n):
        while len(self.buf) < n:
            self.fill(max(65536, n - len(self.buf)))
        d = bytes(self.buf[:n])
        del self.buf[:n]
        return d

    def line(self, limit=65536):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                d = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return d
            if len(self.buf) > limit:
                raise Bad("line too long")
            self.fill()

    def send(self, data):
        view = memoryview(data)
        try:
            while view:
                n = self.s.send(view[:262144])
                self.sent += n
                view = view[n:]
        except socket.timeout:
            raise Hung("could not send for %.0f s" % HANG)
        except OSError as e:
            raise Closed(str(e))

    def head(self):
        """A response head: (status, {lower name: value})."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            if len(self.buf) > 1 << 20:
                raise Bad("response head too long")
            self.fill()
        raw = bytes(self.buf[:i]).decode("latin-1")
        del self.buf[:i + 4]
        lines = raw.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise Bad("bad status line %r" % lines[0])
        h = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            h[k.strip().lower()] = v.strip()
        return int(parts[1]), h

    def body(self, h, sink=None):
        """The body after head h. Raises Closed if it ends short of its framing."""
        out = bytearray()
        put = sink or out.extend
        if "chunked" in h.get("transfer-encoding", "").lower():
            while True:
                size = int(self.line().split(b";")[0].strip() or b"x", 16)
                if size == 0:
                    while self.line():
                        pass
                    break
                put(self.take(size))
                if self.take(2) != b"\r\n":
                    raise Bad("chunk not followed by CRLF")
        elif "content-length" in h:
            left = int(h["content-length"])
            while left > 0:
                if not self.buf:
                    self.fill(min(65536, left))
                d = bytes(self.buf[:left])
                del self.buf[:len(d)]
                left -= len(d)
                put(d)
        else:  # delimited by the close
            while True:
                try:
                    self.fill()
                except Closed:
                    break
                put(bytes(self.buf))
                self.buf.clear()
        return bytes(out)

    def response(self, head_only=False):
        while True:
            st, h = self.head()
            if st >= 200 or st == 101:
                break
        if head_only or st in (101, 204, 304):
            return st, h, b""
        return st, h, self.body(h)


def wants_close(h):
    return "close" in h.get("connection", "").lower()


def run_threads(n, target, duration, tally, path, extra=None):
    deadline = time.monotonic() + duration

    def loop(i):
        rnd = random.Random(i * 7919 + os.getpid())
        while time.monotonic() < deadline:
            try:
                target(rnd, deadline, tally)
            except Exception as e:  # a bug of this client, not of the proxy
                tally.add("bad", "client error %r" % e)
                time.sleep(1)

    ts = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    last = 0
    while any(t.is_alive() for t in ts):
        time.sleep(0.5)
        if time.monotonic() - last > 10:
            tally.dump(path, extra)
            last = time.monotonic()
        if time.monotonic() > deadline + 120:  # a thread stuck past every bound
            tally.add("hung", "%d client threads still running 120 s after the end" %
                      sum(t.is_alive() for t in ts))
            break
    tally.dump(path, extra)


def outcome(tally, fn, *args):
    """Runs one exchange, counts its outcome; returns True if the connection may go on."""
    try:
        r = fn(*args)
        return r
    except ConnectionError as e:
        tally.add("connect_failed", str(e))
    except Hung as e:
        tally.add("hung", str(e))
    except Closed:
        tally.add("closed")
    except Bad as e:
        tally.add("bad", str(e))
    return False


# ---- uploads --------------------------------------------------------------

def upload_one(c, rnd, tally):
    size = int(1024 * 1024 ** rnd.random())  # 1 KiB .. 1 MiB, log-uniform
    body = rnd.randbytes(size)
    chunked = rnd.random() < 0.5
    if chunked:
        parts, i = [], 0
        while i < size:
            n = min(size - i, rnd.choice((100, 4096, 16384, 65536, 300000)))
            parts.append(b"%x\r\n" % n + body[i:i + n] + b"\r\n")
            i += n
        payload = (b"POST /echo HTTP/1.1\r\nHost: soak\r\nTransfer-Encoding: chunked\r\n\r\n" +
                   b"".join(parts) + b"0\r\n\r\n")
    else:
        payload = (b"POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: %d\r\n\r\n" % size) + body
    err = []

    def sender():  # sends while the echo comes back
        try:
            c.send(payload)
        except (Hung, Closed) as e:
            err.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    sent0, got0, t0 = c.sent, c.got, time.strftime("%H:%M:%S")

    def hung(what):  # what a hang looked like, to find it in dimmer's access log
        return Hung("upload of %d bytes (%s) from client port %d, begun %s: %s; %d of %d bytes "
                    "sent, %d bytes received" %
                    (size, "chunked" if chunked else "length", c.port, t0, what,
                     c.sent - sent0, len(payload), c.got - got0))
    try:
        st, h, got = c.response()
    except Hung as e:
        t.join(HANG + 1)
        raise hung(str(e))
    finally:
        t.join(HANG + 1)
    if t.is_alive():
        raise hung("the send did not end")
    if st != 200:
        tally.add("status_%d" % st)
        return False
    if err and isinstance(err[0], Hung):
        raise hung(str(err[0]))
    if got != body:
        raise Bad("echo of %d bytes (%s) came back as %d bytes, %s" %
                  (size, "chunked" if chunked else "length", len(got),
                   "same length, different bytes" if len(got) == size else "wrong length"))
    tally.add("ok", nbytes=size)
    return not wants_close(h)


def uploads_session(rnd, deadline, tally):
    try:
        c = Conn(PORT)
    except ConnectionError as e:
        tally.add("connect_failed", str(e))
        time.sleep(0.5)
        return
    try:
        for _ in range(rnd.randint(1, 5)):
            if time.monotonic() >= deadline or not outcome(tally, upload_one, c, rnd, tally):
                break
            time.sleep(rnd.uniform(0, 0.1))
    finally:
        c.close()


# ---- WebSocket ------------------------------------------------------------

def ws_frame(op, payload, rnd):
    n = len(payload)
    b1 = 0x80 | op
    if n < 126:
        hdr = struct.pack("!BB", b1, 0x80 | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", b1, 0x80 | 126, n)
    else:
        hdr = struct.pack("!BBQ", b1, 0x80 | 127, n)
    mask = rnd.randbytes(4)
    m = (mask * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(m, "big")).to_bytes(n, "big") if n else b""
    return hdr + mask + masked


def ws_read(c):
    """One message (continuations joined): (opcode, payload)."""
    op0, data = None, bytearray()
    while True:
        b1, b2 = c.take(2)
        n = b2 & 0x7F
        if n == 126:
            n = struct.unpack("!H", c.take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", c.take(8))[0]
        if b2 & 0x80:
            raise Bad("server frame is masked")
        p = c.take(n)
        op = b1 & 0x0F
        if op >= 8:  # control frames may come between fragments
            return op, p
        if op0 is None:
            op0 = op
        data += p
        if b1 & 0x80:
            return op0, bytes(data)


def ws_session(rnd, deadline, tally):
    try:
        c = Conn(PORT)
    except ConnectionError as e:
        tally.add("connect_failed", str(e))
        time.sleep(0.5)
        return
    long_held = rnd.random() < 0.3
    try:
        outcome(tally, ws_exchange, c, rnd, tally, deadline, long_held)
    finally:
        c.close()
    time.sleep(rnd.uniform(0, 0.3))


def ws_exchange(c, rnd, tally, deadline, long_held):
    key = base64.b64encode(rnd.randbytes(16))
    c.send(b"GET /ws HTTP/1.1\r\nHost: soak\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    st, h, _ = c.response(head_only=True)
    if st != 101:
        if "content-length" in h or "transfer-encoding" in h:
            c.body(h)
        tally.add("status_%d" % st)
        return False
    want = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
    if h.get("sec-websocket-accept") != want:
        raise Bad("Sec-WebSocket-Accept %r, want %r" % (h.get("sec-websocket-accept"), want))
    hold = rnd.uniform(20, 40) if long_held else rnd.uniform(0.5, 3)
    end = min(time.monotonic() + hold, deadline)
    frames = 0
    while True:
        kind = rnd.random()
        if kind < 0.1:
            p = rnd.randbytes(rnd.randint(0, 125))
            c.send(ws_frame(0x9, p, rnd))
            op, got = ws_read(c)
            if op != 0xA or got != p:
                raise Bad("ping of %d bytes answered by op %d, %d bytes" % (len(p), op, len(got)))
        else:
            n = rnd.choice((rnd.randint(0, 125), rnd.randint(126, 65535), rnd.randint(65536, 200000)))
            p = rnd.randbytes(n)
            op0 = 0x2 if kind < 0.6 else 0x1
            if op0 == 0x1:
                p = base64.b64encode(p)[:n]
            c.send(ws_frame(op0, p, rnd))
            op, got = ws_read(c)
            if op != op0 or got != p:
                raise Bad("message op %d of %d bytes echoed as op %d of %d bytes" %
                          (op0, len(p), op, len(got)))
        frames += 1
        if time.monotonic() >= end:
            break
        time.sleep(rnd.uniform(0.5, 1.5) if long_held else rnd.uniform(0, 0.2))
    c.send(ws_frame(0x8, struct.pack("!H", 1000) + b"bye", rnd))
    op, got = ws_read(c)
    if op != 0x8:
        raise Bad("close answered by op %d" % op)
    tally.add("ok_long" if long_held else "ok", nbytes=frames)
    return True


# ---- slow clients ---------------------------------------------------------

SHORT_HEAD = b"GET /bytes/100 HTTP/1.1\r\nHost: s\r\n\r\n"  # 36 bytes: ~7.2 s at 200 ms
LONG_HEAD = b"GET /bytes/100 HTTP/1.1\r\nHost: s\r\nX-Pad: " + b"p" * 28 + b"\r\n\r\n"  # 73 bytes: ~14.6 s
BIG = 4 << 20


def slow_header(rnd, deadline, tally):
    longer = rnd.random() < 0.5
    head = LONG_HEAD if longer else SHORT_HEAD
    try:
        c = Conn(PORT)
    except ConnectionError as e:
        tally.add("connect_failed", str(e))
        time.sleep(0.5)
        return
    start = time.monotonic()
    try:
        outcome(tally, slow_header_exchange, c, head, longer, start, tally)
    finally:
        c.close()


def slow_header_exchange(c, head, longer, start, tally):
    sent = 0
    while sent < len(head):
        r, _, _ = select.select([c.s], [], [], 0.2)
        if r:  # an answer (408) or a close before the head is complete
            break
        c.send(head[sent:sent + 1])
        sent += 1
    took = time.monotonic() - start
    st, h, body = c.response()
    what = "%s head (%d of %d bytes sent in %.1f s)" % ("long" if longer else "short", sent,
                                                     len(head), took)
    if st == 408:
        if not longer and took < CLIENT_HEADER - 1:
            raise Bad("408 for a %s" % what)
        tally.add("status_408")
        return False
    if st != 200:
        tally.add("status_%d" % st)
        return False
    if longer and took > CLIENT_HEADER + 3:
        raise Bad("200 for a %s, after timeouts.client_header" % what)
    if body != pattern(100):
        raise Bad("wrong body for a %s" % what)
    tally.add("ok")
    return True


def slow_reader(rnd, deadline, tally):
    try:
        c = Conn(PORT, rcvbuf=16384)
    except ConnectionError as e:
        tally.add("connect_failed", str(e))
        time.sleep(0.5)
        return
    try:
        outcome(tally, slow_reader_exchange, c, rnd, deadline, tally)
    finally:
        c.close()


def slow_reader_exchange(c, rnd, deadline, tally):
    c.send(b"GET /bytes/%d HTTP/1.1\r\nHost: soak\r\n\r\n" % BIG)
    st, h = c.head()
    if st != 200:
        if "content-length" in h or "transfer-encoding" in h:
            c.body(h)
        tally.add("status_%d" % st)
        return False
    if h.get("content-length") != str(BIG):
        raise Bad("Content-Length %r for /bytes/%d" % (h.get("content-length"), BIG))
    rate = rnd.uniform(2048, 8192)  # bytes per second in the slow phase
    slow_end = min(time.monotonic() + rnd.uniform(20, 40), deadline)
    got = hashlib.sha256()
    left = BIG
    while left > 0:
        slow = time.monotonic() < slow_end
        if not c.buf:
            c.fill(1024 if slow else 65536)
        d = bytes(c.buf[:left])
        c.buf.clear()
        got.update(d)
        left -= len(d)
        if slow:
            time.sleep(len(d) / rate)
    if got.digest() != PATTERN_BIG_SHA:
        raise Bad("/bytes/%d: all bytes came but they differ" % BIG)
    tally.add("ok", nbytes=BIG)
    return True


PATTERN_BIG_SHA = None


def cmd_clients(a):
    global PORT, PATTERN_BIG_SHA, HANG
    PORT = a.port
    HANG = a.hang
    random.seed(a.seed)
    tally = Tally("slow_header" if a.cmd == "slow" else a.cmd)
    extra = {"hang_bound_s": HANG, "duration_s": a.duration}
    if a.cmd == "uploads":
        run_threads(a.threads, uploads_session, a.duration, tally, a.json, extra)
    elif a.cmd == "ws":
        run_threads(a.threads, ws_session, a.duration, tally, a.json, extra)
    else:
        PATTERN_BIG_SHA = hashlib.sha256(pattern(BIG)).digest()
        readers = Tally("slow_reader")
        t = threading.Thread(target=run_threads,
                             args=(max(1, a.threads // 2), slow_reader, a.duration, readers,
                                   a.json + ".readers"), daemon=True)
        t.start()
        run_threads(a.threads, slow_header, a.duration, tally, a.json + ".headers")
        t.join()
        # one file: the two kinds side by side
        out = {"kind": "slow", "parts": {}}
        for p in (a.json + ".headers", a.json + ".readers"):
            with open(p) as f:
                d = json.load(f)
            out["parts"][d["kind"]] = d
            os.unlink(p)
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


# ---- sampler --------------------------------------------------------------

def admin_requests(port):
    """Requests counted over every server of every pool, from dimmer's /stats."""
    try:
        s = socket.create_connection((HOST, port), timeout=2)
        s.sendall(b"GET /stats HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                  % (HOST.encode(), port))
        data = b""
        s.settimeout(2)
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
        s.close()
        j = json.loads(data.split(b"\r\n\r\n", 1)[1])
        return sum(sv.get("requests", 0) for p in j.get("pools", []) for sv in p.get("servers", []))
    except (OSError, ValueError, IndexError):
        return None


def proc_rss_fds(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration, ValueError):
        return None, None


def cmd_sample(a):
    with open(a.csv, "w") as f:
        f.write("t,rss_kib,fds,requests_per_s\n")
    last_req, last_t = None, None
    i = a.start
    while True:
        due = a.t0 + i
        now = time.time()
        if due > now:
            time.sleep(due - now)
        now = time.time()
        if now > a.until:
            break
        rss, fds = proc_rss_fds(a.pid)
        if rss is None:
            with open(a.csv, "a") as f:
                f.write("%.1f,,,\n" % (now - a.t0))
            print("soak sample: dimmer (pid %d) is gone" % a.pid, file=sys.stderr)
            return 1
        req = admin_requests(a.admin)
        rps = ""
        if req is not None and last_req is not None and now > last_t:
            rps = "%.0f" % ((req - last_req) / (now - last_t))
        if req is not None:
            last_req, last_t = req, now
        with open(a.csv, "a") as f:
            f.write("%.1f,%d,%d,%s\n" % (now - a.t0, rss, fds, rps))
        i = max(i + 1, int(now - a.t0) + 1)
    return 0


def cmd_probe(a):
    try:
        c = Conn(a.port)
        c.send(b"GET /bytes/1000 HTTP/1.1\r\nHost: soak\r\n\r\n")
        st, h, body = c.response()
        c.close()
    except (ConnectionError, Hung, Closed, Bad) as e:
        print("probe: %s" % e)
        return 1
    ok = st == 200 and body == pattern(1000)
    pool = ""
    if a.admin:
        try:
            s = socket.create_connection((HOST, a.admin), timeout=2)
            s.sendall(b"GET /stats HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                  % (HOST.encode(), port))
            s.settimeout(2)
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
            j = json.loads(data.split(b"\r\n\r\n", 1)[1])
            pool = "; /stats: %d server connections open, %d in flight" % (
                sum(h.get("server_connections", 0) for h in j.get("hosts", [])),
                sum(h.get("inflight", 0) for h in j.get("hosts", [])))
        except (OSError, ValueError, IndexError) as e:
            pool = "; /stats: %s" % e
    print("probe: GET /bytes/1000 -> %d, %s%s" % (st, "body ok" if ok else "body WRONG", pool))
    return 0 if ok else 1


# ---- report ---------------------------------------------------------------

def slope_per_min(pts):
    n = len(pts)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((t - mx) ** 2 for t, _ in pts)
    return 60 * sum((t - mx) * (v - my) for t, v in pts) / sxx if sxx else 0.0


def cmd_report(a):
    d = a.dir
    rows = []
    with open(os.path.join(d, "samples.csv")) as f:
        for r in csv.DictReader(f):
            if r["rss_kib"]:
                rows.append((float(r["t"]), int(r["rss_kib"]), int(r["fds"]),
                             float(r["requests_per_s"]) if r["requests_per_s"] else None))
    events = []
    if os.path.exists(os.path.join(d, "events.csv")):
        with open(os.path.join(d, "events.csv")) as f:
            events = [(float(r["t"]), r["event"], r["backend"]) for r in csv.DictReader(f)]
    out = []
    fail = []
    p = out.append
    p("soak: %d s of load, warm-up %d s, %d samples; %s" %
      (a.duration, a.warmup, len(rows), a.note or ""))
    during = [r for r in rows if a.warmup <= r[0] <= a.duration]
    after = [r for r in rows if r[0] > a.duration + 2]
    before = [r for r in rows if r[0] < 0]
    at_warm = min(rows, key=lambda r: abs(r[0] - a.warmup)) if rows else None
    p("")
    p("before: before the load; warm-up: at its end; min, max, last: after it; after: %.0f s after "
      "the load" % (after[-1][0] - a.duration if after else 0))
    p("%-10s %8s %10s %8s %8s %8s %8s %14s" %
      ("", "before", "warm-up", "min", "max", "last", "after", "slope /min"))
    for name, k, unit in (("RSS KiB", 1, "KiB"), ("fds", 2, "fds")):
        if not during or not at_warm:
            p("%-10s (no samples after warm-up)" % name)
            fail.append("no samples after warm-up")
            continue
        vals = [r[k] for r in during]
        sl = slope_per_min([(r[0], r[k]) for r in during])
        p("%-10s %8s %10d %8d %8d %8d %8s %10.1f %s" %
          (name, str(before[-1][k]) if before else "-", at_warm[k], min(vals), max(vals), vals[-1],
           str(after[-1][k]) if after else "-", sl, unit))
    rps = [r[3] for r in during if r[3] is not None]
    if rps:
        p("proxied requests/s after warm-up: mean %.0f, min %.0f, max %.0f" %
          (sum(rps) / len(rps), min(rps), max(rps)))
    kills = [e for e in events if e[1] == "kill"]
    p("backend kills: %d (%s), restarts: %d" %
      (len(kills), " ".join("%s@%.0f" % (e[2], e[0]) for e in kills[:40]),
       sum(e[1] == "restart" for e in events)))
    if any(e[1] == "restart_failed" for e in events):
        fail.append("a backend could not be restarted on its port")
    p("")
    p("%-22s %9s  outcomes" % ("load", "requests"))
    hung = 0

    def client(kind, j):
        nonlocal hung
        oc = j.get("outcomes", {})
        p("%-22s %9d  %s" % (kind, j.get("total", 0),
                             ", ".join("%s %d" % kv for kv in sorted(oc.items()))))
        hung += oc.get("hung", 0)
        for bad in ("bad", "connect_failed"):
            if oc.get(bad):
                fail.append("%s: %d %s" % (kind, oc[bad], bad))
        if j.get("total", 0) == 0:
            fail.append("%s: no exchange at all" % kind)
        for e in j.get("examples", [])[:5]:
            p("    %s" % e)
            m = re.search(r"client port (\d+)", e)
            for ln in access_lines(d, int(m.group(1))) if m else ():
                p("      dimmer logged: %s" % ln)

    for name, label in (("load_keepalive", "keep-alive (rate)"), ("load_close", "close (sessions)")):
        path = os.path.join(d, name + ".json")
        if not os.path.exists(path):
            p("%-22s missing (%s)" % (label, path))
            fail.append("%s: no summary" % label)
            continue
        with open(path) as f:
            j = json.load(f)
        sc, pg = j.get("score", {}), j.get("pages", {})
        fails = sc.get("fail_by_kind", {})
        tot = sc.get("total", 0)
        timeouts = fails.get("timeout", 0)
        p("%-22s %9d  good %d, tolerable %d, failed %d (%s)" %
          (label, tot, sc.get("good", 0), sc.get("tolerable", 0), sc.get("fail", 0),
           ", ".join("%s %d" % kv for kv in sorted(fails.items()) if kv[1]) or "none"))
        p("%-22s %9s  %d connects; pages %d, failed %d" %
          ("", "", j.get("connects", 0), pg.get("total", 0), pg.get("fail", 0)))
        hung += timeouts
        if tot == 0:
            fail.append("%s: no responses" % label)
    for name in ("uploads", "ws", "slow"):
        path = os.path.join(d, name + ".json")
        if not os.path.exists(path):
            p("%-22s missing" % name)
            fail.append("%s: no summary" % name)
            continue
        with open(path) as f:
            j = json.load(f)
        if name == "slow":
            for k, part in sorted(j["parts"].items()):
                client(k, part)
        else:
            client({"uploads": "uploads (POST /echo)", "ws": "websocket"}[name], j)
    p("")
    p("HUNG: %d (client exchanges with no progress for %.0f s, and dimmer-load timeouts)" %
      (hung, HANG))
    if hung:
        fail.append("%d hung" % hung)
    for ln in a.alive:
        p(ln)
        if "FAIL" in ln:
            fail.append(ln)
    p("")
    p("verdict: %s" % ("PASS" if not fail else "FAIL: " + "; ".join(fail)))
    text = "\n".join(out) + "\n"
    with open(os.path.join(d, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    plot(d, rows, events, a.warmup)
    return 0 if not fail else 1


def access_lines(d, port, limit=5):
    """Lines of dimmer's JSON access log (soak.sh writes it) for a client port."""
    try:
        with open(os.path.join(d, "access.json")) as f:
            got = [ln.strip() for ln in f if '"client_port":%d,' % port in ln]
    except OSError:
        return []
    return got[-limit:] or ["nothing for client port %d" % port]


def plot(d, rows, events, warmup):
    if not rows:
        return
    gp = ["set terminal pngcairo size 1200,600 noenhanced" if has_cairo() else
          "set terminal png size 1200,600",
          "set output '%s'" % os.path.join(d, "soak.png"),
          "set datafile separator ','",
          "set title 'dimmer soak: RSS and open descriptors (red lines: a backend killed)'",
          "set xlabel 'seconds'", "set ylabel 'RSS (KiB)'", "set y2label 'descriptors'",
          "set ytics nomirror", "set y2tics", "set key center center opaque box", "set grid",
          "set yrange [0:*]", "set y2range [0:*]",
          "set xrange [%g:%g]" % (min(r[0] for r in rows), max(r[0] for r in rows))]
    gp.append("set arrow from %g, graph 0 to %g, graph 1 nohead lc rgb 'black' dt 2 lw 2" %
              (warmup, warmup))
    gp.append("set label 'warm-up end' at %g, graph 0.95 offset 0.5,0" % warmup)
    for t, ev, _ in events:
        if ev == "kill":
            gp.append("set arrow from %g, graph 0 to %g, graph 0.1 nohead lc rgb 'red'" % (t, t))
    gp.append("plot '%s' using 1:2 every ::1 with lines lw 2 title 'RSS KiB', "
              "'' using 1:3 every ::1 axes x1y2 with lines lw 2 title 'fds (right axis)'" %
              os.path.join(d, "samples.csv"))
    with open(os.path.join(d, "soak.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    try:
        subprocess.run(["gnuplot", os.path.join(d, "soak.gp")], check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("soak: no plot (%s)" % e, file=sys.stderr)


def has_cairo():
    try:
        r = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True,
                           timeout=10)
        return "pngcairo" in r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for k in ("uploads", "ws", "slow"):
        s = sub.add_parser(k)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--duration", type=float, required=True)
        s.add_argument("--json", required=True)
        s.add_argument("--threads", type=int, default=4)
        s.add_argument("--hang", type=float, default=HANG)
        s.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("sample")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--admin", type=int, required=True)
    s.add_argument("--t0", type=float, required=True)
    s.add_argument("--until", type=float, required=True)
    s.add_argument("--start", type=int, default=0, help="first sample at t0 + START")
    s.add_argument("--csv", required=True)
    s = sub.add_parser("probe")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--admin", type=int, default=0)
    s = sub.add_parser("report")
    s.add_argument("--dir", required=True)
    s.add_argument("--warmup", type=float, required=True)
    s.add_argument("--duration", type=float, required=True)
    s.add_argument("--note", default="")
    s.add_argument("--alive", action="append", default=[])
    a = ap.parse_args()
    if a.cmd in ("uploads", "ws", "slow"):
        return cmd_clients(a)
    return {"sample": cmd_sample, "probe": cmd_probe, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
