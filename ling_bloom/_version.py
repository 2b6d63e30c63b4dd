"""The version of ling_bloom: the one place it is written.

pyproject.toml reads it from here (``[tool.setuptools.dynamic]``), the package
re-exports it as ``ling_bloom.__version__``, and CHANGELOG.md names each release.
"""
__version__ = "0.1.0"
