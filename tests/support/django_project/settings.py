"""Settings of the Django project the ling_bloom tests run (tests/integrations/test_django.py).

A real SQLite database file in a temporary directory; the filters' saved files too."""
import os
import tempfile

BASE_DIR = os.environ.get("LING_BLOOM_DJANGO_TMP") or tempfile.mkdtemp(prefix="lb-django-")

SECRET_KEY = "ling_bloom-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django_project.shop",
    "ling_bloom.contrib.django_app",
]

MIDDLEWARE = [
    "ling_bloom.contrib.django.BloomGuardMiddleware",
]

ROOT_URLCONF = "django_project.urls"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE_DIR, "db.sqlite3"),
        "TEST": {"NAME": os.path.join(BASE_DIR, "test-db.sqlite3")},
    }
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

LING_BLOOM = {
    "FILTERS": {
        "products": {
            "CLASS": "MemoryFilter",
            "OPTIONS": {"capacity": 100_000, "error_rate": 0.001},
            "FILE": os.path.join(BASE_DIR, "products.bloom"),
            "MODEL": "shop.Product",
            "FIELD": "pk",
            # tests/test_live_servers.py runs this project under gunicorn with these
            "CHECK_EVERY": float(os.environ.get("LING_BLOOM_TEST_CHECK_EVERY", "2.0")),
            "MAPPED": os.environ.get("LING_BLOOM_TEST_MAPPED") == "1",
        },
        "skus": {
            "CLASS": "MemoryFilter",
            "OPTIONS": {"capacity": 100_000, "error_rate": 0.001},
            "MODEL": "shop.Product",
            "FIELD": "sku",
            "PREFIX": "sku:",
        },
    },
    "REJECT": int(os.environ.get("LING_BLOOM_TEST_REJECT", "404")),
    "ROUTES": [
        {"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "products"},
        {"URL_NAME": "shop:by-sku", "KWARG": "sku", "FILTER": "skus"},
        {"PATTERN": r"^/legacy/product/(?P<pk>\d+)/$", "KWARG": "pk", "FILTER": "products"},
    ],
}

if os.environ.get("LING_BLOOM_TEST_REDIS_URL"):
    # tests/test_live_servers.py: "products" is a RedisFilter adopting the stored geometry
    LING_BLOOM["FILTERS"]["products"] = {
        "CLASS": "RedisFilter",
        "OPTIONS": {"key": "bloom:products", "url": os.environ["LING_BLOOM_TEST_REDIS_URL"],
                    "socket_connect_timeout": 1, "socket_timeout": 1},
        "MODEL": "shop.Product",
        "FIELD": "pk",
    }
