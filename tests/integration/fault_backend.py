"""
A faulty HTTP/1.1 server for dimmer's fault injection tests
(test_backend_faults.py): python3, standard library only.

    python3 fault_backend.py [--listen 127.0.0.1:0]

Prints "fault-backend listening on HOST:PORT" once it listens. One request per
connection (a GET without a body); the path chooses the behaviour:

  /fault/die_mid          head with Content-Length: 100000 and 1000 body bytes, hold, close
  /fault/die_mid_chunked  chunked head and one 1000-byte chunk, hold, close (no last chunk)
  /fault/silent           reads the request, never answers (until the peer closes)
  /fault/reset            reads the request, then resets the connection (RST)
  /fault/half_status      "HTTP/1.1 20", hold, close
  /fault/malformed        a head with a header line without a colon, then waits for the close
  /fault/trickle          a whole 200 response (head and body) one byte every 200 ms
  /fault/trickle_body     the head at once (Content-Length: 50), then the body one byte every 200 ms
  /fault/overlong         Content-Length: 5 and 30 bytes in one write, then waits for the close
  /fault/close_next       200 "ok", keeping the connection; the next request on it is read
                          ("got next PATH") and the connection closed unanswered, as a server
                          closing an idle keep-alive connection just as a request comes
  /fault/reset_next       the same, the connection reset (RST) instead
  /fault/interim          60 interim 103 responses of 600 bytes each, then 200 "ok"
  /fault/interim_flood    the same with 600 of them
  /fault/hinted           two 103 Early Hints, then 200 "ok" with Connection: close
  /fault/status999        a response with status 999
  /fault/endless_head     a head of 1 MiB that does not end, then waits for the close
  /fault/badchunk         a chunked 200 head, then "zz" as the first chunk size
  /fault/switch           101 Switching Protocols, asked or not; prints "tunneled LINE" if
                          anything comes after it
  /fault/switch_bare      the same without Connection: upgrade, then a 200 head in the same
                          write that names hop-by-hop fields (Connection: close, X-Secret)
  /fault/held_chunked     a chunked 200 head (Connection: close), hold, then its body: the
                          chunks "hello" and "abc" and the last chunk, in one write
  /fault/big_head         a 200 whose head, 20 KB of fields, goes in one write
  /fault/ok               200 "ok" with Connection: close
  /fault/end_NAME         a chunked 200 (Trailer: X-Sum) with one chunk "hello", then the
                          end ENDINGS[NAME] (a last chunk and a trailer section), then close
  /fault/framed_204       a 103 with Content-Length: 0, then a 204 with Transfer-Encoding: chunked
                          (Connection: close)
  /fault/length_204       a 204 with Content-Length: 0 (Connection: close)
  /fault/te10_next        an HTTP/1.0 chunked 200 "ok" with Connection: keep-alive; the next
                          request on the connection is read ("got next PATH") and answered "ok"
  /fault/gzip_chunked     a 200 with Transfer-Encoding: gzip, then Transfer-Encoding: chunked
                          (a 2-byte chunk), Connection: close
  /fault/early401         once the request head is read (its body may not be), a 401 with
                          Content-Length: 4 ("nope"), the connection kept; waits for the close
  /fault/split_end        the same with the good end, its bytes one every 20 ms after the data
  /fault/bodiless         responses without a body, the connection kept: a 204, a 304 with
                          Content-Length: 10, a 200 with Content-Length: 0, in turn, to this
                          request and every next one on the connection
  anything else           200 "ok" with Connection: close

"hold" waits until GET /release (on this server, from the test) or 10 s. Each
fault prints "got MODE" on stdout (flushed) once its request is read, and
"done MODE" once it is over, so that a test waits for events, not for time.
"""
import argparse
import socket
import struct
import sys
import threading
import time

HOLD_MAX = 10.0
TRICKLE_S = 0.2

# How a chunked body ends (/fault/end_NAME): "good" is the only well-formed one.
ENDINGS = {
    "good": b"0\r\nX-Sum: 1\r\n\r\n",
    "lf": b"0\r\n\n",
    "lf_field": b"0\r\nX-T: 1\r\n\n",
    "length": b"0\r\nContent-Length: 5\r\n\r\n",
    "te": b"0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "connection": b"0\r\nConnection: close\r\n\r\n",
    "empty_name": b"0\r\n: x\r\n\r\n",
    "fold": b"0\r\nX-A: 1\r\n folded\r\n\r\n",
    "big": b"0\r\nX-Big: " + b"a" * 220000 + b"\r\n\r\n",
    "many": b"0\r\n" + b"A:1\r\n" * 2000 + b"\r\n",
    "long_ext": b"0;e=" + b"x" * 5000 + b"\r\n\r\n",
}

