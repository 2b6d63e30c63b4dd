"""The measured false-positive rate of the default hash against theory, with a statistical
bound, on several key shapes; and a check that the same bound rejects the "ling-base" scheme
where hashing-fpr.md says it is far off (so the test can fail).

theory = (1 - e^(-k n / m))^k for the filter's actual m and k; the measured rate over N absent
probes is binomial, so it must lie within Z standard deviations sqrt(theory (1 - theory) / N).
"""
from __future__ import annotations

import math
import random
import uuid
import zlib

import pytest

import ling_bloom as lb

N = 200_000
PROBES = 400_000
Z = 5.0


def sequential(start: int, count: int, rng: random.Random) -> list[str]:
    return [f"user:{i}" for i in range(start, start + count)]


def uuids(start: int, count: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(count):
        h = f"{rng.getrandbits(128):032x}"
        v = "89ab"[int(h[16], 16) & 3]
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{v}{h[17:20]}-{h[20:]}")
    return out


def urls(start: int, count: int, rng: random.Random) -> list[str]:
    return [
        f"https://shop.example.com/product/{i}?ref=campaign-{i % 97}&lang=en"
        for i in range(start, start + count)
    ]


def random_bytes(start: int, count: int, rng: random.Random) -> list[bytes]:
    return [rng.randbytes(16) for _ in range(count)]


SHAPES = {"user:N": sequential, "uuid4": uuids, "url": urls, "random 16 bytes": random_bytes}


def measure(added, probes, p: float, scheme: str):
    f = lb.MemoryFilter(len(added), p, hash=scheme)
    f.update(added)
    assert all(f.test_many(added[:10_000]))
    fp = sum(f.test_many(probes))
    measured = fp / len(probes)
    theory = lb.false_positive_rate(f.m, f.k, len(added))
    sigma = math.sqrt(theory * (1 - theory) / len(probes))
    return measured, theory, sigma


def disjoint(shape, seed: int):
    rng = random.Random(seed)
    added = SHAPES[shape](0, N, rng)
    probes = SHAPES[shape](N, PROBES, rng)
    if shape in ("uuid4", "random 16 bytes"):
        seen = set(added)
        probes = [x for x in probes if x not in seen]
    return added, probes


def test_uuid_shape():
    (u,) = uuids(0, 1, random.Random(1))
    assert uuid.UUID(u).version == 4 and str(uuid.UUID(u)) == u


@pytest.mark.parametrize("p", [0.01, 0.001])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_default_hash_matches_theory(shape, p):
    added, probes = disjoint(shape, seed=zlib.crc32(f"{shape}/{p}".encode()))  # fixed per case
    measured, theory, sigma = measure(added, probes, p, "xxh3")
    assert abs(measured - theory) <= Z * sigma, (
        f"{shape} p={p}: measured {measured:.5f}, theory {theory:.5f}, "
        f"{(measured - theory) / sigma:+.1f} sigma")
    assert theory <= p * 1.01  # Estimate's rounding of k puts theory within 1% of p


def test_the_bound_can_fail_ling_base_is_far_off():
    """hashing-fpr.md: FNV-1a double hashing on 16 random hex chars, probed with "absent:N",
    measures about 11x theory at p = 0.001.  The bound used above must reject it."""
    rng = random.Random(2024)
    added = [f"{rng.getrandbits(64):016x}" for _ in range(N)]
    probes = [f"absent:{i}" for i in range(PROBES)]
    measured, theory, sigma = measure(added, probes, 0.001, "ling-base")
    assert abs(measured - theory) > Z * sigma
    assert measured > 3 * theory
    # the default hash on the same keys and probes is within the bound
    measured, theory, sigma = measure(added, probes, 0.001, "xxh3")
    assert abs(measured - theory) <= Z * sigma


def test_ling_base_sequential_keys_also_off():
    """The other direction of hashing-fpr.md's table: "user:N" / "absent:N" at 0.001 is
    several times theory under ling-base."""
    added = [f"user:{i}" for i in range(N)]
    probes = [f"absent:{i}" for i in range(PROBES)]
    measured, theory, sigma = measure(added, probes, 0.001, "ling-base")
    assert abs(measured - theory) > Z * sigma
