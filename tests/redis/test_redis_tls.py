"""TLS (rediss://, ssl_* keywords) against a real redis-server with a --tls-port.

The certificates come from tests/support/tls_certs.py (the `openssl` command, a temp
directory): a CA, a server certificate for 127.0.0.1/localhost, a client certificate, an
expired one, one naming another host, and one from another CA.  The servers listen on
127.0.0.1 only, TLS on a free port (plain --port 0), readiness checked on their plain unix
socket."""
import shutil

import pytest

import ling_bloom as lb
from ling_bloom import RedisBloomFilter, RedisFilter

from redis_server import connections_received, exit_code_in_forked_child
from tls_certs import make_certs, server_args

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture
def tls_server(redis_server_factory, certs):
    def make(cert="server", auth_clients=False):
        return redis_server_factory(server_args(certs, cert, auth_clients), tls=True)

    return make


def connects(srv, **kw):
    """Open a RedisFilter on srv and make it talk (a round trip)."""
    with RedisFilter("tls:k", 1000, 0.01, url=srv.url, socket_connect_timeout=5,
                     socket_timeout=5, **kw) as f:
        f.add("x")
        return f.test("x")


@pytest.mark.servers
def test_verified_connection_redis_filter(tls_server, certs):
    srv = tls_server()
    with RedisFilter("tls:bf", 10_000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"]) as f:
        assert f.add("a") is True
        assert f.test("a") is True and f.test("b") is False
        keys = [f"k{i}" for i in range(5000)]
        f.add_many(keys)
        assert f.test_many(keys) == [True] * len(keys)
        assert sum(f.test_many([f"other{i}" for i in range(2000)])) < 100
    # the bits really landed in the server (read on its plain unix socket)
    with srv.client() as c:
        assert c.command("EXISTS", "tls:bf") == 1


def test_url_query_options(tls_server, certs):
    srv = tls_server()
    url = f"{srv.url}?ssl_ca_certs={certs['ca']}&ssl_cert_reqs=required"
    with RedisFilter.from_url(url, "tls:q", 1000) as f:
        f.add("a")
        assert f.test("a")
    with RedisFilter.from_url(f"{srv.url}?ssl_cert_reqs=none", "tls:q", 1000) as f:
        assert f.test("a")
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        RedisFilter.from_url(f"{srv.url}?ssl_cert_reqs=sometimes", "tls:q", 1000)


@pytest.mark.servers
def test_verified_connection_redisbloom(bf_server_factory, certs):
    srv = bf_server_factory(server_args(certs), tls=True)
    with RedisBloomFilter("tls:rb", 10_000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"]) as f:
        assert f.add("a") is True
        assert f.test("a") is True and f.test("b") is False
        keys = [f"k{i}" for i in range(3000)]
        f.add_many(keys)
        assert f.test_many(keys) == [True] * len(keys)
        assert f.card() >= 3000


def test_system_cas_do_not_trust_a_private_ca(tls_server):
    srv = tls_server()
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
        connects(srv)


def test_wrong_ca(tls_server, certs):
    srv = tls_server("other")
    with pytest.raises(lb.RedisConnectionError,
                       match="certificate verify failed: unable to get local issuer certificate"):
        connects(srv, ssl_ca_certs=certs["ca"])
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
        RedisBloomFilter("tls:rb", 100, url=srv.url, ssl_ca_certs=certs["ca"]).add("a")


def test_wrong_host_name(tls_server, certs):
    srv = tls_server("othername")  # SAN: DNS:redis.invalid only
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed: IP address mismatch"):
        connects(srv, ssl_ca_certs=certs["ca"])
    # the chain is still checked without the name check, and then it is accepted
    assert connects(srv, ssl_ca_certs=certs["ca"], ssl_check_hostname=False)
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
        connects(srv, ssl_check_hostname=False)  # no CA: chain not trusted


def test_localhost_name_is_verified(tls_server, certs):
    srv = tls_server()  # SAN has DNS:localhost; the server listens on 127.0.0.1
    url = f"rediss://localhost:{srv.port}"
    try:
        f = RedisFilter("tls:n", 100, url=url, ssl_ca_certs=certs["ca"], socket_connect_timeout=5)
        f.add("a")
    except lb.RedisConnectionError as e:  # localhost resolving to ::1 only
        if "certificate" in str(e) or "TLS" in str(e):
            raise
        pytest.skip(f"localhost does not reach 127.0.0.1 here: {e}")
    assert f.test("a")
    f.close()


def test_cert_reqs_none_accepts_anything(tls_server):
    for cert in ("other", "expired", "othername"):
        srv = tls_server(cert)
        assert connects(srv, ssl_cert_reqs="none")
        assert connects(srv, ssl_cert_reqs=None)  # redis-py: None = CERT_NONE
        import ssl
        assert connects(srv, ssl_cert_reqs=ssl.CERT_NONE)


def test_expired_certificate(tls_server, certs):
    srv = tls_server("expired")
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed: certificate has expired"):
        connects(srv, ssl_ca_certs=certs["ca"])
    with pytest.raises(lb.RedisConnectionError, match="certificate has expired"):
        connects(srv, ssl_ca_certs=certs["ca"], ssl_cert_reqs="optional")


def test_client_certificate_required(tls_server, certs):
    srv = tls_server(auth_clients=True)
    with pytest.raises(lb.RedisConnectionError) as ei:
        connects(srv, ssl_ca_certs=certs["ca"])
    assert "client certificate" in str(ei.value)
    with pytest.raises(lb.RedisConnectionError, match="client certificate"):
        connects(srv, ssl_ca_certs=certs["ca"], ssl_certfile=certs["other"],
                 ssl_keyfile=certs["other_key"])  # signed by a CA the server does not trust
    assert connects(srv, ssl_ca_certs=certs["ca"], ssl_certfile=certs["client"],
                    ssl_keyfile=certs["client_key"])
    with RedisBloomFilter("tls:cc", 100, url=srv.url, ssl_ca_certs=certs["ca"],
                          ssl_certfile=certs["client"], ssl_keyfile=certs["client_key"]):
        pass  # connects lazily; the RedisFilter round trip above is the proof


def test_missing_files_are_clear(tls_server, certs, tmp_path):
    srv = tls_server()
    missing = str(tmp_path / "nope.pem")
    for kw in ("ssl_ca_certs", "ssl_certfile", "ssl_ca_path"):
        with pytest.raises(FileNotFoundError, match="nope.pem"):
            RedisFilter("tls:m", 100, url=srv.url, **{kw: missing})
    with pytest.raises(FileNotFoundError):
        RedisFilter("tls:m", 100, url=srv.url, ssl_certfile=certs["client"], ssl_keyfile=missing)
    with pytest.raises(ValueError, match="ssl_certfile"):
        RedisFilter("tls:m", 100, url=srv.url, ssl_keyfile=certs["client_key"])
    # a file that is no certificate
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(lb.RedisConnectionError, match="CA certificates"):
        connects(srv, ssl_ca_certs=str(junk))
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        RedisFilter("tls:m", 100, url=srv.url, ssl_cert_reqs="maybe")
    with pytest.raises(TypeError):
        RedisFilter("tls:m", 100, url=srv.url, ssl_ca_certs=42)


def test_plain_server_on_the_tls_port(redis_server):
    url = f"rediss://127.0.0.1:{redis_server.port}"
    with pytest.raises((lb.RedisConnectionError, lb.RedisTimeoutError)) as ei:
        RedisFilter("tls:p", 100, url=url, ssl_cert_reqs="none", socket_connect_timeout=3).add("a")
    assert "TLS" in str(ei.value)


def test_tls_server_with_plain_url(tls_server):
    srv = tls_server()
    url = f"redis://127.0.0.1:{srv.port}"
    with pytest.raises((lb.RedisConnectionError, lb.RedisTimeoutError)):
        RedisFilter("tls:p", 100, url=url, socket_connect_timeout=3, socket_timeout=3).add("a")


def test_forked_child_reconnects(tls_server, certs):
    srv = tls_server()
    f = RedisFilter("tls:fork", 10_000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"])
    f.add("parent")
    raw = srv.client()  # one plain (unix) connection for INFO, opened before counting
    before = connections_received(raw)
    assert exit_code_in_forked_child(
        lambda: f.test("parent") and f.add("child")
        and f.test_many(["parent", "child"]) == [True, True]) == 0
    assert connections_received(raw) == before + 1  # the child opened its own connection
    # the parent's TLS session was not touched (a byte written on it by the child would break
    # its record sequence): still in step, and no reconnect was needed
    for i in range(20):
        assert f.add(f"p{i}") is True
        assert f.test_many(["parent", "child", f"p{i}"]) == [True, True, True]
    assert connections_received(raw) == before + 1
    f.close()
    raw.close()


def test_big_pipelines(tls_server, certs):
    # megabytes each way: partial TLS writes while replies are read
    srv = tls_server()
    with RedisFilter("tls:big", 400_000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"],
                     chunk_size=200_000) as f:
        keys = [f"key-{i:08d}" for i in range(300_000)]
        f.add_many(keys)
        assert all(f.test_many(keys))


def test_operation_timeout_paused_server(tls_server, certs):
    srv = tls_server()
    f = RedisFilter("tls:t", 1000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"], socket_timeout=0.5)
    f.add("a")
    srv.pause()
    try:
        with pytest.raises(lb.RedisTimeoutError):
            f.test("a")
        g = RedisFilter("tls:t2", 1000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"],
                        socket_connect_timeout=0.5)
        with pytest.raises((lb.RedisTimeoutError, lb.RedisConnectionError)):
            g.add("a")  # the handshake itself is bounded by the connect timeout
    finally:
        srv.resume()
    assert f.test("a") is True  # a new connection after the timeout
    f.close()


def test_server_restart_reconnects(tls_server, certs):
    srv = tls_server()
    f = RedisFilter("tls:r", 1000, 0.01, url=srv.url, ssl_ca_certs=certs["ca"])
    f.add("a")
    srv.restart()  # same port, empty
    with pytest.raises(lb.FilterLostError):  # reconnected: the filter is gone with the server
        f.test("a")
    f.reset()
    assert f.test("a") is False
    f.add("b")
    assert f.test("b") is True
    f.close()


def test_from_redis_copies_tls_settings(tls_server, certs):
    redis = pytest.importorskip("redis")
    srv = tls_server(auth_clients=True)
    client = redis.Redis(host="127.0.0.1", port=srv.port, ssl=True, ssl_ca_certs=certs["ca"],
                         ssl_certfile=certs["client"], ssl_keyfile=certs["client_key"])
    assert client.ping()  # the settings are real for redis-py too
    with RedisFilter.from_redis(client, "tls:fr", 1000) as f:
        f.add("a")
        assert f.test("a")
    assert client.exists("tls:fr") == 1
    with RedisBloomFilter.from_redis(client, "tls:frb", 1000):  # takes the TLS settings too
        pass
    # from a rediss:// URL, and the verification it asks for is kept
    bad = redis.Redis.from_url(f"rediss://127.0.0.1:{srv.port}")  # no CA: must not be trusted
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
        with RedisFilter.from_redis(bad, "tls:fr", 1000) as f:
            f.add("a")
    client.close()


def test_from_redis_copies_a_valkey_py_clients_tls_settings(tls_server, certs):
    valkey = pytest.importorskip("valkey")
    srv = tls_server(auth_clients=True)
    client = valkey.Valkey(host="127.0.0.1", port=srv.port, ssl=True, ssl_ca_certs=certs["ca"],
                           ssl_certfile=certs["client"], ssl_keyfile=certs["client_key"])
    assert client.ping()  # the settings are real for valkey-py too
    with RedisFilter.from_redis(client, "tls:fv", 1000) as f:
        f.add("a")
        assert f.test("a")
    assert client.exists("tls:fv") == 1
    # from a valkeys:// URL, and the verification it asks for is kept
    bad = valkey.Valkey.from_url(f"valkeys://127.0.0.1:{srv.port}")  # no CA: not trusted
    with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
        with RedisFilter.from_redis(bad, "tls:fv", 1000) as f:
            f.add("a")
    client.close()



def test_handshake_with_a_silent_server_times_out(silent_listener):
    # accepts, never answers the ClientHello: the connect timeout bounds the handshake
    url = f"rediss://127.0.0.1:{silent_listener.port}"
    for cls in (RedisFilter, RedisBloomFilter):
        with pytest.raises(lb.RedisTimeoutError, match="TLS handshake"):
            cls("tls:s", 100, url=url, socket_connect_timeout=0.3).add("a")


def test_ssl_false_overrides_the_url(tls_server, certs):
    srv = tls_server()
    # ssl=False: plain TCP to the TLS port, which the server drops (bounded, clear type)
    with pytest.raises((lb.RedisConnectionError, lb.RedisTimeoutError)):
        connects(srv, ssl=False)
    host_kw = dict(host="127.0.0.1", port=srv.port, ssl=True, ssl_ca_certs=certs["ca"])
    with RedisFilter("tls:kw", 100, **host_kw) as f:
        f.add("a")
        assert f.test("a")


def test_rediss_to_a_plain_port_says_no_tls_handshake_came(flavor, clean_redis):
    # A plain Redis given as rediss://: it waits for a command and never answers the
    # client's hello.  Both filters say the handshake did not come, with the hint; the
    # asyncio filter said only "timeout connecting to Redis at ...".
    url = f"rediss://127.0.0.1:{clean_redis.port}"
    with flavor.RedisFilter.from_url(url, "tls:plain", 1000, 0.01, ssl_cert_reqs="none",
                                     socket_connect_timeout=0.3, socket_timeout=5) as f:
        with pytest.raises(lb.RedisTimeoutError) as e:
            f.add("a")
    assert str(e.value) == (f"timeout connecting to Redis at 127.0.0.1:{clean_redis.port}: "
                            f"no TLS handshake within 300 ms (does the server speak TLS on "
                            f"this port?)")


def test_a_certificate_that_fails_verification_is_named_alike_in_both_flavors(
        flavor, tls_server, certs):
    # OpenSSL's reason, as the blocking filter words it; the asyncio filter gave Python's
    # text ("TLS handshake with Redis at ... failed: [SSL: CERTIFICATE_VERIFY_FAILED] ...
    # (_ssl.c:1006)").
    srv = tls_server("expired")
    with flavor.RedisFilter.from_url(srv.url, "tls:exp", 1000, 0.01, ssl_ca_certs=certs["ca"],
                                     socket_connect_timeout=5) as f:
        with pytest.raises(lb.RedisConnectionError) as e:
            f.add("a")
    assert str(e.value) == (f"error connecting to Redis at 127.0.0.1:{srv.port}: TLS handshake "
                            f"failed: certificate verify failed: certificate has expired")
