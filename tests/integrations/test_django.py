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


def test_before_the_first_warm_up_urls_are_served_unguarded_and_it_is_logged(caplog):
    # Issue 16: with no FILE yet every guarded URL answered 404, existing rows included.
    bulk([1])
    with caplog.at_level("WARNING", logger="ling_bloom.warmup"):
        r, queries = get(Client(), "/products/1/")
        assert (r.status_code, queries) == (200, 1)
        r, queries = get(Client(), "/products/2/")
        assert (r.status_code, queries) == (404, 1)
    assert any("does not exist yet" in m and "unguarded" in m for m in caplog.messages)
    s = lbd.get_guard("products").stats()
    assert (s.lookups, s.not_found) == (0, 0)  # not evidence about the filter
    assert lbd.get_filter("products").warmed is False


def test_unwarmed_reject_is_the_old_behaviour_by_choice():
    bulk([1])
    with override_settings(LING_BLOOM=_products(UNWARMED="reject")):
        r, queries = get(Client(), "/products/1/")
        assert (r.status_code, queries) == (404, 0)


def test_bad_unwarmed_setting_is_reported():
    with override_settings(LING_BLOOM=_products(UNWARMED="maybe")):
        with pytest.raises(ImproperlyConfigured, match="UNWARMED"):
            lbd.get_filter("products")


