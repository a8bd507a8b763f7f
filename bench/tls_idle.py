#!/usr/bin/env python3
"""Hold N idle HTTPS/1.1 keep-alive connections to a TLS server on 127.0.0.1
and report how much the server's RSS (VmRSS of --pid, comma list summed) grows.

A copy of ../shared/bench/idle_conns.py for TLS (bench/tls.sh --idle N).
Phases: baseline -> N connections opened, TLS handshake done (no request) ->
one GET on each connection, response read, connection left open in
keep-alive -> close all. Prints one line; the whole run is bounded by
--timeout seconds."""
import argparse
import asyncio
import resource
import ssl


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


async def connect(port, ctx, sni, sem, conns):
    async with sem:
        conns.append(await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname=sni, ssl_handshake_timeout=30))


async def get(reader, writer, path, sni, sem):
    async with sem:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {sni}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        return head.startswith(b"HTTP/1.1 200")


async def run(a):
    pids = [int(p) for p in a.pid.split(",")]
    ctx = ssl.create_default_context(cafile=a.cafile) if a.cafile else ssl.SSLContext(
        ssl.PROTOCOL_TLS_CLIENT)
    if not a.cafile:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    if a.tls:
        v = ssl.TLSVersion.TLSv1_3 if a.tls == "1.3" else ssl.TLSVersion.TLSv1_2
        ctx.minimum_version = ctx.maximum_version = v
    sem = asyncio.Semaphore(a.batch)
    conns = []
    base = rss_kib(pids)
    await asyncio.gather(*(connect(a.port, ctx, a.sni, sem, conns) for _ in range(a.n)))
    await asyncio.sleep(a.settle)
    opened = rss_kib(pids)
    ok = await asyncio.gather(*(get(r, w, a.path, a.sni, sem) for r, w in conns))
    await asyncio.sleep(a.settle)
    after = rss_kib(pids)
    proto = conns[0][1].get_extra_info("ssl_object").version() if conns else "-"
    print(f"conns={len(conns)} ok={sum(ok)} {proto} rss_kib base={base} opened={opened} "
          f"after_request={after}  KiB/conn: opened={(opened - base) / a.n:.2f} "
          f"keepalive={(after - base) / a.n:.2f}", flush=True)
    for _, w in conns:
        w.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", required=True, help="PID(s) whose VmRSS is summed")
    p.add_argument("-n", type=int, default=5000, help="connections (5000)")
    p.add_argument("--path", default="/1k")
    p.add_argument("--sni", default="localhost", help="SNI and Host (localhost)")
    p.add_argument("--cafile", help="verify the server against this CA (default: no check)")
    p.add_argument("--tls", choices=["1.2", "1.3"], help="only this TLS version")
    p.add_argument("--batch", type=int, default=100, help="concurrent connects/requests")
    p.add_argument("--settle", type=float, default=1.0, help="seconds before each RSS read")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.n + 1024
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(asyncio.wait_for(run(a), a.timeout))


if __name__ == "__main__":
    main()
