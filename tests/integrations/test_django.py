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

DEPLOYED_FILE = settings.LING_BLOOM["FILTERS"]["products"]["FILE"]
PRODUCTS_FILE = DEPLOYED_FILE + ".test"  # the test database's own file (filter_file)


@pytest.fixture(scope="module", autouse=True)
def django_db():
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    assert lbd.filter_file("products") == PRODUCTS_FILE
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
    # Before: with no FILE yet every guarded URL answered 404, existing rows included.
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
    # Before: a row created while the server ran stayed 404 after bloom_warmup
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
        assert "last id 11" in proc.stdout
        deadline = time.monotonic() + 30        # a margin of seconds over CHECK_EVERY=0.2
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
    with override_settings(LING_BLOOM=_products(INCREMENTAL={"OVERLAP": 10})):
        with CaptureQueriesContext(connection) as q:
            out = io.StringIO()
            call_command("bloom_warmup", "products", "--incremental", stdout=out)
    assert "13 keys read" in out.getvalue() and "last id 103" in out.getvalue()
    # only rows above 100 - OVERLAP were read: one short batch
    selects = [x["sql"] for x in q.captured_queries if x["sql"].startswith("SELECT")]
    assert len(selects) == 1 and '> 90' in selects[0]
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
    ({"CLASS": "RedisFilter", "OPTIONS": {"key": "bloom:p"}}, False),
    ({"FILTER": f"{__name__}.IN_MEMORY_FILTER"}, True),
])
def test_check_warns_of_a_filter_whose_adds_other_workers_cannot_see(spec, warned):
    found = _check_ids({"FILTERS": {"p": spec}, "ROUTES": []}, unshared=True)
    assert [i for i, _ in found] == (["ling_bloom.W002"] if warned else [])
    if warned:
        assert "not seen by the other workers" in found[0][1]


