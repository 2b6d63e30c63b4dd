"""Django: keep lookups of ids that do not exist away from the database.

settings.py::

    INSTALLED_APPS = [..., "ling_bloom.contrib.django_app"]   # command + post_save hook
    MIDDLEWARE = [..., "ling_bloom.contrib.django.BloomGuardMiddleware"]

    LING_BLOOM = {
        "FILTERS": {
            "products": {
                # how the filter is made -- one of:
                "CLASS": "MemoryFilter",                     # a ling_bloom class or dotted path
                "OPTIONS": {"capacity": 1_000_000, "error_rate": 0.001},
                "FILE": BASE_DIR / "products.bloom",         # the warm-up command saves
                                                             # it; running processes reload
                                                             # it when it changes:
                "CHECK_EVERY": 2.0,                          # seconds between stat()s
                "UNWARMED": "serve",                         # no FILE yet: serve unguarded
                                                             # (logged), or "reject"
                "MAPPED": False,                             # True: every worker maps FILE
                                                             # (one copy of the bits for all)
                # "FILTER": "myproject.bloom.products",      # or: a dotted path to a filter
                #                                            # (or a function returning one)
                # where its keys come from (warm-up command, post_save hook):
                "MODEL": "shop.Product", "FIELD": "pk",
                "PREFIX": "",                                # prepended to every key
                "SIGNALS": True,                             # add keys of saved rows
                "REBUILD": True,                             # a Redis filter its server
                                                             # lost is rebuilt from MODEL
                                                             # (once per loss, a thread)
                # how --incremental finds new rows: by primary key, re-reading OVERLAP
                # ids below the last run's highest; or by a column every write sets,
                # re-reading LAG seconds behind the newest value the last run saw
                "INCREMENTAL": {"OVERLAP": 1000},            # or {"SINCE": "updated_at",
                                                             #     "LAG": 300}
                # "TEST_FILE": ...,   # under Django's test database (default FILE + ".test")
                # "GUARD_OPTIONS": {"on_filter_error": "open"},   # Guard(...) keywords
            },
        },
        "METHODS": ["GET", "HEAD"],   # the methods guarded (the default; "*": all; per route too)
        "ROUTES": [
            # the full URL name ("namespace:name"; a bare name when no other URL has it)
            # and the URL kwarg carrying the key
            {"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "products"},
            # or a regular expression on request.path_info with a named group
            {"PATTERN": r"^/legacy/product/(?P<pk>\\d+)/$", "KWARG": "pk", "FILTER": "products"},
        ],
        "REJECT": 404,   # default: raise Http404 (your 404 page); another status code; or a
                         # dotted path to a view ``reject(request, key, filter_name)``
    }

A rejected request never reaches its view: no query runs.  A request that passes and
still answers 404 is counted as an observed false positive of the filter when MODEL has no
row with that FIELD (one ``exists()`` query, on 404s only); the view's own 404 for a row
that exists (a product off sale) is not (``get_guard("products").stats()``; exported to
Prometheus when installed).

A filter its server lost (``FilterLostError``) lets requests through to their views, under
every policy, and is rebuilt from MODEL.FIELD (see ling_bloom.guard); ``manage.py check``
warns (``ling_bloom.W004``) of a stored filter whose geometry is not the settings'.

``python manage.py bloom_warmup products`` fills the filter from MODEL.FIELD (and saves it
to FILE); ``--incremental`` reads only the rows written since the last run (INCREMENTAL).
A filter that cannot be made (its backend down, a set-up mistake) never fails a request:
the guard's failure policy answers, or the route is served unguarded (logged); a save hook
that fails is logged and the write stands (``stale_filters()``).
``guard_for("products", cache="default")`` decorates a loader with the full flow (filter,
Django's cache with null caching, one loader call per key at a time).
"""
from __future__ import annotations

try:
    import django  # noqa: F401
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.django needs Django: pip install 'ling_bloom[django]' "
                      f"({exc})", name=exc.name) from exc

from ling_bloom.guard import AsyncGuard, Guard, NULL, is_null  # noqa: F401,E402

__all__ = [
    "BloomGuardMiddleware",
    "DjangoCache",
    "connect_model",
    "filter_settings",
    "get_filter",
    "get_guard",
    "guard_for",
    "model_fetch",
    "model_keys",
    "reset",
]

# The parts, a module each; every public name (and the few private ones the app's
# command and checks use) is importable from here.
from ._django_guards import (  # noqa: E402,F401
    _NOT_A_VALUE,
    _config,
    _filter_class,
    _filters,
    _full_guards,
    _guards,
    _key,
    _lock,
    _missed,
    _model,
    _stale,
    _test_database,
    DjangoCache,
    build_filter,
    filter_file,
    filter_settings,
    get_filter,
    get_guard,
    guard_for,
    log,
    model_keys,
    reset,
)
from ._django_middleware import (  # noqa: E402,F401
    DEFAULT_METHODS,
    BloomGuardMiddleware,
    _routes,
    _warned,
    resolve_url_name,
    url_names,
)
from ._django_signals import (  # noqa: E402,F401
    _clear_stale,
    after_migrate,
    connect_model,
    connect_signals,
    incremental_settings,
    model_fetch,
    model_position,
    stale_filters,
)
