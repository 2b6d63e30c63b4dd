"""Framework integrations of the guard (each an optional extra):

- ``ling_bloom.contrib.django``: middleware, a ``bloom_warmup`` management command (add
  ``"ling_bloom.contrib.django_app"`` to INSTALLED_APPS), a post_save hook, DjangoCache.
- ``ling_bloom.contrib.flask``: the ``BloomGuard`` extension, a view decorator, and the
  ``flask bloom-warmup`` command.
- ``ling_bloom.contrib.asgi``: ``BloomGuardMiddleware`` for Starlette / FastAPI.

Nothing here is imported by ``import ling_bloom``; each module imports its framework.
"""