@pytest.mark.parametrize("route,expected", [
    ({"URL_NAME": "product-detial", "KWARG": "pk", "FILTER": "products"}, "ling_bloom.E002"),
    ({"URL_NAME": "detail", "KWARG": "pk", "FILTER": "products"}, "ling_bloom.E002"),  # 2 namespaces
    ({"URL_NAME": "product-detail", "KWARG": "id", "FILTER": "products"}, "ling_bloom.E003"),
    ({"URL_NAME": "shop:by-sku", "KWARG": "slug", "FILTER": "skus"}, "ling_bloom.E003"),
    ({"PATTERN": r"^/legacy/(?P<pk>\d+)/$", "KWARG": "id", "FILTER": "products"}, "ling_bloom.E004"),
    ({"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "nope"}, "ling_bloom.E001"),
])
def test_manage_py_check_reports_a_route_that_would_never_be_guarded(route, expected):
    # Before: a typo in KWARG or URL_NAME turned the guard off; `manage.py check` was silent.
    found = _check_ids(_conf(ROUTES=[route]))
    assert [i for i, _ in found] == [expected], found
    out = io.StringIO()
    with override_settings(LING_BLOOM=_conf(ROUTES=[route])):
        from django.core.management.base import SystemCheckError

        with pytest.raises(SystemCheckError, match=expected.replace(".", r"\.")):
            call_command("check", stdout=out, stderr=out)


IN_MEMORY_FILTER = lb.MemoryFilter(100, 0.01)


@pytest.mark.parametrize("change,expected", [
    (lambda c: c.update(ROUTE=c.pop("ROUTES")), ("ling_bloom.E005", "'ROUTES'")),
    (lambda c: c["ROUTES"][0].update(KWARGS="pk"), ("ling_bloom.E005", "'KWARG'")),
    (lambda c: c["FILTERS"]["products"].update(UNWARMED="allow"), ("ling_bloom.E006", "serve")),
    (lambda c: c["FILTERS"]["products"].update(CLASS="MemmoryFilter"),
     ("ling_bloom.E007", "'MemoryFilter'")),
    (lambda c: c["FILTERS"]["products"].update(CLASS="RedisFilter", FILE=None,
                                               OPTIONS={"capacity": 10}),
     ("ling_bloom.E007", "key")),
])
def test_manage_py_check_reports_set_up_mistakes(change, expected):
    # each passed `manage.py check`; several made every guarded request a 500
    import copy

    conf = copy.deepcopy(settings.LING_BLOOM)
    change(conf)
    found = _check_ids(conf)
    assert len(found) == 1 and found[0][0] == expected[0], found
    from django.core import checks

    with override_settings(LING_BLOOM=conf):
        text = " ".join(f"{m.msg} {m.hint}" for m in checks.run_checks()
                        if m.id == expected[0])
        assert expected[1] in text
        bulk([1])
        r = Client().get("/products/1/")           # never a 500 at run time
        assert r.status_code == 200


def test_check_warns_when_the_middleware_is_missing():
    mw = [m for m in settings.MIDDLEWARE if "BloomGuard" not in m]
    with override_settings(MIDDLEWARE=mw):
        found = _check_ids(settings.LING_BLOOM)
    assert [i for i, _ in found] == ["ling_bloom.W003"]


def test_middleware_without_the_app_logs_that_saves_are_not_seen(caplog):
    from django.apps import apps

    installed = [a.name for a in apps.get_app_configs() if a.name != "ling_bloom.contrib.django_app"]
    lbd._warned.discard("app")
    with caplog.at_level("ERROR", logger="ling_bloom.django"):
        with override_settings(INSTALLED_APPS=installed):
            lbd.BloomGuardMiddleware(lambda r: None)
    assert any("INSTALLED_APPS" in m for m in caplog.messages)


def test_check_warns_of_a_file_in_a_missing_directory(tmp_path):
    found = _check_ids(_products(FILE=str(tmp_path / "no-such-dir" / "p.bloom")))
    assert [i for i, _ in found] == ["ling_bloom.W001"]


def test_a_deleted_row_is_not_counted_as_a_false_positive():
    # Before: 1 delete + 1 lookup gave not_found=1 and a false-positive rate of 0.5.
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
    # (same thinking as FastAPI's) with <pk> (str converter) /plain/007/ must have
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


# ---- a filter the server lost; a stored geometry that is not the settings' ------------------

from lost_filters import LostFilter, MismatchedFilter, wait_for  # noqa: E402


def _lost_products(flt, **extra):
    """The "products" filter as a given object (no FILE), its keys from Product.pk."""
    spec = {"FILTER": flt, "MODEL": "shop.Product", "FIELD": "pk", **extra}
    return _conf(FILTERS=dict(settings.LING_BLOOM["FILTERS"], products=spec))


def test_a_lost_filter_serves_existing_rows_and_is_rebuilt_from_the_model():
    bulk(range(1, 6))
    flt = LostFilter([str(i) for i in range(1, 6)])
    conf = _lost_products(flt, GUARD_OPTIONS={"on_filter_error": "closed"})
    with override_settings(LING_BLOOM=conf):
        client = Client()
        r, queries = get(client, "/products/999/")
        assert (r.status_code, queries) == (404, 0)  # the filter rejects it
        flt.lose()                                   # the server restarted empty
        r, _ = get(client, "/products/3/")
        assert r.status_code == 200                  # an existing row, not a 404
        guard = lbd.get_guard("products")
        wait_for(lambda: guard.stats().rebuilds == 1, "the rebuild from Product.pk")
        assert flt.resets == 1 and not guard.stats().filter_lost
        r, queries = get(client, "/products/999/")
        assert (r.status_code, queries) == (404, 0)  # rejected by the rebuilt filter
        r, _ = get(client, "/products/4/")
        assert r.status_code == 200


def test_a_save_to_a_lost_filter_does_not_fail_and_is_counted():
    flt = LostFilter()
    with override_settings(LING_BLOOM=_lost_products(flt, REBUILD=False)):
        flt.lose()
        Product.objects.create(pk=77, sku="sku-77", name="saved while lost")  # post_save
        assert Product.objects.filter(pk=77).exists()
        st = lbd.get_guard("products").stats()
        assert (st.lost_adds, st.filter_losses, st.filter_lost) == (1, 1, True)
        assert get(Client(), "/products/77/")[0].status_code == 200


def test_a_stored_geometry_that_is_not_the_settings_is_a_check_warning_and_no_500():
    conf = _lost_products(MismatchedFilter())
    found = _check_ids(conf)
    assert [i for i, _ in found] == ["ling_bloom.W004"]
    assert "another geometry" in found[0][1] and "new key" in found[0][1]
    bulk([5])
    with override_settings(LING_BLOOM=conf):
        r, _ = get(Client(), "/products/5/")
        assert r.status_code == 200                  # "open": it fails open, not a 500
        assert lbd.get_guard("products").stats().geometry_mismatch


# --------------------------------------------------------------- failures, methods, hooks


def _redis_products(url, **extra):
    """LING_BLOOM whose "products" filter is a RedisFilter adopting the stored geometry."""
    spec = {"CLASS": "RedisFilter", "MODEL": "shop.Product", "FIELD": "pk",
            "OPTIONS": {"key": "bloom:products", "url": url, "socket_connect_timeout": 1,
                        "socket_timeout": 1}}
    spec.update(extra)
    return _products_spec(spec)


def _products_spec(spec):
    conf = dict(settings.LING_BLOOM)
    conf["FILTERS"] = dict(conf["FILTERS"], products=spec)
    return conf


def test_redis_down_when_the_filter_is_first_made_follows_the_failure_policy(private_redis):
    # The worker's first RedisFilter adopts the stored geometry, which needs Redis: with
    # Redis down every guarded request was a 500 (the policy covered check() only).
    bulk([1])
    url = private_redis.url
    private_redis.kill()
    with override_settings(LING_BLOOM=_redis_products(url)):
        r, queries = get(Client(), "/products/1/")
        assert (r.status_code, queries) == (200, 1)      # "open": served unguarded
        assert lbd.get_guard("products").stats().bypassed == 1
    with override_settings(LING_BLOOM=_redis_products(
            url, GUARD_OPTIONS={"on_filter_error": "closed", "breaker_seconds": 0})):
        r, queries = get(Client(), "/products/1/")
        assert (r.status_code, queries) == (404, 0)      # "closed": rejected, not a 500
        stand_in = lbd.get_filter("products")
        assert not isinstance(stand_in, lb.RedisFilter)
        # Redis is back: the next try (once its delay has passed) makes the filter
        private_redis.restart()
        lb.RedisFilter("bloom:products", 1000, 0.01, url=url).add("1")
        stand_in.next_try = 0
        r, queries = get(Client(), "/products/1/")
        assert (r.status_code, queries) == (200, 1)
        assert isinstance(lbd.get_filter("products"), lb.RedisFilter)
        r, queries = get(Client(), "/products/2/")
        assert (r.status_code, queries) == (404, 0)


def _hooked(conf, name, model=None, field=None):
    """Connect the save hooks of filter ``name`` of ``conf`` for the test's length."""
    import contextlib

    from django.db.models.signals import post_delete, post_save

    @contextlib.contextmanager
    def cm():
        with override_settings(LING_BLOOM=conf):
            hook = lbd.connect_model(name, model, field)
            m, f = lbd._model(name) if model is None else (model, field)
            try:
                yield hook
            finally:
                label = (m if not isinstance(m, str) else None)
                uid = f"ling_bloom:{name}:{m._meta.label}:{f}"
                post_save.disconnect(sender=m, dispatch_uid=uid)
                post_delete.disconnect(sender=m, dispatch_uid=uid + ":delete")
                del label

    return cm()


def test_a_save_whose_filter_is_down_stands_and_is_logged(private_redis, caplog):
    # Redis down: every save() answered 500 although the row was committed (the hook
    # raised); a user retried and made a duplicate.
    private_redis.kill()
    conf = _redis_products(private_redis.url)
    conf["FILTERS"]["products"]["OPTIONS"] = dict(conf["FILTERS"]["products"]["OPTIONS"],
                                                  capacity=1000, error_rate=0.01)
    with override_settings(LING_BLOOM=conf), caplog.at_level("ERROR", logger="ling_bloom.django"):
        p = Product.objects.create(sku="down-1", name="saved while Redis is down")
        assert Product.objects.filter(pk=p.pk).exists()
        assert "products" in lbd.stale_filters()
        assert any("could not be added" in m for m in caplog.messages)
        # this process still answers the row it saved
        r, queries = get(Client(), f"/products/{p.pk}/")
        assert (r.status_code, queries) == (200, 1)
        # Redis is back: the next save adds the missed key too, and the filter is current
        private_redis.restart()
        q = Product.objects.create(sku="down-2", name="saved once Redis is back")
        flt = lbd.get_filter("products")
        assert str(p.pk) in flt and str(q.pk) in flt
        assert lbd.stale_filters() == {}


def test_only_get_and_head_are_guarded_by_default():
    # A PUT that creates the row (an upsert) got 404 and nothing was created; a CORS
    # preflight (OPTIONS) got 404.
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    routes = [{"URL_NAME": "product-api", "KWARG": "pk", "FILTER": "products"}]
    conf = _conf(ROUTES=routes)
    with override_settings(LING_BLOOM=conf):
        c = Client()
        assert get(c, "/api/products/500/")[0].status_code == 404      # GET: rejected
        r = c.generic("HEAD", "/api/products/500/")
        assert r.status_code == 404
        r = c.options("/api/products/500/")
        assert r.status_code == 200 and "PUT" in r["Access-Control-Allow-Methods"]
        r = c.put("/api/products/500/")
        assert r.status_code == 201
        assert Product.objects.filter(pk=500).exists()
        assert get(c, "/api/products/500/")[0].status_code == 200      # the hook added it
    with override_settings(LING_BLOOM=_conf(ROUTES=[dict(routes[0], METHODS="*")])):
        assert Client().put("/api/products/501/").status_code == 404    # by choice
    with override_settings(LING_BLOOM=_conf(METHODS=["GET"], ROUTES=routes)):
        with CaptureQueriesContext(connection) as q:
            assert Client().generic("HEAD", "/api/products/502/").status_code == 404
        assert len(q.captured_queries) == 1                             # the view's own 404
        assert get(Client(), "/api/products/502/") [1] == 0             # GET: rejected


def test_a_lookup_inside_the_saving_transaction_does_not_keep_the_row_absent():
    # post_save dropped the null marker inside the transaction: a lookup before COMMIT
    # (another request) cached "absent" and the committed row answered 404 for null_ttl.
    from django.core.cache import cache
    from django.db import transaction

    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    c = Client()
    assert get(c, "/cached/1/")[0].status_code == 404        # the guard_for() guard is made
    with transaction.atomic():
        p = Product.objects.create(pk=77, sku="tx-77", name="in a transaction")
        # another request's lookup, before the commit, does not see the row (simulated:
        # the loader finds nothing) and caches the null marker
        cache.set("ling_bloom:products:77", NULL, 60)
    assert cache.get("ling_bloom:products:77") is None      # dropped at the commit
    r, queries = get(c, f"/cached/{p.pk}/")
    assert (r.status_code, queries) == (200, 1)


def test_a_foreign_key_field_adds_the_related_id():
    # FIELD a ForeignKey: post_save added str(related) ("Product object (2)"); the warm-up
    # adds the id.
    from django_project.shop.models import Offer

    bulk([2])
    conf = _conf(FILTERS=dict(settings.LING_BLOOM["FILTERS"], offered={
        "CLASS": "MemoryFilter", "OPTIONS": {"capacity": 1000, "error_rate": 0.01},
        "MODEL": "shop.Offer", "FIELD": "product"}))
    with _hooked(conf, "offered"):
        Offer.objects.create(product_id=2)
        flt = lbd.get_filter("offered")
        assert "2" in flt and "Product object (2)" not in flt
        call_command("bloom_warmup", "offered", "--no-progress", stdout=io.StringIO())
        assert "2" in lbd.get_filter("offered")


def test_async_guard_for_loaders_are_told_of_saved_and_deleted_rows():
    # guard_for() over an async loader: the hooks never dropped its cache entries (a
    # deleted row served for ever; a re-created one absent for null_ttl).
    import asyncio

    from django.core.cache import cache

    bulk([5])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    rows = {"5": {"id": 5}}

    async def load(key):
        return rows.get(key)

    g = lbd.guard_for("products", load, cache="default", metrics=False)
    assert asyncio.run(g("5")) == {"id": 5}
    assert cache.get("ling_bloom:products:5") == {"id": 5}
    del rows["5"]
    Product.objects.get(pk=5).delete()
    assert cache.get("ling_bloom:products:5") is None       # dropped by the delete hook
    assert asyncio.run(g("5")) is None
    assert cache.get("ling_bloom:products:5") is NULL
    rows["5"] = {"id": 5, "again": True}
    Product.objects.create(pk=5, sku="sku-5b", name="again")
    assert asyncio.run(g("5")) == {"id": 5, "again": True}


def test_guard_for_over_a_per_process_cache_warns():
    import warnings

    from ling_bloom.filefilter import UnsharedFilterWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lbd.guard_for("products", lambda k: None, cache="default", metrics=False)
    assert any(issubclass(w.category, UnsharedFilterWarning) and "LocMemCache" in str(w.message)
               for w in caught)


# ----------------------------------------------------------------------------- routing


def test_a_bare_url_name_guards_only_the_url_it_names_alone():
    # URL_NAME "detail" guarded every namespaced URL named detail: orders:detail was
    # checked against the products filter.
    bulk([3])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    full = [{"URL_NAME": "catalog:detail", "KWARG": "pk", "FILTER": "products"}]
    with override_settings(LING_BLOOM=_conf(ROUTES=full)):
        c = Client()
        assert get(c, "/catalog/3/")[0].status_code == 200
        assert get(c, "/catalog/4/")[1] == 0                            # rejected
        r, queries = get(c, "/orders/4/")
        assert (r.status_code, r.json()) == (200, {"order": 4})          # not guarded
    bare = [{"URL_NAME": "detail", "KWARG": "pk", "FILTER": "products"}]
    with override_settings(LING_BLOOM=_conf(ROUTES=bare)):
        assert get(Client(), "/orders/4/")[0].status_code == 200           # ambiguous: not
        found = _check_ids(_conf(ROUTES=bare))
        assert [i for i, _ in found] == ["ling_bloom.E002"]
        assert "catalog:detail" in found[0][1] and "orders:detail" in found[0][1]
    unique = [{"URL_NAME": "by-sku", "KWARG": "sku", "FILTER": "skus"}]
    with override_settings(LING_BLOOM=_conf(ROUTES=unique)):
        assert _check_ids(_conf(ROUTES=unique)) == []                      # names one URL
        assert get(Client(), "/shop/sku/nope/") [1] == 0                   # and guards it


def test_e002_hints_the_closest_url_name():
    from django.core import checks

    route = {"URL_NAME": "product-detial", "KWARG": "pk", "FILTER": "products"}
    with override_settings(LING_BLOOM=_conf(ROUTES=[route])):
        msgs = [m for m in checks.run_checks() if m.id == "ling_bloom.E002"]
    assert len(msgs) == 1 and "'product-detail'" in msgs[0].hint


# ---------------------------------------------------------------------------- test runs


def test_a_test_run_never_writes_the_deployed_file():
    # manage.py test, as the docs' example runs it, rewrote the deployed filter file and
    # its position (a test row's id became the position; real new rows then 404).
    bulk([1_000_000])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    assert os.path.exists(PRODUCTS_FILE) and not os.path.exists(DEPLOYED_FILE)
    assert not os.path.exists(DEPLOYED_FILE + ".sync.json")
    assert lbd.filter_file("products").endswith(".test")


# ------------------------------------------------------------------------- warm-ups


def _filter_conf(name, model, field, path, **extra):
    spec = {"CLASS": "MemoryFilter", "OPTIONS": {"capacity": 1000, "error_rate": 0.001},
            "MODEL": model, "FIELD": field, "FILE": str(path)}
    spec.update(extra)
    return _conf(FILTERS=dict(settings.LING_BLOOM["FILTERS"], **{name: spec}))


def _run_env():
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    support = os.path.join(tests, "support")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([support, os.environ.get("PYTHONPATH", "")]),
                LING_BLOOM_DJANGO_TMP=_TMP, DJANGO_SETTINGS_MODULE="django_project.settings")


def test_incremental_reads_a_row_committed_after_a_higher_numbered_one():
    # "primary key above the last one seen": a row whose id was taken before the last
    # run and committed after it (two PostgreSQL transactions) was skipped for good.
    bulk(list(range(1, 11)) + [12])
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    bulk([11])                                   # committed late, below the position 12
    out = io.StringIO()
    call_command("bloom_warmup", "products", "--incremental", stdout=out)
    assert "11" in lb.load(PRODUCTS_FILE)
    assert "last id 12" in out.getvalue()


def test_incremental_by_an_updated_at_column_sees_changed_keys_and_late_commits(tmp_path):
    # QuerySet.update of the key field was never seen by --incremental (by primary key).
    import datetime

    from django.db.models.functions import Now

    from django_project.shop.models import Article

    path = tmp_path / "articles.bloom"
    conf = _filter_conf("articles", "shop.Article", "slug", path,
                        INCREMENTAL={"SINCE": "updated_at", "LAG": 60})
    with override_settings(LING_BLOOM=conf):
        Article.objects.bulk_create([Article(slug=f"a-{i}") for i in range(5)])
        call_command("bloom_warmup", "articles", "--no-progress", stdout=io.StringIO())
        path = lbd.filter_file("articles")           # the test run's own file
        position = lb.warmup.FileState(path + ".sync.json").load()
        assert isinstance(position, datetime.datetime)
        first = Article.objects.order_by("pk").first()
        Article.objects.filter(pk=first.pk).update(slug="renamed", updated_at=Now())
        # a row stamped before the last run's position, committed after it (within LAG)
        late = Article.objects.create(slug="late")
        Article.objects.filter(pk=late.pk).update(
            updated_at=position - datetime.timedelta(seconds=30))
        out = io.StringIO()
        call_command("bloom_warmup", "articles", "--incremental", stdout=out)
        saved = lb.load(str(path))
        assert "renamed" in saved and "late" in saved and "a-3" in saved
        assert "keys read" in out.getvalue()


def test_incremental_when_the_file_is_gone_is_a_full_warm_up():
    # FILE deleted, its position file kept: --incremental published a filter of only the
    # new rows, and every older row answered 404 in every worker.
    bulk(range(1, 21))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    os.unlink(PRODUCTS_FILE)
    bulk(range(21, 26))
    out = io.StringIO()
    call_command("bloom_warmup", "products", "--incremental", stdout=out)
    assert "a full warm-up instead of --incremental" in out.getvalue()
    saved = lb.load(PRODUCTS_FILE)
    assert all(saved.test_many([str(i) for i in range(1, 26)]))


def test_warm_up_of_a_uuid_primary_key_publishes_and_keeps_its_position(tmp_path):
    # It failed with "UUID is not JSON serializable" after saving its position, and
    # published nothing: the guard stayed unwarmed for ever.
    from django.core.management.base import CommandError

    from django_project.shop.models import Voucher

    vouchers = Voucher.objects.bulk_create([Voucher(code=f"v{i}") for i in range(5)])
    path = tmp_path / "vouchers.bloom"
    with override_settings(LING_BLOOM=_filter_conf("vouchers", "shop.Voucher", "pk", path)):
        call_command("bloom_warmup", "vouchers", "--no-progress", stdout=io.StringIO())
        path = lbd.filter_file("vouchers")
        saved = lb.load(str(path))
        assert all(str(v.pk) in saved for v in vouchers)
        import uuid

        assert isinstance(lb.warmup.FileState(str(path) + ".sync.json").load(), uuid.UUID)
        with pytest.raises(CommandError, match="SINCE"):   # UUIDs are not in write order
            call_command("bloom_warmup", "vouchers", "--incremental", stdout=io.StringIO())


def test_the_position_is_saved_only_after_the_filter_is_published(monkeypatch):
    from ling_bloom.contrib.django_app.management.commands import bloom_warmup as cmd

    bulk(range(1, 11))
    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    state = lb.warmup.FileState(PRODUCTS_FILE + ".sync.json")
    assert state.load() == 10
    bulk(range(11, 16))

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cmd, "publish", fail)
    with pytest.raises(OSError):
        call_command("bloom_warmup", "products", "--incremental", stdout=io.StringIO())
    assert state.load() == 10                      # not moved past the unpublished rows


