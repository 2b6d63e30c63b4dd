from django.apps import AppConfig


class LingBloomConfig(AppConfig):
    name = "ling_bloom.contrib.django_app"
    label = "ling_bloom"
    verbose_name = "ling_bloom"

    def ready(self) -> None:
        from ling_bloom.contrib.django import connect_signals
        from ling_bloom.contrib.django_app import checks  # noqa: F401  (registers them)

        connect_signals()
