"""Connection settings of a redis-py client, for RedisFilter.from_redis(client, key).

Only the client's settings are read; ling_bloom opens its own connection (hiredis), so it
needs redis-py for nothing else.
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


def connection_kwargs(client: Any) -> Dict[str, Any]:
    """RedisFilter keywords from a redis.Redis (or anything with a connection_pool)."""
    pool = getattr(client, "connection_pool", None)
    settings = getattr(pool, "connection_kwargs", None)
    if not isinstance(settings, dict):
        raise TypeError(
            f"expected a redis-py client with a connection_pool, not {type(client).__name__}"
        )
    if settings.get("ssl") or "ssl_certfile" in settings or "ssl_cert_reqs" in settings:
        from ._core import NotSupportedError

        raise NotSupportedError(
            "the client uses TLS, which the system's hiredis (0.14) cannot speak"
        )
    out: Dict[str, Any] = {}
    for theirs, ours in _NAMES.items():
        value = settings.get(theirs)
        if value is not None:
            out[ours] = value
    if "unix_socket_path" in out:
        out.pop("host", None)
        out.pop("port", None)
    if "socket_timeout" not in out:
        out["socket_timeout"] = None  # redis-py's default: wait as long as it takes
    return out