def test_warm_up_of_an_in_memory_filter_from_the_command_line_fails():
    # It filled its own process's filter, said "100 keys" and exited 0; every product then
    # answered 404 in the servers.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "django", "bloom_warmup", "skus", "--no-progress"],
                          env=_run_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "no server process sees" in proc.stderr
    out, err = io.StringIO(), io.StringIO()
    call_command("bloom_warmup", "skus", "--no-progress", stdout=out, stderr=err)
    assert "warning:" in err.getvalue()            # in-process (a test, a shell): it fills


def test_loaddata_rows_reach_the_filter(tmp_path):
    # loaddata (post_save with raw=True) was skipped: its rows answered 404 until a warm-up.
    import json

    call_command("bloom_warmup", "products", "--no-progress", stdout=io.StringIO())
    fixture = tmp_path / "products.json"
    fixture.write_text(json.dumps([{"model": "shop.product", "pk": 4242,
                                    "fields": {"sku": "fx-4242", "name": "from a fixture"}}]))
    call_command("loaddata", str(fixture), verbosity=0)
    r, queries = get(Client(), "/products/4242/")
    assert (r.status_code, queries) == (200, 1)


def test_migrate_says_that_migrated_rows_need_a_warm_up():
    from django.apps import apps

    class Migration:
        app_label = "shop"

    out = io.StringIO()
    lines = lbd.after_migrate(app_config=apps.get_app_config("shop"), verbosity=1,
                              plan=[(Migration(), False)], stdout=out)
    assert any("'products'" in x and "bloom_warmup" in x for x in lines)
    assert "bloom_warmup products" in out.getvalue()
    assert lbd.after_migrate(app_config=apps.get_app_config("shop"), plan=[]) == []


