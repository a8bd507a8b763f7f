"""
Shared helpers for dimmer's integration tests: real `dimmer` and
`dimmer-backend` processes on 127.0.0.1, driven over raw sockets and curl.

The binaries come from the DIMMER and DIMMER_BACKEND environment variables
(CTest sets them); without them, the newest build*/ directory of the source
tree is used. Every process a test starts is killed when the test ends, and
when the Python process exits or dies (PR_SET_PDEATHSIG). Every wait has a
deadline; nothing sleeps and hopes. When a test fails, the logs of the
processes it started are printed.

Start processes only from the main thread: the death signal follows the
thread that forked.

Every process listens on port 0 and reports the port it got (dimmer in its
--ports-file, dimmer-backend on stdout): a port picked here and handed over
could be taken by another test in between.

With DIMMER_IT_TLS=1 in the environment, the listener of every config
yaml_config() writes terminates TLS (a CA and a certificate for localhost
made with the openssl command at the start) and Conn speaks TLS to it, so
that the same tests run over TLS (CTest registers some files twice).
"""
import atexit
import base64
import ctypes
import glob
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

HOST = "127.0.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

TLS = os.environ.get("DIMMER_IT_TLS") == "1"

# Generous bounds: the binaries may be built with ASan.
IO_TIMEOUT = 10.0  # one socket operation
START_TIMEOUT = 15.0  # a process to start answering


def _find_binary(env, rel):
    path = os.environ.get(env)
    if path:
        return path
    found = [p for p in glob.glob(os.path.join(SRC, "build*", rel)) if os.access(p, os.X_OK)]
    if not found:
        sys.exit("%s is not set and no build*/%s was found; build first or set %s" %
                 (env, rel, env))
    return max(found, key=os.path.getmtime)


DIMMER = _find_binary("DIMMER", "dimmer")
DIMMER_BACKEND = _find_binary("DIMMER_BACKEND", "dimmer-backend")
DIMMER_LOAD = _find_binary("DIMMER_LOAD", "dimmer-load")
DIMMER_AGENT = _find_binary("DIMMER_AGENT", "dimmer-agent")

# ---- processes ----------------------------------------------------------

_live = set()


def _kill_all_live():
    for p in list(_live):
        p.kill()


atexit.register(_kill_all_live)

# PR_SET_CHILD_SUBREAPER = 36: a process orphaned below this one (the new
# dimmer of a SIGUSR2 once the old one exits) becomes its child, not init's,
# so that DimmerTest finds and kills it at the end even when the test failed
# before it learned its pid.
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1)
except Exception:
    pass


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: the child gets SIGKILL if this process dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class Proc:
    """A child process with stdout and stderr in files of a temp dir."""

    def __init__(self, name, argv, tmp, env=None):
        self.name = name
        self.argv = argv
        self.out_path = os.path.join(tmp, name + ".out")
        self.err_path = os.path.join(tmp, name + ".err")
        self._out = open(self.out_path, "ab")
        self._err = open(self.err_path, "ab")
        full_env = dict(os.environ)
        # Leaks are not what these tests look for, and the checker slows exit down.
        full_env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        if env:
            full_env.update(env)
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._out,
                                  stderr=self._err, env=full_env, preexec_fn=_die_with_parent)
        _live.add(self)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or None if still running after timeout seconds."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.p.poll() is None:
            try:
                self.p.kill()
            except OSError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for f in (self._out, self._err):
            if not f.closed:
                f.close()
        _live.discard(self)

    def stdout(self):
        return _read_text(self.out_path)

    def stderr(self):
        return _read_text(self.err_path)


def _read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def read_ports_file(path):
    """
    The lines of a dimmer --ports-file as [(kind, configured, bound port)],
    or None while the file does not exist (dimmer renames it into place whole).
    """
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    out = []
    for line in text.splitlines():
        kind, configured, bound = line.split(" ")
        out.append((kind, configured, int(bound.rsplit(":", 1)[1])))
    return out


def port_answers(port):
    try:
        s = socket.create_connection((HOST, port), timeout=1.0)
    except OSError:
        return False
    s.close()
    return True