release = threading.Event()
out_lock = threading.Lock()


def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            return None
        buf += data
    return buf


def wait_close(s, timeout=HOLD_MAX):
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass


def trickle(s, data):
    for i in range(len(data)):
        s.sendall(data[i:i + 1])
        time.sleep(TRICKLE_S)


def handle(s):
    mode = None
    try:
        head = read_head(s)
        if head is None:
            return
        path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
        if path == "/release":
            release.set()
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\n"
                      b"released")
            return
        if not path.startswith("/fault/"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            return
        mode = path[len("/fault/"):]
        release.clear()
        say("got " + mode)
        if mode == "die_mid":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            release.wait(HOLD_MAX)
        elif mode == "die_mid_chunked":
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"3e8\r\n" + b"x" * 1000 + b"\r\n")
            release.wait(HOLD_MAX)
        elif mode == "silent":
            wait_close(s)
        elif mode == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif mode == "half_status":
            s.sendall(b"HTTP/1.1 20")
            release.wait(HOLD_MAX)
        elif mode == "malformed":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nNo colon here\r\n\r\nhello")
            wait_close(s)
        elif mode == "trickle":
            trickle(s, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")
        elif mode == "trickle_body":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")
            trickle(s, b"y" * 50)
        elif mode in ("close_next", "reset_next"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            nxt = read_head(s)
            if nxt is not None:
                say("got next " + nxt.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1"))
                if mode == "reset_next":
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif mode in ("interim", "interim_flood"):
            # 103s of 600 bytes: 60 of them (36 KB, more than a read buffer) then a 200,
            # or 600 of them (more than dimmer takes) then a 200.
            hint = b"HTTP/1.1 103 Early Hints\r\nLink: </" + b"a" * 555 + b">\r\n\r\n"
            s.sendall(hint * (60 if mode == "interim" else 600) +
                      b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif mode == "hinted":
            s.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" * 2 +
                      b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif mode == "endless_head":
            s.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (1 << 20))
            wait_close(s)
        elif mode == "status999":
            s.sendall(b"HTTP/1.1 999 Nine\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif mode == "badchunk":
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            wait_close(s)
        elif mode == "switch":
            s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: upgrade\r\n\r\n")
            s.settimeout(HOLD_MAX)
            data = s.recv(65536)
            if data:
                say("tunneled " + data.split(b"\r\n", 1)[0].decode("latin-1"))
        elif mode == "switch_bare":
            s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
                      b"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: s\r\n"
                      b"Content-Length: 4\r\n\r\nbody")
            wait_close(s)
        elif mode == "held_chunked":
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
                      b"\r\n")
            release.wait(HOLD_MAX)
            s.sendall(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")
        elif mode == "big_head":
            s.sendall(b"HTTP/1.1 200 OK\r\n" +
                      b"".join(b"X-Pad%d: %s\r\n" % (i, b"a" * 1000) for i in range(20)) +
                      b"Content-Length: 2\r\nConnection: close\r\n\r\nok")
            wait_close(s)
        elif mode.startswith("end_"):
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                      b"5\r\nhello\r\n" + ENDINGS[mode[4:]])
        elif mode == "framed_204":
            s.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nContent-Length: 0\r\n\r\n"
                      b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n"
                      b"Connection: close\r\n\r\n")
        elif mode == "length_204":
            s.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        elif mode == "te10_next":
            s.sendall(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
                      b"\r\n2\r\nok\r\n0\r\n\r\n")
            nxt = read_head(s)
            if nxt is not None:
                say("got next " + nxt.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1"))
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif mode == "gzip_chunked":
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"
                      b"Connection: close\r\n\r\n2\r\nzz\r\n0\r\n\r\n")
        elif mode == "early401":
            s.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nnope")
            wait_close(s)
        elif mode == "split_end":
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello")
            for b in b"\r\n3\r\nabc\r\n" + ENDINGS["good"]:
                time.sleep(0.02)
                s.sendall(bytes([b]))
        elif mode == "bodiless":
            answers = (b"HTTP/1.1 204 No Content\r\n\r\n",
                       b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
                       b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            n = 0
            while head is not None:
                s.sendall(answers[n % 3])
                n += 1
                head = read_head(s)
        elif mode == "ok":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        elif mode == "overlong":
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                      b"EXTRA-BYTES-PAST-THE-BODY")
            wait_close(s)
        else:
            s.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass  # the peer went away: the fault is over all the same
    finally:
        s.close()
        if mode is not None:
            say("done " + mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(128)
    say("fault-backend listening on %s:%d" % ls.getsockname())
    while True:
        s, _ = ls.accept()
        threading.Thread(target=handle, args=(s,), daemon=True).start()


if __name__ == "__main__":
    main()