def test_a_process_that_saved_a_row_exits_without_an_ignored_exception(tmp_path):
    # Every process that saved a guarded row (gunicorn worker restarts, manage.py shell,
    # test runs) printed "Exception ignored in LogReader.close ... AttributeError" at exit.
    import subprocess
    import sys

    env = dict(_run_env(), LING_BLOOM_DJANGO_TMP=str(tmp_path))
    dj = [sys.executable, "-m", "django"]
    for argv in (["migrate", "--run-syncdb", "-v0"], ["bloom_warmup", "products", "--no-progress"]):
        proc = subprocess.run(dj + argv, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(dj + ["shell", "-c", "from django_project.shop.models import Product; "
                                "print(Product.objects.create(sku='x1', name='x').pk)"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("1"), proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("vendor,name,test_name,expected", [
    ("postgresql", "test_shop", None, True),          # create_test_db renamed "shop"
    ("postgresql", "shop", None, False),
    ("postgresql", "shop_ci", "shop_ci", True),       # TEST NAME set
    ("sqlite", "file:memorydb_default?mode=memory&cache=shared", None, True),
    ("sqlite", "/srv/shop/db.sqlite3", None, False),
])
def test_the_test_database_is_recognised_on_each_backend(monkeypatch, vendor, name, test_name,
                                                         expected):
    monkeypatch.setattr(connection, "vendor", vendor)
    monkeypatch.setitem(connection.settings_dict, "NAME", name)
    monkeypatch.setitem(connection.settings_dict, "TEST", dict(connection.settings_dict["TEST"],
                                                              NAME=test_name))
    assert lbd._test_database() is expected
    assert lbd.filter_file("products").endswith(".test") is expected
