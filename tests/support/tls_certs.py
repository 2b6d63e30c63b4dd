"""Certificates for the TLS tests, made with the `openssl` command in a temp directory.

make_certs(dir) writes and returns the paths of:
  ca.pem / ca.key          the test CA
  server.pem / server.key  signed by it, SANs IP:127.0.0.1 and DNS:localhost
  client.pem / client.key  signed by it (extendedKeyUsage clientAuth)
  expired.pem / .key       signed by it for 127.0.0.1, expired yesterday
  othername.pem / .key     signed by it, SAN DNS:redis.invalid only (a host name mismatch
                           for 127.0.0.1)
  other_ca.pem             another CA, and other.pem / other.key: a 127.0.0.1 server
                           certificate it signed (unknown to clients trusting ca.pem)
EC P-256 keys: quick to make.  Debian's `openssl` package provides the command.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _run(args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: str, name: str) -> None:
    # keyUsage and the key identifiers: Python 3.13's default context verifies strictly
    # (VERIFY_X509_STRICT) and refuses a CA without keyUsage, a leaf without its AKI.
    _run(["req", "-x509", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30",
          "-subj", f"/CN=ling_bloom test {name}",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)


def _leaf(d: str, name: str, ca: str, san: str, days: int = 30, usage: str = "serverAuth") -> None:
    _run(["req", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"], d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        if san:
            f.write(f"subjectAltName={san}\n")
        f.write(f"extendedKeyUsage={usage}\n")
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    # days = -1: notAfter before now, i.e. expired (openssl 3.0 accepts it)
    _run(["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
          "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days), "-extfile",
          f"{name}.ext"], d)


def make_certs(d: str) -> Dict[str, str]:
    if not shutil.which("openssl"):
        raise RuntimeError("the openssl command is not installed (Debian: apt-get install openssl)")
    _ca(d, "ca")
    _ca(d, "other_ca")
    _leaf(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
    _leaf(d, "client", "ca", "", usage="clientAuth")
    _leaf(d, "expired", "ca", "IP:127.0.0.1", days=-1)
    _leaf(d, "othername", "ca", "DNS:redis.invalid")
    _leaf(d, "other", "other_ca", "IP:127.0.0.1")
    out = {}
    for name in ("ca", "other_ca", "server", "client", "expired", "othername", "other"):
        out[name] = os.path.join(d, f"{name}.pem")
        out[name + "_key"] = os.path.join(d, f"{name}.key")
    return out


def server_args(certs: Dict[str, str], cert: str = "server", auth_clients: bool = False):
    """redis-server options for a TLS port serving certs[cert]."""
    return ["--tls-cert-file", certs[cert], "--tls-key-file", certs[cert + "_key"],
            "--tls-ca-cert-file", certs["ca"],
            "--tls-auth-clients", "yes" if auth_clients else "no"]
