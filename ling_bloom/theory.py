"""The arithmetic of Bloom filters, for capacity planning and for comparing what a filter
measures with what it promises."""
from __future__ import annotations

import math


def false_positive_rate(m: int, k: int, n: float) -> float:
    """(1 - e^(-k n / m))^k: the expected false-positive rate of m bits, k hashes, n keys."""
    if m <= 0 or k <= 0:
        raise ValueError("m and k must be positive")
    if n <= 0:
        return 0.0
    return float((-math.expm1(-k * n / m)) ** k)


def optimal_k(m: int, n: float) -> int:
    """The k that minimises the false-positive rate of m bits holding n keys (at least 1)."""
    if m <= 0 or n <= 0:
        raise ValueError("m and n must be positive")
    best = max(1, round(m / n * math.log(2)))
    candidates = {max(1, best - 1), best, best + 1}
    return min(candidates, key=lambda k: false_positive_rate(m, k, n))
