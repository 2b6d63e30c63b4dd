from django.db import models


class Product(models.Model):
    sku = models.CharField(max_length=40, unique=True)
    name = models.CharField(max_length=100)

    class Meta:
        app_label = "shop"


class Offer(models.Model):
    """A row whose key field is a ForeignKey (the product on offer)."""
    product = models.ForeignKey(Product, on_delete=models.CASCADE)

    class Meta:
        app_label = "shop"


class Voucher(models.Model):
    """A model with a UUID primary key."""
    import uuid as _uuid

    id = models.UUIDField(primary_key=True, default=_uuid.uuid4)
    code = models.CharField(max_length=40)

    class Meta:
        app_label = "shop"


class Article(models.Model):
    """A model with a commit-ordered column: each save stamps updated_at."""
    slug = models.CharField(max_length=40)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        app_label = "shop"
