"""The aarch64 wheel at work under qemu-user, driven from the host (packaging/check_aarch64.sh).

    python3 aarch64_smoke.py ROOT SITE HOST_SITE

ROOT: the arm64 Debian root (its python3.11, run by qemu-aarch64-static with
QEMU_LD_PREFIX=ROOT); SITE: the aarch64 wheel unpacked by pip (--target); HOST_SITE: the
x86_64 wheel of the same version, for the host's side of the round trip.

Against two redis-servers of the host on 127.0.0.1 (tests/support/redis_server.py: one plain,
one TLS with the certificates of tests/support/tls_certs.py), the emulated interpreter adds keys
to a RedisFilter (plain, and over rediss:// on the wheel's own OpenSSL), reads them back,
and the host's x86_64 ling_bloom then finds the same keys in the same Redis strings: both
architectures hash and lay out bits alike.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

root, site, host_site = (os.path.abspath(a) for a in sys.argv[1:4])
tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
sys.path.insert(0, tests)
from redis_server import RedisServer  # noqa: E402
from tls_certs import make_certs, server_args  # noqa: E402

KEYS = 3000
# (run in the temporary folder: `python -c` puts the working directory first on sys.path,
# and a source checkout there has its own ling_bloom/)
ARM = r"""
import os, platform, sys
import ling_bloom
assert platform.machine() == "aarch64", platform.machine()
assert os.path.realpath(ling_bloom.__file__).startswith(os.path.realpath(sys.argv[1])), ling_bloom.__file__
url, tls_url, ca, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
for u, extra in ((url, {}), (tls_url, {"ssl_ca_certs": ca})):
    f = ling_bloom.RedisFilter("smoke", n, 0.001, url=u, **extra)
    f.add_many([f"key-{i}" for i in range(n)])
    assert all(f.test_many([f"key-{i}" for i in range(n)])), u
    false = sum(f.test_many([f"other-{i}" for i in range(n)]))
    assert false < n // 50, (u, false)
    print(f"   aarch64: {u.split(':')[0]}:// RedisFilter: {n} keys added and found, {false} of {n} absent keys reported present")
"""
HOST = r"""
import sys, ling_bloom
url, tls_url, ca, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for u, extra in ((url, {}), (tls_url, {"ssl_ca_certs": ca})):
    f = ling_bloom.RedisFilter("smoke", n, 0.001, url=u, **extra)
    assert all(f.test_many([f"key-{i}" for i in range(n)])), u
print(f"   x86_64 (host): the {n} keys the aarch64 side added are found in both Redis strings")
"""

with tempfile.TemporaryDirectory() as tmp:
    certs = make_certs(tmp)
    with RedisServer() as plain, RedisServer(server_args(certs), tls=True) as tls:
        env = dict(os.environ, QEMU_LD_PREFIX=root, PYTHONPATH=site, PYTHONNOUSERSITE="1")
        subprocess.run(["qemu-aarch64-static", os.path.join(root, "usr/bin/python3.11"), "-c", ARM,
                        site, plain.url, tls.url, certs["ca"], str(KEYS)], env=env, check=True, cwd=tmp)
        subprocess.run([sys.executable, "-c", HOST, plain.url, tls.url, certs["ca"], str(KEYS)],
                       env=dict(os.environ, PYTHONPATH=host_site), check=True, cwd=tmp)
