from django.urls import include, path

from django_project.shop import views

shop_patterns = ([path("sku/<slug:sku>/", views.by_sku, name="by-sku")], "shop")
# two apps with a URL named "detail": only "catalog:detail" carries a product id
catalog_patterns = ([path("<int:pk>/", views.catalog_detail, name="detail")], "catalog")
orders_patterns = ([path("<int:pk>/", views.order_detail, name="detail")], "orders")

urlpatterns = [
    path("products/<int:pk>/", views.product_detail, name="product-detail"),
    path("products/new/", views.create_product, name="product-create"),
    path("plain/<pk>/", views.product_detail, name="plain-product"),   # a str converter
    path("cached/<int:pk>/", views.cached_product, name="cached-product"),
    path("legacy/product/<int:pk>/", views.legacy),
    path("unguarded/<int:pk>/", views.unguarded, name="unguarded"),
    path("shop/", include(shop_patterns)),
    path("catalog/", include(catalog_patterns)),
    path("orders/", include(orders_patterns)),
    path("api/products/<int:pk>/", views.put_product, name="product-api"),
]
