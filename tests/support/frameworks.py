"""Importing a framework in a test module: skip (with the reason) when it is not installed,
except under CI=true, where the test extras must have installed it: there it fails."""
from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from redis_server import in_ci


def require(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = f"{module} is not installed (pip install 'ling_bloom[{extra}]'): {e}"
        if in_ci():
            pytest.fail(f"{reason} -- CI=true: the test extra must install it", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
        raise  # unreachable
