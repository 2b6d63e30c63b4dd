import os

from django.http import JsonResponse
from django.shortcuts import get_object_or_404

from ling_bloom.contrib.django import guard_for

from .models import Product


def _json(p):
    return {"id": p.pk, "sku": p.sku, "name": p.name}


def product_detail(request, pk):
    response = JsonResponse(_json(get_object_or_404(Product, pk=pk)))
    response["X-Worker"] = str(os.getpid())   # which worker process answered
    return response


def create_product(request):
    """POST: a new row; the post_save hook adds its key (tests/test_live_servers.py)."""
    if request.method != "POST":
        return JsonResponse({"error": "POST only"}, status=405)
    p = Product.objects.create(sku=f"new-{os.getpid()}-{Product.objects.count()}-{id(request)}",
                               name="created over HTTP")
    return JsonResponse({"id": p.pk}, status=201)


def by_sku(request, sku):
    return JsonResponse(_json(get_object_or_404(Product, sku=sku)))


def legacy(request, pk):
    return product_detail(request, pk)


def unguarded(request, pk):
    return product_detail(request, pk)


_cached = None


def cached_product(request, pk):
    """The full flow: filter, Django's cache with null caching, one query per key."""
    global _cached
    if _cached is None:
        @guard_for("products", cache="default", null_ttl=60, metrics=False)
        def load(key):
            p = Product.objects.filter(pk=int(key)).first()
            return None if p is None else _json(p)

        _cached = load
    value = _cached(pk)
    if value is None:
        return JsonResponse({"error": "not found"}, status=404)
    return JsonResponse(value)


def order_detail(request, pk):
    """Another app's URL named "detail" (namespace "orders"): every order id exists."""
    return JsonResponse({"order": pk})


def catalog_detail(request, pk):
    return product_detail(request, pk)


def put_product(request, pk):
    """PUT creates the row with this id (an upsert); GET reads it."""
    if request.method == "PUT":
        p, _ = Product.objects.update_or_create(pk=pk, defaults={"sku": f"put-{pk}", "name": "put"})
        return JsonResponse({"id": p.pk}, status=201)
    if request.method == "OPTIONS":
        response = JsonResponse({})
        response["Access-Control-Allow-Methods"] = "GET, PUT"
        return response
    return product_detail(request, pk)
