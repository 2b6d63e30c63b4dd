"""The Django app of ling_bloom: add ``"ling_bloom.contrib.django_app"`` to INSTALLED_APPS
for the ``bloom_warmup`` management command and the post_save hooks of the filters in
settings.LING_BLOOM["FILTERS"] that name a MODEL."""
