#!/usr/bin/env python3
"""Seeds for fuzz_resp that a real Redis answered: the client gets as far as the
per-chunk reply checks of both RedisFilter layouts.

A seed of fuzz_resp is a 4-byte header and the reply to each request the client sends
(fuzz_resp.c).  Hand-written seeds stop at the first requests (the meta look), and a brief
run (make fuzz-brief, 20 s) does not get from there to the replies of an add or a test.
This script builds seeds whose replies are a real redis-server's:

  1. run the input so far (header + the replies known) through fuzz_resp once, with
     LB_FUZZ_RECORD set, which records every request the client sends;
  2. the first request without a reply goes to a real redis-server (started here on a
     free port of 127.0.0.1, stopped at the end), and its replies are the next chunk;
  3. again, until the client asks nothing new.

A seed adds four keys, and the seeds after it test them, so a test's replies are of a
filter that holds them; the blocked layout's seeds start from an empty server again.  The seeds are written to corpus/resp/real-*:

    make -C fuzz ../build/fuzz/fuzz_resp   # the target (make fuzz builds it too)
    python fuzz/make_resp_seeds.py  # rewrites fuzz/corpus/resp/real-*
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
from redis_server import RawRedis, RedisServer  # noqa: E402

SEP = b"\n--\n"
SHAPE = 3 | (6 << 2)  # four keys, k = 7 (the blocked layout takes k = 16)
BLOCKED = 64
# (name, header): byte 0 is 3 for an add, 6 for a test of a RedisFilter (fuzz_resp.c: kind
# = op % 3, operation = op / 3); byte 1 the flags (1: SETBIT mode); byte 3 picks m.
# Each group starts from an empty server (the two layouts refuse each other's key).
GROUPS = [
    [("real-add", bytes([3, 0, SHAPE, 0])),
     ("real-test", bytes([6, 0, SHAPE, 0])),
     ("real-setbit-test", bytes([6, 1, SHAPE, 0]))],
    [("real-blocked-add", bytes([3, 0, SHAPE | BLOCKED, 1])),
     ("real-blocked-test", bytes([6, 0, SHAPE | BLOCKED, 1]))],
]


def read_reply(f) -> bytes:
    """The bytes of one RESP2 reply from f."""
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError("the server closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind in (b"+", b"-", b":"):
        return line
    if kind == b"$":
        n = int(body)
        return line + (f.read(n + 2) if n >= 0 else b"")
    if kind == b"*":
        n = int(body)
        return line + b"".join(read_reply(f) for _ in range(max(n, 0)))
    raise ValueError(f"unexpected reply type {kind!r}")


def count_commands(req: bytes) -> int:
    """How many RESP commands (arrays of bulk strings) a request holds."""
    n, i = 0, 0
    while i < len(req):
        assert req[i:i + 1] == b"*", req[i:i + 20]
        end = req.index(b"\r\n", i)
        args = int(req[i + 1:end])
        i = end + 2
        for _ in range(args):
            end = req.index(b"\r\n", i)
            i = end + 2 + int(req[i + 1:end]) + 2
        n += 1
    return n


def build(binary: str, header: bytes, server: RedisServer, work: Path) -> bytes:
    replies: list[bytes] = []
    sock = socket.create_connection(("127.0.0.1", server.port))
    f = sock.makefile("rb")
    try:
        for _ in range(32):
            data = header + SEP.join(replies)
            (work / "input").write_bytes(data)
            rec = work / "requests"
            rec.unlink(missing_ok=True)
            subprocess.run([binary, str(work / "input")], env={**os.environ,
                           "LB_FUZZ_RECORD": str(rec)}, capture_output=True, check=True,
                           timeout=60)
            reqs = rec.read_bytes().split(SEP)[:-1] if rec.exists() else []
            if len(reqs) <= len(replies):
                return data  # the client asked nothing new: every request has its reply
            req = reqs[len(replies)]
            sock.sendall(req)
            replies.append(b"".join(read_reply(f) for _ in range(count_commands(req))))
        raise RuntimeError("the client kept asking after 32 requests")
    finally:
        f.close()
        sock.close()


def main() -> int:
    binary = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent / "build" / "fuzz" / "fuzz_resp")
    if not os.access(binary, os.X_OK):
        print(f"{binary}: not built (make -C fuzz ../build/fuzz/fuzz_resp)", file=sys.stderr)
        return 2
    out = HERE / "corpus" / "resp"
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        for group in GROUPS:
            with RawRedis(server.port) as raw:
                raw.command("FLUSHALL")
            for name, header in group:
                seed = build(binary, header, server, Path(tmp))
                (out / name).write_bytes(seed)
                print(f"{name}: {seed.count(SEP) + 1} replies, {len(seed)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
