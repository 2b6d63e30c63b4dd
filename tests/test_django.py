"""ling_bloom.contrib.django against a real SQLite database through Django's test client:
rejected ids run no query (CaptureQueriesContext counts them), the warm-up command, the
post_save hook, the full guard over Django's cache."""
from __future__ import annotations

import io
import os
import shutil
import tempfile

import pytest

from frameworks import require

require("django", "django")

_TMP = tempfile.mkdtemp(prefix="lb-django-")
os.environ["LING_BLOOM_DJANGO_TMP"] = _TMP
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_project.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

import ling_bloom as lb  # noqa: E402
from ling_bloom.contrib import django as lbd  # noqa: E402
from ling_bloom.guard import NULL  # noqa: E402
from django_project.shop import views  # noqa: E402
from django_project.shop.models import Product  # noqa: E402

PRODUCTS_FILE = settings.LING_BLOOM["FILTERS"]["products"]["FILE"]


@pytest.fixture(scope="module", autouse=True)
def django_db():
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
        shutil.rmtree(_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def clean():
    Product.objects.all().delete()
    for p in (PRODUCTS_FILE, PRODUCTS_FILE + ".sync.json"):
        if os.path.exists(p):
            os.unlink(p)
    from django.core.cache import cache

    cache.clear()
    lbd.reset()
    views._cached = None
    yield


def bulk(ids):
    """Rows inserted without signals (as a data migration or another service would)."""
    Product.objects.bulk_create([Product(pk=i, sku=f"sku-{i}", name=f"product {i}") for i in ids])


def get(client, url):
    with CaptureQueriesContext(connection) as q:
        response = client.get(url)
    return response, len(q.captured_queries)


def test_unknown_ids_are_rejected_without_a_query():
    bulk(range(1, 51))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    c = Client()
    r, queries = get(c, "/products/7/")
    assert (r.status_code, queries) == (200, 1)
    assert r.json()["sku"] == "sku-7"
    for bad in [999_999, 51, 10**12]:
        r, queries = get(c, f"/products/{bad}/")
        assert (r.status_code, queries) == (404, 0)
    s = lbd.get_guard("products").stats()
    assert (s.lookups, s.rejected, s.found, s.not_found) == (4, 3, 1, 0)


def test_control_an_unguarded_url_does_query():
    c = Client()
    r, queries = get(c, "/unguarded/999999/")
    assert (r.status_code, queries) == (404, 1)


def test_before_warm_up_rows_written_without_signals_are_unknown():
    bulk([1])
    r, queries = get(Client(), "/products/1/")
    assert (r.status_code, queries) == (404, 0)  # why the warm-up exists


def test_post_save_adds_new_rows():
    p = Product.objects.create(sku="new-1", name="new")  # signals run: the filter learns it
    assert str(p.pk) in lbd.get_filter("products")
    assert "sku:new-1" in lbd.get_filter("skus")
    r, queries = get(Client(), f"/products/{p.pk}/")
    assert (r.status_code, queries) == (200, 1)
    r, queries = get(Client(), "/shop/sku/new-1/")
    assert (r.status_code, queries) == (200, 1)


def test_a_false_positive_queries_once_and_is_counted():
    lbd.get_filter("products").add("777")  # in the filter, not in the table
    r, queries = get(Client(), "/products/777/")
    assert (r.status_code, queries) == (404, 1)
    s = lbd.get_guard("products").stats()
    assert (s.passed, s.not_found, s.false_positive_rate) == (1, 1, 1.0)


def test_namespaced_url_name_with_a_prefixed_key():
    bulk(range(1, 4))
    call_command("bloom_warmup", "skus", "--no-progress", stdout=io.StringIO())
    assert "sku:sku-2" in lbd.get_filter("skus")
    c = Client()
    r, queries = get(c, "/shop/sku/sku-2/")
    assert (r.status_code, queries) == (200, 1)
    r, queries = get(c, "/shop/sku/does-not-exist/")
    assert (r.status_code, queries) == (404, 0)


def test_pattern_route():
    bulk([5])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    c = Client()
    assert get(c, "/legacy/product/5/")[0].status_code == 200
    r, queries = get(c, "/legacy/product/6/")
    assert (r.status_code, queries) == (404, 0)


def _conf(**extra):
    conf = dict(settings.LING_BLOOM)
    conf.update(extra)
    return conf


def reject_teapot(request, key, filter_name):
    from django.http import JsonResponse

    return JsonResponse({"unknown": key, "filter": filter_name}, status=418)


def test_reject_with_another_status_or_a_view():
    with override_settings(LING_BLOOM=_conf(REJECT=410)):
        r, queries = get(Client(), "/products/123/")
        assert (r.status_code, queries) == (410, 0)
    with override_settings(LING_BLOOM=_conf(REJECT=f"{__name__}.reject_teapot")):
        r, queries = get(Client(), "/products/123/")
        assert (r.status_code, queries) == (418, 0)
        assert r.json() == {"unknown": "123", "filter": "products"}


def test_bad_settings_are_reported():
    bad = _conf(ROUTES=[{"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "nope"}])
    with override_settings(LING_BLOOM=bad):
        with pytest.raises(ImproperlyConfigured, match="nope"):
            lbd.BloomGuardMiddleware(lambda r: None)
    with pytest.raises(ImproperlyConfigured, match="no filter named"):
        lbd.get_filter("missing")


def test_warmup_command_saves_and_resumes_incrementally():
    bulk(range(1, 101))
    out = io.StringIO()
    call_command("bloom_warmup", "products", "--batch-size", "30", "--no-progress", stdout=out)
    assert "products: 100 keys in" in out.getvalue()
    assert "saved to" in out.getvalue()
    saved = lb.load(PRODUCTS_FILE)
    assert all(saved.test_many([str(i) for i in range(1, 101)]))
    assert saved.error_rate == 0.001  # the geometry of the settings
    with open(PRODUCTS_FILE + ".sync.json") as f:
        assert '"last_id": 100' in f.read()

    bulk(range(101, 104))  # rows the signals never saw
    lbd.reset()  # a new process: it loads the saved file
    with CaptureQueriesContext(connection) as q:
        out = io.StringIO()
        call_command("bloom_warmup", "products", "--incremental", stdout=out)
    assert "3 new keys" in out.getvalue() and "last id 103" in out.getvalue()
    # only rows above 100 were read: one short batch
    selects = [x["sql"] for x in q.captured_queries if x["sql"].startswith("SELECT")]
    assert len(selects) == 1 and '> 100' in selects[0]
    again = lb.load(PRODUCTS_FILE)
    assert all(again.test_many(["1", "100", "101", "103"]))
    r, queries = get(Client(), "/products/103/")
    assert (r.status_code, queries) == (200, 1)


def test_warmup_command_errors():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no filter named"):
        call_command("bloom_warmup", "nope", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--state"):
        call_command("bloom_warmup", "skus", "--incremental", stdout=io.StringIO())


def test_full_guard_over_djangos_cache():
    bulk(range(1, 11))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    c = Client()
    r, queries = get(c, "/cached/3/")
    assert (r.status_code, queries) == (200, 1)
    r, queries = get(c, "/cached/3/")
    assert (r.status_code, queries) == (200, 0)  # from Django's cache
    r, queries = get(c, "/cached/424242/")
    assert (r.status_code, queries) == (404, 0)  # rejected by the filter

    lbd.get_filter("products").add("55")  # a false positive
    r, queries = get(c, "/cached/55/")
    assert (r.status_code, queries) == (404, 1)
    r, queries = get(c, "/cached/55/")
    assert (r.status_code, queries) == (404, 0)  # the null marker answers
    from django.core.cache import cache

    assert cache.get("ling_bloom:products:55") is NULL

    Product.objects.create(pk=55, sku="sku-55", name="late")  # post_save drops the marker
    assert cache.get("ling_bloom:products:55") is None
    r, queries = get(c, "/cached/55/")
    assert (r.status_code, queries) == (200, 1)
    assert views._cached.stats().null_hits == 1


def test_django_cache_adapter_async():
    import asyncio

    from ling_bloom.guard import AsyncGuard

    f = lb.MemoryFilter(100, 0.01)
    f.add("1")
    calls = []

    async def loader(key):
        calls.append(key)
        return None

    async def main():
        g = AsyncGuard(f, lbd.DjangoCache("default", asynchronous=True), loader,
                       key_prefix="a:", metrics=False)
        assert await g.get("1") is None and await g.get("1") is None

    asyncio.run(main())
    assert calls == ["1"]
