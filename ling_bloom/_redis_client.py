"""Connection settings of a redis-py client, for RedisFilter.from_redis(client, key).

A valkey-py client (``valkey.Valkey``, ``valkey.asyncio.Valkey``, ``valkey.cluster.ValkeyCluster``,
a ``valkey.sentinel.Sentinel`` ``master_for`` client) is read the same way: valkey-py is
redis-py's fork and keeps its connection pools, settings and cluster node manager.

Only the client's settings are read; ling_bloom opens its own connection (hiredis), so it
needs redis-py for nothing else.  TLS clients (SSLConnection) hand over their ssl_* settings.
A ``redis.cluster.RedisCluster`` hands over its nodes as a redis+cluster:// URL (the nodes it
knows, startup nodes first), its replica-read choice and its connection settings; a client of
``redis.sentinel.Sentinel.master_for(service)`` its sentinels and service as a
redis+sentinel:// URL (with the sentinels' password, if any).
"""
from __future__ import annotations

from typing import Any, Dict

_NAMES = {
    "host": "host",
    "port": "port",
    "db": "db",
    "username": "username",
    "password": "password",
    "path": "unix_socket_path",
    "socket_timeout": "socket_timeout",
    "socket_connect_timeout": "socket_connect_timeout",
}

# redis-py's TLS settings that ling_bloom takes under the same names.
_TLS_NAMES = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
              "ssl_check_hostname")
# ... and those it cannot honour: refused rather than silently ignored.
_TLS_UNSUPPORTED = ("ssl_ca_data", "ssl_password", "ssl_ciphers", "ssl_min_version",
                    "ssl_validate_ocsp", "ssl_validate_ocsp_stapled", "ssl_ocsp_context",
                    "ssl_ocsp_expected_cert", "ssl_include_verify_flags",
                    "ssl_exclude_verify_flags")


def _uses_tls(pool: Any, settings: Dict[str, Any]) -> bool:
    cls = getattr(pool, "connection_class", None)
    names = [c.__name__ for c in getattr(cls, "__mro__", ())]
    return "SSLConnection" in names or bool(settings.get("ssl"))


def _cluster_kwargs(client: Any, manager: Any) -> Dict[str, Any]:
    nodes = []
    for node in [*getattr(manager, "startup_nodes", {}).values(), *client.get_nodes()]:
        addr = f"{node.host}:{node.port}"
        if addr not in nodes:
            nodes.append(addr)
    if not nodes:
        raise ValueError("the RedisCluster client knows no node")
    url = "redis+cluster://" + ",".join(nodes)
    strategy = getattr(client, "load_balancing_strategy", None)
    if getattr(client, "read_from_replicas", False) or strategy is not None:
        url += "?read_from_replicas=true"
    settings = dict(getattr(manager, "connection_kwargs", {}) or {})
    out: Dict[str, Any] = {"url": url}
    for theirs, ours in _NAMES.items():
        value = settings.get(theirs)
        if value is not None and ours not in ("host", "port", "db", "unix_socket_path"):
            out[ours] = value
    if settings.get("ssl") or "SSL" in str(settings.get("connection_class", "")):
        out["ssl"] = True
        for name in _TLS_NAMES:
            if settings.get(name) is not None:
                out[name] = settings[name]
    if "socket_timeout" not in out:
        out["socket_timeout"] = None
    return out


def _sentinel_kwargs(pool: Any, settings: Dict[str, Any]) -> Dict[str, Any]:
    if not getattr(pool, "is_master", True):
        raise ValueError("the client is a Sentinel replica client (slave_for): the filters "
                         "write, so give a master_for(service) client")
    manager = getattr(pool, "sentinel_manager", None) or pool.proxy.sentinel_manager
    hosts, sentinel_auth = [], {}
    for sentinel in manager.sentinels:
        theirs = sentinel.connection_pool.connection_kwargs
        hosts.append(f"{theirs['host']}:{theirs['port']}")
        for name in ("username", "password"):
            if theirs.get(name):
                sentinel_auth[f"sentinel_{name}"] = theirs[name]
    from urllib.parse import quote, urlencode

    url = "redis+sentinel://" + ",".join(hosts) + "/" + quote(pool.service_name, safe="")
    db = settings.get("db") or 0
    if db:
        url += f"/{db}"
    if sentinel_auth:
        url += "?" + urlencode(sentinel_auth)
    out: Dict[str, Any] = {"url": url}
    for theirs, ours in _NAMES.items():
        value = settings.get(theirs)
        if value is not None and ours not in ("host", "port", "db", "unix_socket_path"):
            out[ours] = value
    if "socket_timeout" not in out:
        out["socket_timeout"] = None
    return out


def connection_kwargs(client: Any) -> Dict[str, Any]:
    """RedisFilter keywords from a redis.Redis or valkey.Valkey (or anything with a
    connection_pool), or a redis.cluster.RedisCluster or valkey.cluster.ValkeyCluster."""
    manager = getattr(client, "nodes_manager", None)
    if manager is not None and callable(getattr(client, "get_nodes", None)):
        return _cluster_kwargs(client, manager)
    pool = getattr(client, "connection_pool", None)
    settings = getattr(pool, "connection_kwargs", None)
    if not isinstance(settings, dict):
        raise TypeError(
            "expected a redis-py or valkey-py client with a connection_pool, not "
            f"{type(client).__name__}"
        )
    if getattr(pool, "service_name", None) is not None and hasattr(pool, "is_master"):
        return _sentinel_kwargs(pool, settings)
    out: Dict[str, Any] = {}
    for theirs, ours in _NAMES.items():
        value = settings.get(theirs)
        if value is not None:
            out[ours] = value
    if _uses_tls(pool, settings) and "unix_socket_path" not in out:
        unsupported = [n for n in _TLS_UNSUPPORTED if settings.get(n)]
        if unsupported:
            from ._core import NotSupportedError

            raise NotSupportedError(
                "the client's TLS settings " + ", ".join(unsupported)
                + " have no equivalent here (supported: " + ", ".join(_TLS_NAMES) + ")"
            )
        out["ssl"] = True
        for name in _TLS_NAMES:
            if settings.get(name) is not None:
                out[name] = settings[name]
        if "ssl_cert_reqs" in settings and settings["ssl_cert_reqs"] is None:
            out["ssl_cert_reqs"] = None  # redis-py: None means CERT_NONE
    if "unix_socket_path" in out:
        out.pop("host", None)
        out.pop("port", None)
    if "socket_timeout" not in out:
        out["socket_timeout"] = None  # redis-py's default: wait as long as it takes
    return out