def test_a_running_process_reloads_file_when_the_warm_up_replaces_it(tmp_path):
    # Issue 16: a row created while the server ran stayed 404 after bloom_warmup
    # --incremental saved it; only a restart helped.  Here the warm-up runs in another
    # process (as `manage.py bloom_warmup` would) while this one keeps serving.
    import subprocess
    import sys
    import time

    bulk(range(1, 11))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    with override_settings(LING_BLOOM=_products(CHECK_EVERY=0.2)):
        c = Client()
        assert get(c, "/products/5/")[0].status_code == 200
        bulk([11])                                        # written without signals
        assert get(c, "/products/11/")[0].status_code == 404   # not in the filter yet
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        support = os.path.join(tests, "support")  # the Django project
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([support, os.environ.get("PYTHONPATH", "")]),
                   LING_BLOOM_DJANGO_TMP=_TMP, DJANGO_SETTINGS_MODULE="django_project.settings")
        code = ("import django; django.setup()\n"
                "from django.db import connections\n"
                "from django.conf import settings\n"
                "settings.DATABASES['default']['NAME'] = settings.DATABASES['default']['TEST']['NAME']\n"
                "from django.core.management import call_command\n"
                "call_command('bloom_warmup', 'products', '--incremental', '--no-progress')\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "1 new keys" in proc.stdout
        deadline = time.monotonic() + 10        # a margin of seconds over CHECK_EVERY=0.2
        while get(c, "/products/11/")[0].status_code != 200:
            assert time.monotonic() < deadline, "the running process never reloaded FILE"
            time.sleep(0.1)
        assert lbd.get_filter("products").reloads >= 1


def test_post_save_adds_new_rows():
    p = Product.objects.create(sku="new-1", name="new")  # signals run: the filter learns it
    assert str(p.pk) in lbd.get_filter("products")
    assert "sku:new-1" in lbd.get_filter("skus")
    r, queries = get(Client(), f"/products/{p.pk}/")
    assert (r.status_code, queries) == (200, 1)
    r, queries = get(Client(), "/shop/sku/new-1/")
    assert (r.status_code, queries) == (200, 1)


def test_a_false_positive_queries_once_and_is_counted():
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    lbd.get_filter("products").add("777")  # in the filter, not in the table
    r, queries = get(Client(), "/products/777/")
    assert (r.status_code, queries) == (404, 2)  # the view's, and the row check on its 404
    s = lbd.get_guard("products").stats()
    assert (s.passed, s.not_found, s.false_positive_rate) == (1, 1, 1.0)


def test_a_views_own_404_for_an_existing_row_is_not_a_false_positive():
    from django.http import Http404

    bulk([5])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    lbd.get_guard("products").reset_stats()
    from django_project.urls import urlpatterns

    pattern = next(p for p in urlpatterns if getattr(p, "name", None) == "product-detail")
    real = pattern.callback

    def off_sale(request, pk):  # get_object_or_404(Product, pk=pk, active=True)
        raise Http404("off sale")

    pattern.callback = off_sale
    try:
        for _ in range(3):
            assert get(Client(), "/products/5/")[0].status_code == 404
    finally:
        pattern.callback = real
    s = lbd.get_guard("products").stats()
    assert (s.passed, s.not_found) == (3, 0)


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


def _products(**extra):
    """LING_BLOOM with these settings added to the "products" filter's."""
    conf = dict(settings.LING_BLOOM)
    conf["FILTERS"] = dict(conf["FILTERS"])
    conf["FILTERS"]["products"] = dict(conf["FILTERS"]["products"], **extra)
    return conf


def reject_teapot(request, key, filter_name):
    from django.http import JsonResponse

    return JsonResponse({"unknown": key, "filter": filter_name}, status=418)


def test_reject_with_another_status_or_a_view():
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
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


def _check_ids(conf, unshared=False):
    """ling_bloom's check messages; W002 (an in-memory filter) only when ``unshared``: the
    project's "skus" filter is one on purpose."""
    from django.core import checks

    with override_settings(LING_BLOOM=conf):
        return [(m.id, m.msg) for m in checks.run_checks() if m.id.startswith("ling_bloom.")
                and (unshared or m.id != "ling_bloom.W002")]


def test_system_checks_pass_the_project_settings():
    found = _check_ids(settings.LING_BLOOM, unshared=True)
    # only the in-memory "skus" filter is named: its adds are not shared between workers
    assert [(i, "'skus'" in msg) for i, msg in found] == [("ling_bloom.W002", True)]


@pytest.mark.parametrize("spec,warned", [
    ({"CLASS": "MemoryFilter", "OPTIONS": {"capacity": 100, "error_rate": 0.01}}, True),
    ({"CLASS": "ling_bloom.ScalableFilter", "OPTIONS": {"capacity": 100, "error_rate": 0.01}}, True),
    ({"CLASS": "MemoryFilter", "OPTIONS": {"capacity": 100, "error_rate": 0.01},
      "FILE": "/tmp/p.bloom"}, False),
    ({"CLASS": "RedisFilter", "OPTIONS": {}}, False),
])
def test_check_warns_of_a_filter_whose_adds_other_workers_cannot_see(spec, warned):
    found = _check_ids({"FILTERS": {"p": spec}, "ROUTES": []}, unshared=True)
    assert [i for i, _ in found] == (["ling_bloom.W002"] if warned else [])
    if warned:
        assert "not seen by the other workers" in found[0][1]


@pytest.mark.parametrize("route,expected", [
    ({"URL_NAME": "product-detial", "KWARG": "pk", "FILTER": "products"}, "ling_bloom.E002"),
    ({"URL_NAME": "by-sku", "KWARG": "sku", "FILTER": "skus"}, "ling_bloom.E002"),  # no namespace
    ({"URL_NAME": "product-detail", "KWARG": "id", "FILTER": "products"}, "ling_bloom.E003"),
    ({"URL_NAME": "shop:by-sku", "KWARG": "slug", "FILTER": "skus"}, "ling_bloom.E003"),
    ({"PATTERN": r"^/legacy/(?P<pk>\d+)/$", "KWARG": "id", "FILTER": "products"}, "ling_bloom.E004"),
    ({"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "nope"}, "ling_bloom.E001"),
])
def test_manage_py_check_reports_a_route_that_would_never_be_guarded(route, expected):
    # Issue 16: a typo in KWARG or URL_NAME turned the guard off; `manage.py check` was silent.
    found = _check_ids(_conf(ROUTES=[route]))
    assert [i for i, _ in found] == [expected], found
    out = io.StringIO()
    with override_settings(LING_BLOOM=_conf(ROUTES=[route])):
        from django.core.management.base import SystemCheckError

        with pytest.raises(SystemCheckError, match=expected.replace(".", r"\.")):
            call_command("check", stdout=out, stderr=out)


def test_check_warns_of_a_file_in_a_missing_directory(tmp_path):
    found = _check_ids(_products(FILE=str(tmp_path / "no-such-dir" / "p.bloom")))
    assert [i for i, _ in found] == ["ling_bloom.W001"]


def test_a_deleted_row_is_not_counted_as_a_false_positive():
    # Issue 16: 1 delete + 1 lookup gave not_found=1 and a false-positive rate of 0.5.
    p = Product.objects.create(sku="gone-1", name="gone")
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    c = Client()
    assert get(c, "/products/999999/")[0].status_code == 404     # rejected
    pk = p.pk
    p.delete()                                                   # post_delete hook
    r, queries = get(c, f"/products/{pk}/")
    assert (r.status_code, queries) == (404, 2)                  # in the filter; the row check
    s = lbd.get_guard("products").stats()
    assert (s.not_found, s.deleted, s.false_positive_rate) == (0, 1, 0.0)


def test_a_plain_str_route_keys_follow_the_model_field():
    # Issue 16 (same thinking as FastAPI's): with <pk> (str converter) /plain/007/ must have
    # the key "7", as get_object_or_404(pk="007") finds product 7; "abc" is the view's to answer.
    bulk(range(1, 11))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    routes = [{"URL_NAME": "plain-product", "KWARG": "pk", "FILTER": "products"}]
    with override_settings(LING_BLOOM=_conf(ROUTES=routes)):
        c = Client()
        r, queries = get(c, "/plain/007/")
        assert (r.status_code, queries) == (200, 1)
        r, queries = get(c, "/plain/99999/")
        assert (r.status_code, queries) == (404, 0)
        s = lbd.get_guard("products").stats()
        assert (s.found, s.rejected) == (1, 1)