STALL_BOUND = 2.0  # seconds: served_meanwhile()'s bound


def wait_until(pred, timeout, what, interval=0.02):
    """Polls pred() until it is true; fails with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_port(port, timeout=START_TIMEOUT, proc=None):
    def ready():
        if proc is not None and not proc.alive():
            raise AssertionError("%s exited (code %s) before listening on %d:\n%s" %
                                 (proc.name, proc.p.returncode, port, proc.stderr()))
        return port_answers(port)

    wait_until(ready, timeout, "port %d to answer" % port)


# ---- the pattern of /bytes/N -------------------------------------------

_BLOCK = bytes((j * 2654435761 >> 13) & 255 for j in range(65521))


def pattern(n):
    """The first n bytes of the backend's /bytes pattern (documented in its --help)."""
    return (_BLOCK * (n // len(_BLOCK) + 1))[:n]


def pattern_sha256(n):
    h = hashlib.sha256()
    full, rest = divmod(n, len(_BLOCK))
    for _ in range(full):
        h.update(_BLOCK)
    h.update(_BLOCK[:rest])
    return h.hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


# ---- agent reports ------------------------------------------------------

AGENT_REPORT = re.compile(rb"^(dimmer-agent/1 name=(\S+) seq=(\d+) ts=(\d+) est_w=([\d.]+) "
                          rb"measured_w=(-|[\d.]+) tcp=(\d+)) hmac=([0-9a-f]{64})$")


def agent_report(data, key):
    """
    The fields of an agent report datagram (power/report.h) as a dict, once its
    format and its HMAC-SHA256 under key are checked here, with Python's hmac
    rather than the project's code; AssertionError otherwise.
    """
    m = AGENT_REPORT.match(data)
    if m is None:
        raise AssertionError("not an agent report: %r" % data)
    signed, name, seq, ts, est, measured, tcp, mac = m.groups()
    want = hmac.new(key, signed, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(want, mac):
        raise AssertionError("bad HMAC: %r" % data)
    return {"name": name.decode(), "seq": int(seq), "ts": int(ts), "est_w": float(est),
            "measured_w": None if measured == b"-" else float(measured), "tcp": int(tcp)}


# ---- raw HTTP -----------------------------------------------------------


class Response:
    def __init__(self, version, status, reason, headers, raw_head):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value), in order
        self.raw_head = raw_head
        self.body = b""
        self.body_len = 0
        self.body_sha256 = None
        self.chunked = False
        self.interim = []  # 1xx responses before this one

    def header(self, name):
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def __repr__(self):
        return "<Response %s %d %r, %d body bytes>" % (self.version, self.status, self.headers,
                                                      self.body_len)


class Closed(Exception):
    """The peer closed the connection before a whole response arrived."""


# dimmer's admin listeners (on loopback) answer a Host that names the
# machine by address only (a guard against DNS rebinding): requests to
# them say 127.0.0.1:PORT, those to the proxy "test".
ADMIN_PORTS = {}  # port: the Proc of the dimmer whose admin listener it is
DEFAULT_HOST = object()  # Conn.request's: by default_host()


def default_host(port):
    # A port of a dimmer gone may be any listener's now.
    proc = ADMIN_PORTS.get(port)
    return "%s:%d" % (HOST, port) if proc is not None and proc.alive() else "test"


class Conn:
    """One client connection to 127.0.0.1:port with a read buffer; source
    picks the client address (any 127/8 address is loopback too)."""

    def __init__(self, port, timeout=IO_TIMEOUT, source=None, tls=None):
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection((HOST, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls if tls is not None else port in tls_ports:
            try:
                self.sock = tls_client_context().wrap_socket(self.sock,
                                                             server_hostname="localhost")
            except Exception:
                self.sock.close()
                raise
        self.buf = b""
        self.eof = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def _fill(self, deadline):
        """Reads more into buf; False on EOF or reset."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("read deadline passed")
        self.sock.settimeout(min(left, self.timeout))
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _read_until(self, sep, deadline, limit=1 << 20):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out = self.buf[:i + len(sep)]
                self.buf = self.buf[i + len(sep):]
                return out
            if len(self.buf) > limit:
                raise AssertionError("no %r within %d bytes" % (sep, limit))
            if not self._fill(deadline):
                raise Closed("connection closed; buffered %r" % self.buf[:200])

    def _read_exact(self, n, deadline, sink):
        while n > 0:
            if not self.buf and not self._fill(deadline):
                raise Closed("connection closed with %d body bytes missing" % n)
            take = self.buf[:n]
            self.buf = self.buf[len(take):]
            n -= len(take)
            sink(take)

    def read_response(self, head_request=False, timeout=None, digest=False, stop_at_1xx=False):
        """
        Reads one response: 1xx heads are collected in .interim (returned
        themselves when stop_at_1xx); the body is framed by HEAD, 204/304,
        chunked, Content-Length, or the connection closing. With digest, the
        body is not kept, only its length and sha256.
        """
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        interim = []
        while True:
            head = self._read_until(b"\r\n\r\n", deadline)
            lines = head[:-4].split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
                raise AssertionError("bad status line %r" % lines[0])
            headers = []
            for ln in lines[1:]:
                name, _, value = ln.partition(b":")
                headers.append((name.decode("latin-1"), value.strip().decode("latin-1")))
            r = Response(parts[0].decode(), int(parts[1]),
                         parts[2].decode("latin-1") if len(parts) > 2 else "", headers, head)
            if 100 <= r.status < 200 and r.status != 101:
                if stop_at_1xx:
                    return r
                interim.append(r)
                continue
            break
        r.interim = interim
        h = hashlib.sha256()
        kept = []

        def sink(b):
            r.body_len += len(b)
            if digest:
                h.update(b)
            else:
                kept.append(b)

        te = (r.header("Transfer-Encoding") or "").lower()
        cl = r.header("Content-Length")
        if head_request or r.status in (101, 204, 304):
            pass
        elif te:
            if te.split(",")[-1].strip() != "chunked":
                raise AssertionError("unexpected Transfer-Encoding %r" % te)
            r.chunked = True
            while True:
                line = self._read_until(b"\r\n", deadline, limit=4096)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    # Trailers, up to the empty line.
                    while self._read_until(b"\r\n", deadline, limit=65536) != b"\r\n":
                        pass
                    break
                self._read_exact(size, deadline, sink)
                crlf = self._read_until(b"\r\n", deadline, limit=2)
                if crlf != b"\r\n":
                    raise AssertionError("chunk not followed by CRLF")
        elif cl is not None:
            self._read_exact(int(cl), deadline, sink)
        else:
            while True:
                if self.buf:
                    sink(self.buf)
                    self.buf = b""
                if not self._fill(deadline):
                    break
        r.body = b"".join(kept)
        if digest:
            r.body_sha256 = h.hexdigest()
        return r

    def closed_by_peer(self, timeout=3.0):
        """True if the peer closes within timeout; data read meanwhile goes to .buf."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                if len(self.buf) > 1 << 20:
                    return False
        except (socket.timeout, TimeoutError):
            return False
        return True

    def request(self, method, path, headers=(), body=b"", version="HTTP/1.1", host=DEFAULT_HOST,
                timeout=None, digest=False):
        """host None: no Host header."""
        if host is DEFAULT_HOST:
            host = default_host(self.port)
        self.send(build_request(method, path, headers, body, version, host))
        return self.read_response(head_request=method == "HEAD", timeout=timeout, digest=digest)


def build_request(method, path, headers=(), body=b"", version="HTTP/1.1", host="test"):
    if isinstance(body, str):
        body = body.encode()
    lines = ["%s %s %s" % (method, path, version)]
    names = [n.lower() for n, _ in headers]
    if host is not None and "host" not in names:
        lines.append("Host: " + host)
    lines += ["%s: %s" % (n, v) for n, v in headers]
    if body and "content-length" not in names and "transfer-encoding" not in names:
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def request(port, method, path, headers=(), body=b"", version="HTTP/1.1", timeout=IO_TIMEOUT,
            digest=False):
    """One request on a fresh connection."""
    with Conn(port, timeout=timeout) as c:
        return c.request(method, path, headers, body, version, digest=digest)


def tcp_state(local, remote):
    """
    The kernel's state (hex, as /proc/net/tcp gives it: "05" FIN_WAIT2) of
    the IPv4 connection between the ports local and remote; None when none.
    """
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if (int(fields[1].rsplit(":", 1)[1], 16) == local and
                    int(fields[2].rsplit(":", 1)[1], 16) == remote):
                return fields[3]
    return None


def ws_upgrade(path="/ws"):
    """A WebSocket upgrade request for path, with a fresh key."""
    return build_request("GET", path, [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
        ("Sec-WebSocket-Version", "13")])


def get(port, path, **kw):
    return request(port, "GET", path, **kw)


def raw_exchange(port, data, timeout=5.0):
    """
    Sends data, then reads what comes back until the peer closes (or timeout).
    Returns (bytes, closed): closed says whether the peer closed the connection.
    """
    with Conn(port, timeout=timeout) as c:
        c.send(data)
        closed = c.closed_by_peer(timeout)
        return c.buf, closed


def stats(port):
    """The JSON of GET /stats on port (a backend, or dimmer's admin listener)."""
    r = get(port, "/stats", timeout=5.0)
    if r.status != 200:
        raise AssertionError("GET /stats on %d: %d %r" % (port, r.status, r.body))
    return json.loads(r.body)


def curl(*args, timeout=60):
    """Runs curl quietly, never through a proxy; returns the CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    argv = ["curl", "-sS", "--noproxy", "*", "--max-time", str(int(timeout))] + list(args)
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          timeout=timeout + 10)


# ---- TLS material -------------------------------------------------------


def openssl(*args, cwd=None):
    """Runs the openssl command; its output, or an AssertionError with its stderr."""
    p = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=cwd, timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return p.stdout


def new_key(path, kind="ec"):
    """A private key in PEM: "ec" (P-256) or "rsa" (2048 bits)."""
    if kind == "rsa":
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", path)
    else:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
                path)
    return path


def new_ca(d, name, subject=None):
    """A self-signed CA in directory d: (cert path, key path)."""
    key = new_key(os.path.join(d, name + ".key"))
    cert = os.path.join(d, name + ".pem")
    openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "30", "-subj",
            subject or "/CN=%s" % name, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def new_cert(d, name, ca, subject=None, sans=("DNS:localhost", "IP:127.0.0.1"), kind="ec",
             client=False, chain=True):
    """
    A certificate signed by ca ((cert, key) of new_ca): (cert path, key path);
    the cert file holds the certificate and then the CA's (a complete chain)
    unless chain is False.
    """
    key = new_key(os.path.join(d, name + ".key"), kind)
    csr = os.path.join(d, name + ".csr")
    crt = os.path.join(d, name + ".crt")
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        if sans:
            f.write("subjectAltName=%s\n" % ",".join(sans))
        f.write("extendedKeyUsage=%s\n" % ("clientAuth" if client else "serverAuth"))
    openssl("req", "-new", "-key", key, "-out", csr, "-subj", subject or "/CN=%s" % name)
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-out", crt, "-days", "30", "-extfile", ext)
    if not chain:
        return crt, key
    pem = os.path.join(d, name + ".pem")
    with open(pem, "w") as out:
        for part in (crt, ca[0]):
            with open(part) as f:
                out.write(f.read())
    return pem, key


_tls = {}
# Listener ports of the dimmers started in DIMMER_IT_TLS mode: Conn speaks TLS to them.
tls_ports = set()


def tls_material():
    """The CA and localhost certificate of DIMMER_IT_TLS mode, made once per process."""
    if not _tls:
        d = tempfile.mkdtemp(prefix="dimmer-it-tls-")
        atexit.register(shutil.rmtree, d, True)
        ca = new_ca(d, "ca")
        cert, key = new_cert(d, "localhost", ca)
        _tls.update(dir=d, ca=ca[0], cert=cert, key=key)
    return _tls


# The CA a TLS Conn verifies with: the DIMMER_IT_TLS one unless a test sets its own.
tls_cafile = None


def tls_client_context():
    return ssl.create_default_context(cafile=tls_cafile or tls_material()["ca"])


# ---- configuration ------------------------------------------------------


def yaml_config(listen, pools, admin=None, workers=1, timeouts=None, limits=None,
                access_log=None, error_log=None, routes=None, default_pool=None, extra=None):
    """
    The YAML text of a config. listen and admin are ports of 127.0.0.1 (0: dimmer
    picks one, as every test does). pools: {name: {"balance": .., "servers":
    [(name, port[, {key: value}]), ...], "health_check": {..} or None,
    "passive": {..}}}; the optional mapping adds server keys (weight, ...).
    extra is raw YAML appended at the end (top-level keys not covered here).
    """
    out = ["workers: %d" % workers, "listen:", "  - %s:%d" % (HOST, listen)]
    if TLS:
        m = tls_material()
        out[-1] = '  - {address: "%s:%d", tls: {cert: "%s", key: "%s"}}' % (HOST, listen,
                                                                         m["cert"], m["key"])
    if admin is not None:
        out.append("admin: %s:%d" % (HOST, admin))
    for key, m in (("timeouts", timeouts), ("limits", limits)):
        if m:
            out.append(key + ":")
            out += ["  %s: %s" % (k, v) for k, v in m.items()]
    if access_log is not None:
        out.append('access_log: "%s"' % access_log)
    if error_log is not None:
        out.append('error_log: "%s"' % error_log)
    out.append("pools:")
    for name, p in pools.items():
        out.append("  %s:" % name)
        for key in ("balance", "affinity", "max_queue", "queue_order", "page_gap", "page_bound"):
            if p.get(key):
                out.append("    %s: %s" % (key, p[key]))
        for key in ("health_check", "passive", "hash"):
            if p.get(key) is not None:
                out.append("    %s:" % key)
                if not p[key]:
                    out[-1] += " {}"
                out += ["      %s: %s" % (k, v) for k, v in p[key].items()]
        out.append("    servers:")
        for srv in p["servers"]:
            keys = "".join(", %s: %s" % kv for kv in (srv[2].items() if len(srv) > 2 else ()))
            out.append('      - {name: %s, address: "%s:%d"%s}' % (srv[0], HOST, srv[1], keys))
    if routes:
        out.append("routes:")
        for r in routes:
            out.append("  - {" + ", ".join("%s: %s" % kv for kv in r.items()) + "}")
    if default_pool:
        out.append("default_pool: %s" % default_pool)
    if extra:
        out.append(extra.rstrip("\n"))
    return "\n".join(out) + "\n"


# ---- test case base -----------------------------------------------------

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


class Backend:
    def __init__(self, proc, name, port):
        self.proc = proc
        self.name = name
        self.port = port

    def stats(self):
        return stats(self.port)

    def requests(self):
        return self.stats()["requests"]


class Node:
    """
    A running dimmer-backend cluster node (DimmerTest.start_node): port serves;
    control and wol are None unless asked for.
    """

    def __init__(self, proc, name, ports):
        self.proc = proc
        self.name = name
        self.port = ports["listening"]
        self.control = ports.get("control")
        self.wol = ports.get("wol")

    def stats(self):
        """/stats, from the control listener when there is one (it answers in every state)."""
        return stats(self.control or self.port)

    def power(self):
        r = get(self.control, "/power", timeout=5.0)
        assert r.status == 200, r
        return json.loads(r.body)

    def command(self, what):
        """POST /sleep or /wake on the control listener; the /power JSON it answers."""
        r = request(self.control, "POST", "/" + what, timeout=5.0)
        assert r.status == 200, r
        return json.loads(r.body)

    def wait_state(self, state, timeout=10.0):
        return wait_until(lambda: self.power()["state"] == state, timeout, "state " + state)


NODE_LINE = re.compile(r"^dimmer-backend (\S+) (listening|control|wol) on (\S+):(\d+)$")


class Dimmer:
    """
    A running dimmer: port is its first listener's bound port, ports all of
    them, admin (also admin_port) the admin listener's or None; lines is its
    ports file (the path ports_file) as read_ports_file() gives it.
    """

    def __init__(self, proc, lines, conf_path, ports_file):
        self.proc = proc
        self.lines = lines
        self.ports_file = ports_file
        self.ports = [port for kind, _, port in lines if kind == "listen"]
        self.port = self.ports[0]
        self.admin = next((port for kind, _, port in lines if kind == "admin"), None)
        if self.admin is not None:
            ADMIN_PORTS[self.admin] = proc
        self.conf_path = conf_path

    @property
    def admin_port(self):
        return self.admin

    def admin_stats(self):
        return stats(self.admin)

    def servers(self, pool=None):
        """{server name: its admin /stats entry} of one pool (the first by default)."""
        pools = self.admin_stats()["pools"]
        p = pools[0] if pool is None else next(x for x in pools if x["name"] == pool)
        return {s["name"]: s for s in p["servers"]}


FAULT_BACKEND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_backend.py")


class FaultBackend:
    """fault_backend.py, running (DimmerTest.start_fault_backend)."""

    def __init__(self, proc, port):
        self.proc = proc
        self.port = port

    def seen(self, line):
        return line in self.proc.stdout().splitlines()

    def count(self, line):
        return self.proc.stdout().splitlines().count(line)

    def release(self):
        r = get(self.port, "/release", timeout=5.0)
        assert r.status == 200, r


def gone(pid):
    """Whether process pid has exited (a zombie left to an init that does not reap counts)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Pid:
    """A process the test did not start itself (the new dimmer of a SIGUSR2), by pid."""

    def __init__(self, pid):
        self.pid = pid

    def alive(self):
        return not gone(self.pid)

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def children(pid, named=b"dimmer"):
    """The processes whose parent is pid and whose command line has named, by pid."""
    kids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != pid:
                    continue
            with open("/proc/%s/cmdline" % name, "rb") as f:
                if named in f.read():
                    kids.append(Pid(int(name)))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return kids


SIGUSR2_READY = re.compile(r"dimmer\[(\d+)\]: info: SIGUSR2: the new process \(pid (\d+)\) is ready")


class DimmerTest(unittest.TestCase):
    """A test case with a temp dir and process helpers; logs printed on failure."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dimmer-it-")
        self.procs = []
        self.addCleanup(self._kill_strays)  # the last cleanup to run
        self.addCleanup(self._stop_all)

    def _kill_strays(self):
        """Kills (and reaps) the dimmers left below this process that no Proc owns."""
        owned = set(p.p.pid for p in _live) | set(p.p.pid for p in self.procs)
        # Those killed before (Pid.kill) are zombies now, with no command line.
        for k in children(os.getpid(), named=b""):
            if k.pid in owned:
                continue
            try:
                with open("/proc/%d/cmdline" % k.pid, "rb") as f:
                    if not gone(k.pid) and b"dimmer" not in f.read():
                        continue
            except FileNotFoundError:
                pass
            k.kill()
            try:
                os.waitpid(k.pid, 0)
            except ChildProcessError:
                pass

    def mark_tls(self, d):
        """Conn speaks TLS to d's listeners until the test ends (a port number is reused later)."""
        self._tls_marked = getattr(self, "_tls_marked", []) + list(d.ports)
        tls_ports.update(d.ports)

    def _stop_all(self):
        for p in reversed(self.procs):
            p.kill()
        tls_ports.difference_update(getattr(self, "_tls_marked", []))
        # A sanitizer report fails the test even when every request looked fine.
        found = []
        for p in self.procs:
            text = p.stderr()
            for marker in SANITIZER_MARKERS:
                i = text.find(marker)
                if i >= 0:
                    found.append("%s: %s" % (p.name, text[max(0, i - 200):i + 3000]))
                    break
        if found:
            raise AssertionError("sanitizer report:\n" + "\n".join(found))

    def run(self, result=None):
        if result is None:
            result = self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        started = time.monotonic()
        try:
            return super().run(result)
        finally:
            if len(result.failures) + len(result.errors) > before:
                self.dump_logs()
            if os.environ.get("DIMMER_IT_TIMES"):
                sys.stderr.write("  [%.2fs] %s\n" % (time.monotonic() - started, self.id()))
            tmp = getattr(self, "tmp", None)
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def dump_logs(self):
        for p in getattr(self, "procs", []):
            for what, text in (("stdout", p.stdout()), ("stderr", p.stderr())):
                if text.strip():
                    sys.stderr.write("---- %s %s (%s) ----\n%s\n" %
                                     (p.name, what, " ".join(p.argv[1:]), text[-20000:]))
        for extra in getattr(self, "extra_logs", []):
            text = _read_text(extra)
            if text.strip():
                sys.stderr.write("---- %s ----\n%s\n" % (os.path.basename(extra), text[-20000:]))

    def assert_usage_error(self, binary, args, what):
        """binary with args exits 2 with one line on stderr that contains what."""
        p = self.start_proc("bad%d" % len(self.procs), [binary] + list(args))
        self.assertEqual(p.wait(10), 2, args)
        err = p.stderr().strip().splitlines()
        self.assertEqual(len(err), 1, err)
        self.assertIn(what, err[0])

    def path(self, name):
        return os.path.join(self.tmp, name)

    def start_proc(self, name, argv, env=None):
        p = Proc(name, argv, self.tmp, env)
        self.procs.append(p)
        return p

    def start_fault_backend(self):
        """fault_backend.py on 127.0.0.1:0, once it listens."""
        p = self.start_proc("fault-backend", [sys.executable, FAULT_BACKEND, "--listen",
                                              "%s:0" % HOST])

        def bound():
            if not p.alive():
                raise AssertionError("fault backend exited: %s" % p.stderr())
            for line in p.stdout().splitlines():
                if line.startswith("fault-backend listening on "):
                    return int(line.rsplit(":", 1)[1])
            return None

        port = wait_until(bound, START_TIMEOUT, "the fault backend to listen")
        return FaultBackend(p, port)

    def start_backend(self, name, port=0):
        """A dimmer-backend named name; port 0 lets it pick (read back from its stdout)."""
        p = self.start_proc("backend-%s-%d" % (name, len(self.procs)),
                            [DIMMER_BACKEND, "--listen", "%s:%d" % (HOST, port), "--name", name])

        def bound():
            if not p.alive():
                raise AssertionError("backend %s exited: %s" % (name, p.stderr()))
            for line in p.stdout().splitlines():
                if " listening on " in line:
                    return int(line.rsplit(":", 1)[1])
            return None

        bound_port = wait_until(bound, START_TIMEOUT, "backend %s to listen" % name)
        wait_port(bound_port, proc=p)
        return Backend(p, name, bound_port)

    def start_node(self, *args, name="node"):
        """
        A dimmer-backend with args (the node options: --control 127.0.0.1:0,
        --boot-ms, ...), once it listens on every address it was asked for.
        """
        args = [str(a) for a in args]
        p = self.start_proc("node-%s-%d" % (name, len(self.procs)),
                            [DIMMER_BACKEND, "--listen", "%s:0" % HOST, "--name", name] + args)
        want = {"listening"} | {k for k in ("control", "wol") if "--" + k in args}

        def bound():
            if not p.alive():
                raise AssertionError("backend %s exited: %s" % (name, p.stderr()))
            ports = {}
            for line in p.stdout().splitlines():
                m = NODE_LINE.match(line)
                if m and m.group(1) == name:
                    ports[m.group(2)] = int(m.group(4))
            return ports if want <= set(ports) else None

        # Printed once listening; no probe connection, which a node started
        # asleep would count as refused.
        ports = wait_until(bound, START_TIMEOUT, "node %s's addresses" % name)
        return Node(p, name, ports)

    def write_config(self, text, name="dimmer.yaml"):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_dimmer(self, pools, admin=True, **kw):
        """dimmer with one worker (unless workers=) in front of pools (see yaml_config)."""
        conf = self.write_config(yaml_config(0, pools, admin=0 if admin else None, **kw))
        return self.start_dimmer_conf(conf)

    def reload_config(self, text):
        """Writes text over self.d's config file, SIGHUP, waits for the new generation."""
        gen = self.d.admin_stats()["generation"]
        with open(self.d.conf_path, "w") as f:
            f.write(text)
        self.d.proc.signal(signal.SIGHUP)
        wait_until(lambda: self.d.admin_stats()["generation"] > gen, 10, "the reload")

    def start_dimmer_conf(self, conf, env=None, wrapper=()):
        """dimmer -c conf, whose listen and admin addresses should have port 0."""
        return self.start_dimmer_args(["-c", conf], conf, env=env, wrapper=wrapper)

    def start_dimmer_args(self, args, conf_path=None, env=None, wrapper=()):
        """
        dimmer with args and a --ports-file in the temp dir; returns a Dimmer
        once the file is there, that is once every listener listens. wrapper:
        a command that execs it (prlimit with its options, say).
        """
        name = "dimmer-%d" % len(self.procs)
        ports_file = self.path(name + ".ports")
        p = self.start_proc(name, list(wrapper) + [DIMMER] + list(args) +
                            ["--ports-file", ports_file], env=env)

        def ready():
            lines = read_ports_file(ports_file)
            if lines is None and not p.alive():
                raise AssertionError("%s exited (code %s) before listening:\n%s" %
                                     (name, p.p.returncode, p.stderr()))
            return lines

        lines = wait_until(ready, START_TIMEOUT, "%s to write %s" % (name, ports_file))
        d = Dimmer(p, lines, conf_path, ports_file)
        if TLS:
            self.mark_tls(d)
        return d

    def sigusr2(self, d, pid, ready_then=None, log=None):
        """
        SIGUSR2 to pid, the dimmer d serving now (d.proc's or one a SIGUSR2
        started): the new process's pid once it is ready and pid has exited
        (ready_then() is called in between, once the new one is ready).
        The new one logs to d.proc's stderr, or where log() reads (error_log);
        it is killed at the end.
        """
        log = log or d.proc.stderr
        seen = len(SIGUSR2_READY.findall(log()))
        os.kill(pid, signal.SIGUSR2)

        def ready():
            found = SIGUSR2_READY.findall(log())
            return found[seen] if len(found) > seen else None

        old, new = wait_until(ready, 30, "the new process to be ready")
        self.assertEqual(int(old), pid)
        new = Pid(int(new))
        self.addCleanup(new.kill)
        if ready_then is not None:
            ready_then()
        wait_until(lambda: gone(pid), 20, "the old process to drain and exit")
        self.assertTrue(new.alive())
        if d.admin is not None:
            ADMIN_PORTS[d.admin] = new
        return new.pid

    def served_meanwhile(self, path="/bytes/16", bound=STALL_BOUND):
        """
        A request on a connection of its own is answered whole within bound
        while a fault runs elsewhere: no worker stalls (a stalled one would
        not answer at all; the bound leaves room for a loaded machine).
        """
        start = time.monotonic()
        r = get(self.d.port, path, timeout=bound + 2)
        took = time.monotonic() - start
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, pattern(int(path.rsplit("/", 1)[1])))
        self.assertLess(took, bound, "a request took %.2fs during a fault" % took)

    def pool(self, *backends, balance="roundrobin", health_check=None, passive=None):
        p = {"balance": balance, "servers": [(b.name, b.port) for b in backends]}
        if health_check is not None:
            p["health_check"] = health_check
        if passive is not None:
            p["passive"] = passive
        return p


def main():
    unittest.main(verbosity=2)


def fds(pid):
    """Open descriptors of process pid."""
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_kib(pid):
    """Resident memory of process pid, KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")

