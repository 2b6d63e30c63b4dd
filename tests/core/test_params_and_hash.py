"""estimate(), indices() and hash_pair(): ling-base's vectors, the default hash, key types."""
from __future__ import annotations

import array
import json
import math
from pathlib import Path

import pytest

import ling_bloom as lb

VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "ling-base-hash-and-estimate.json").read_text("utf-8")
)
ESTIMATES = VECTORS["estimate"]
HASHES = VECTORS["hash"]
MASK64 = (1 << 64) - 1


def _key(case: dict) -> bytes:
    return bytes.fromhex(case["key_hex"])


def _p(case: dict) -> float:
    # NaN and +Inf are null in the JSON; p_str always has the value.
    return float(case["p_str"].replace("+Inf", "inf").replace("NaN", "nan"))


# ---- the vectors file itself ---------------------------------------------------------------


def test_vector_file_has_what_the_issue_counts():
    assert len(ESTIMATES) == 44
    assert len(HASHES) == 23
    assert sum(len(h["indices"]) for h in HASHES) == 161
    assert sum(1 for e in ESTIMATES if "error" in e) == 7


# ---- estimate -------------------------------------------------------------------------------

OK_ESTIMATES = [e for e in ESTIMATES if "error" not in e]
ERR_ESTIMATES = [e for e in ESTIMATES if "error" in e]


@pytest.mark.parametrize("case", OK_ESTIMATES, ids=lambda e: f"n={e['n']},p={e['p_str']}")
def test_estimate_vector(case):
    params = lb.estimate(case["n"], _p(case))
    assert (params.m, params.k) == (case["m"], case["k"])
    assert params.nbytes == case["bits_to_bytes"]
    assert isinstance(params, tuple) and params == (case["m"], case["k"])


@pytest.mark.parametrize("case", ERR_ESTIMATES, ids=lambda e: e["note"])
def test_estimate_error_vector(case):
    if "elements" in case["error"]:
        exc = lb.InvalidCapacityError
    else:
        assert "false-positive rate" in case["error"]
        exc = lb.InvalidFalsePositiveRateError
    with pytest.raises(exc):
        lb.estimate(case["n"], _p(case))


def test_estimate_errors_are_value_errors_and_bloom_errors():
    for exc in (lb.InvalidCapacityError, lb.InvalidFalsePositiveRateError, lb.EmptyKeyError):
        assert issubclass(exc, ValueError)
        assert issubclass(exc, lb.BloomError)
    with pytest.raises(ValueError):
        lb.estimate(0, 0.01)
    with pytest.raises(ValueError):
        lb.estimate(10, 1.0)


@pytest.mark.parametrize("p", [float("nan"), float("inf"), float("-inf"), 0.0, 1.0, -0.0, 1.5, -1e-9])
def test_estimate_rejects_every_rate_outside_open_unit_interval(p):
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        lb.estimate(100, p)


def test_estimate_checks_n_before_p():
    with pytest.raises(lb.InvalidCapacityError):
        lb.estimate(0, float("nan"))


def test_estimate_negative_n():
    with pytest.raises(lb.InvalidCapacityError):
        lb.estimate(-1, 0.01)


@pytest.mark.parametrize(
    "n,p",
    [
        (2**64 - 1, 1e-300),  # m far beyond 2**63
        (2**70, 0.01),  # n does not even fit in 64 bits
        (2**63, 0.5),
        (10**18, 1e-300),
    ],
)
def test_estimate_overflow_is_a_clear_error(n, p):
    with pytest.raises(lb.InvalidCapacityError):
        lb.estimate(n, p)


def test_estimate_large_but_representable():
    # 1e18 keys at 1%: m ~ 9.6e18 > 2**63 -> error; 1e17 keys fit in 63 bits.
    m, k = lb.estimate(10**17, 0.01)
    assert m == math.ceil(10**17 * -math.log(0.01) / 0.48045301391820144)
    assert k == 7


@pytest.mark.parametrize("factory", [lb.MemoryFilter, lb.CountingFilter])
def test_filters_refuse_geometries_that_could_never_be_allocated(factory):
    # estimate() succeeds (ling-base's arithmetic) but 2**48 bits is the allocation limit.
    with pytest.raises(lb.InvalidCapacityError):
        factory(10**15, 1e-10)
    with pytest.raises(lb.InvalidCapacityError):
        factory(m=lb.MAX_BITS + 1, k=3)
    with pytest.raises(lb.InvalidCapacityError):
        factory(m=2**64 + 5, k=3)
    # a rate so small that k would exceed MAX_K: a rate error, not a crash or a 1000-hash filter
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        factory(1000, 1e-300)
    with pytest.raises(ValueError):
        factory(m=100, k=lb.MAX_K + 1)


def test_scalable_refuses_a_first_stage_that_cannot_exist():
    with pytest.raises(ValueError):
        lb.ScalableFilter(10**15, 1e-10)
    with pytest.raises(ValueError):
        lb.ScalableFilter(1, 1e-300)


def test_params_nbytes():
    assert lb.Params(0, 1).nbytes == 0
    assert lb.Params(1, 1).nbytes == 1
    assert lb.Params(8, 1).nbytes == 1
    assert lb.Params(9, 1).nbytes == 2


# ---- ling-base indices: 161 vectors --------------------------------------------------------

INDEX_CASES = [
    pytest.param(h, g, id=f"{h['key_hex'][:16] or 'empty'}-m{g['m']}-k{g['k']}")
    for h in HASHES
    for g in h["indices"]
]
NONEMPTY_INDEX_CASES = [c for c in INDEX_CASES if c.values[0]["key_hex"]]
EMPTY_INDEX_CASES = [c for c in INDEX_CASES if not c.values[0]["key_hex"]]


def _reference_ling_base(key: bytes, m: int, k: int) -> list[int]:
    """hash.go in Python: the model the vectors came from."""

    def fnv1a(data: bytes, h: int = 14695981039346656037) -> int:
        for b in data:
            h = ((h ^ b) * 1099511628211) & MASK64
        return h

    h1 = fnv1a(key)
    h2 = fnv1a(bytes([0x5A, 0xC3, 0x91, 0xD7]) + key) or 0x9E3779B97F4A7C15
    return [((h1 + i * h2) & MASK64) % m for i in range(k)]


def test_reference_model_reproduces_all_161_vectors():
    # Validates the Python model used below for keys that are not in the file.
    n = 0
    for h in HASHES:
        for g in h["indices"]:
            assert _reference_ling_base(_key(h), g["m"], g["k"]) == g["indices"]
            n += 1
    assert n == 161


@pytest.mark.parametrize("case,geo", NONEMPTY_INDEX_CASES)
def test_ling_base_index_vector(case, geo):
    key = _key(case)
    assert lb.indices(key, geo["m"], geo["k"], hash="ling-base") == geo["indices"]
    # the same key as a str, when it is valid UTF-8
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return
    assert lb.indices(text, geo["m"], geo["k"], hash="ling-base") == geo["indices"]


@pytest.mark.parametrize("case", [h for h in HASHES if h["key_hex"]], ids=lambda h: h["key_hex"][:16])
def test_ling_base_hash_pair_vector(case):
    assert lb.hash_pair(_key(case), hash="ling-base") == (int(case["h1"]), int(case["h2"]))


@pytest.mark.parametrize("case,geo", EMPTY_INDEX_CASES)
def test_ling_base_index_vector_empty_key(case, geo):
    assert lb.indices(b"", geo["m"], geo["k"], hash="ling-base") == geo["indices"]


def test_ling_base_random_geometries_match_the_model():
    import random

    rng = random.Random(1234)
    for _ in range(300):
        key = rng.randbytes(rng.randint(1, 40))
        m = rng.choice([1, 2, 3, 7, 1000, 2**32 + 15, 2**47 - 1, lb.MAX_BITS, rng.randint(1, lb.MAX_BITS)])
        k = rng.randint(1, lb.MAX_K)
        assert lb.indices(key, m, k, hash="ling-base") == _reference_ling_base(key, m, k), (key, m, k)


def test_indices_argument_errors():
    with pytest.raises(lb.InvalidCapacityError):
        lb.indices("a", 0, 3)
    with pytest.raises(ValueError):
        lb.indices("a", 10, 0)
    with pytest.raises(ValueError):
        lb.indices("a", 10, lb.MAX_K + 1)
    with pytest.raises(ValueError):
        lb.indices("a", 10, 3, hash="md5")
    with pytest.raises(TypeError):
        lb.indices("a", 10, 3, hash=1)
    with pytest.raises(lb.InvalidCapacityError):
        lb.indices("a", -5, 3)
    assert lb.indices("a", 10, 3, hash=None) == lb.indices("a", 10, 3, hash="xxh3-mix")


# ---- the default hash: xxh3-mix (and xxh3, the walk of 0.1) ----------------------------------

# Pinned when this file was written: these are part of the saved-file format and of every
# shared Redis bitmap, so they must never change.  Both xxh3 schemes hash the same way.
PINNED_PAIRS = {
    b"user:1": (6236856544819034892, 12956378270619167861),
    b"550e8400-e29b-41d4-a716-446655440000": (11990551846113508245, 9215554640163492871),
    b"https://example.com/a?b=1": (17400159323962776690, 14676754051934457813),
    b"\x00\xff\x10": (11833089303367654703, 8586435752009283395),
}
# hash="xxh3-mix", the default since 0.2
PINNED_INDICES = {
    (b"user:1", 1000, 7): [811, 723, 615, 291, 646, 223, 697],
    (b"user:1", 9585059, 7): [7775716, 6937186, 5901602, 2793845, 6199524, 2141581, 6689993],
    (b"user:1", 2**40 + 3, 5): [891960119535, 795771542743, 676978717139, 320484838934, 711153612628],
    (b"550e8400-e29b-41d4-a716-446655440000", 1000, 7): [425, 447, 62, 706, 791, 441, 58],
    (b"https://example.com/a?b=1", 9585059, 7): [8518192, 3101466, 282868, 8875864, 5142765, 5720747, 3022196],
    (b"\x00\xff\x10", 2**40 + 3, 5): [783683883035, 68525811073, 408535819013, 791913054925, 1033923852167],
}
# hash="xxh3", the walk of 0.1 (what its files and Redis bitmaps hold).  The uuid row shows
# its flaw: h2 * 1000 / 2^64 lies near a whole number of cells, so the probes step by -501
# and +500 and pair up on neighbouring cells.
PINNED_INDICES_0_1 = {
    (b"user:1", 1000, 7): [338, 40, 742, 445, 147, 849, 552],
    (b"user:1", 9585059, 7): [3240714, 387881, 7120107, 4267274, 1414441, 8146667, 5293834],
    (b"user:1", 2**40 + 3, 5): [371745618870, 44494315488, 816754639886, 489503336505, 162252033124],
    (b"550e8400-e29b-41d4-a716-446655440000", 1000, 7): [650, 149, 649, 148, 648, 147, 647],
    (b"https://example.com/a?b=1", 9585059, 7): [9041246, 7082332, 5123419, 3164505, 1205591, 8831737, 6872823],
    (b"\x00\xff\x10", 2**40 + 3, 5): [705307084524, 117586909632, 629378362518, 41658187626, 553449640513],
}


@pytest.mark.parametrize("key", list(PINNED_PAIRS))
def test_xxh3_hash_pair_is_pinned(key):
    assert lb.hash_pair(key) == PINNED_PAIRS[key]
    assert lb.hash_pair(key, hash="xxh3") == PINNED_PAIRS[key]
    assert lb.hash_pair(key, hash="xxh3-mix") == PINNED_PAIRS[key]


@pytest.mark.parametrize("args", list(PINNED_INDICES))
def test_xxh3_indices_are_pinned(args):
    key, m, k = args
    assert lb.indices(key, m, k) == PINNED_INDICES[args]
    assert lb.indices(key, m, k, hash="xxh3-mix") == PINNED_INDICES[args]
    assert lb.indices(key, m, k, hash="xxh3") == PINNED_INDICES_0_1[args]


def _distinct_cells_distribution(m: int, k: int) -> dict[int, float]:
    """P(k independent uniform indices in [0, m) cover d cells) = S(k, d) m!/(m-d)! / m^k."""
    from ling_bloom.theory import _stirling2_row

    stirling, falling, out = _stirling2_row(k), 1, {}
    for d in range(1, k + 1):
        falling *= m - d + 1
        out[d] = stirling[d] * falling / m**k
    return out


@pytest.mark.parametrize("m,k", [(15, 11), (10, 7), (20, 14), (96, 7), (1000, 20)])
def test_the_default_walk_covers_cells_as_independent_indices_do(m, k):
    """How many distinct cells a key's k probes cover, over 4000 keys, against the exact
    distribution for k independent uniform indices (total variation distance).  The 0.1
    walk fails the same check: most keys step through distinct cells (an arithmetic
    progression), a few put every probe on one or two."""
    from collections import Counter

    ideal = _distinct_cells_distribution(m, k)
    keys = [f"key:{i}" for i in range(4000)]

    def distance(scheme):
        seen = Counter(len(set(lb.indices(x, m, k, hash=scheme))) for x in keys)
        return 0.5 * sum(abs(seen.get(d, 0) / len(keys) - ideal[d]) for d in ideal)

    assert distance("xxh3-mix") < 0.04
    assert distance("xxh3") > 0.1


def test_the_0_1_walk_on_one_key():
    """ling_bloom.indices("k0", 15, 11) under the 0.1 walk: ten of eleven probes on cell 11."""
    assert lb.indices("k0", 15, 11, hash="xxh3") == [10] + [11] * 10
    f = lb.MemoryFilter(m=15, k=11, hash="xxh3")
    f.add("k0")
    assert f.bits_set == 2


def _reference_xxh3(key: bytes, m: int, k: int, mix: bool) -> list[int]:
    import xxhash

    v = xxhash.xxh3_128_intdigest(key)
    h1, h2 = v & MASK64, (v >> 64) | 1
    out = []
    for i in range(k):
        x = (h1 + i * h2) & MASK64
        if mix:
            x = ((x ^ (x >> 32)) * 0xD6E8FEB86659FD93) & MASK64
        out.append((x * m) >> 64)
    return out


@pytest.mark.parametrize("scheme", ["xxh3-mix", "xxh3"])
def test_xxh3_matches_an_independent_implementation(scheme):
    """hash.h's contract: (h1, h2) = low/high 64 bits of XXH3-128 seed 0, h2 |= 1;
    x_i = h1 + i*h2 mod 2^64; xxh3-mix maps x_i to (x_i ^ x_i >> 32) * 0xd6e8feb86659fd93
    mod 2^64 first; then Lemire's fastrange.  Checked against the xxhash PyPI package."""
    pytest.importorskip("xxhash")
    import random

    rng = random.Random(99)
    keys = [rng.randbytes(rng.randint(1, 300)) for _ in range(300)] + list(PINNED_PAIRS)
    for key in keys:
        m = rng.choice([1, 2, 1000, 9585059, 2**40 + 3, lb.MAX_BITS, rng.randint(1, lb.MAX_BITS)])
        k = rng.randint(1, lb.MAX_K)
        assert lb.indices(key, m, k, hash=scheme) == _reference_xxh3(
            key, m, k, scheme == "xxh3-mix"), (key, m, k)


def test_xxh3_h2_is_odd_and_indices_below_m():
    import random

    rng = random.Random(5)
    for i in range(2000):
        key = f"key:{i}".encode()
        h1, h2 = lb.hash_pair(key)
        assert h2 & 1 == 1
        assert 0 <= h1 <= MASK64 and 0 <= h2 <= MASK64
        m = rng.randint(1, 10**6)
        idx = lb.indices(key, m, 13)
        assert len(idx) == 13
        assert all(0 <= x < m for x in idx)
    assert lb.indices(b"anything", 1, 5) == [0, 0, 0, 0, 0]
    assert all(0 <= x < lb.MAX_BITS for x in lb.indices(b"big", lb.MAX_BITS, lb.MAX_K))


def test_the_two_schemes_differ():
    assert lb.hash_pair("user:42") != lb.hash_pair("user:42", hash="ling-base")


# ---- key types ------------------------------------------------------------------------------

KEY_EQUIVALENTS = [
    ("hello", b"hello"),
    ("中文键", "中文键".encode()),
    ("emoji🙂", "emoji🙂".encode()),
    ("a\x00b", b"a\x00b"),
    ("é", "é".encode()),  # non-ASCII but Latin-1 compact str
]


@pytest.mark.parametrize("scheme", ["xxh3-mix", "xxh3", "ling-base"])
@pytest.mark.parametrize("text,raw", KEY_EQUIVALENTS)
def test_str_hashes_as_its_utf8(text, raw, scheme):
    expected = lb.indices(raw, 1 << 30, 9, hash=scheme)
    assert lb.indices(text, 1 << 30, 9, hash=scheme) == expected
    assert lb.hash_pair(text, hash=scheme) == lb.hash_pair(raw, hash=scheme)
    for other in (bytearray(raw), memoryview(raw), array.array("B", raw), memoryview(bytearray(raw))):
        assert lb.indices(other, 1 << 30, 9, hash=scheme) == expected, type(other)


def test_str_subclass_and_bytes_subclass_are_keys():
    class S(str):
        pass

    class B(bytes):
        pass

    assert lb.hash_pair(S("user:1")) == PINNED_PAIRS[b"user:1"]
    assert lb.hash_pair(B(b"user:1")) == PINNED_PAIRS[b"user:1"]


def test_wider_buffers_hash_their_raw_bytes():
    arr = array.array("I", [1, 2, 3])
    assert lb.hash_pair(arr) == lb.hash_pair(arr.tobytes())
    mv = memoryview(b"abcdef")[1:4]  # a contiguous slice
    assert lb.hash_pair(mv) == lb.hash_pair(b"bcd")


def _all_filters():
    return [
        lb.MemoryFilter(1000),
        lb.MemoryFilter(1000, hash="ling-base"),
        lb.CountingFilter(1000),
        lb.ScalableFilter(100),
    ]


@pytest.mark.parametrize("bad", [False, None, 1.5, ["a"], ("a",), {"a"}, object(), True])
def test_non_key_types_are_type_errors(bad):
    with pytest.raises(TypeError):
        lb.indices(bad, 10, 3)
    with pytest.raises(TypeError):
        lb.hash_pair(bad)
    for f in _all_filters():
        with pytest.raises(TypeError):
            f.add(bad)
        with pytest.raises(TypeError):
            f.test(bad)
        with pytest.raises(TypeError):
            bad in f  # noqa: B015
        with pytest.raises(TypeError):
            f.add_many(["ok", bad])
        with pytest.raises(TypeError):
            f.test_many(["ok", bad])


@pytest.mark.parametrize("empty", ["", b"", bytearray(), memoryview(b""), array.array("B")])
def test_empty_keys_are_empty_key_errors(empty):
    for f in _all_filters():
        with pytest.raises(lb.EmptyKeyError):
            f.add(empty)
        with pytest.raises(lb.EmptyKeyError):
            f.test(empty)
        with pytest.raises(ValueError):
            empty in f  # noqa: B015
        with pytest.raises(lb.EmptyKeyError):
            f.add_many(["x", empty])
        with pytest.raises(lb.EmptyKeyError):
            f.update(["x", empty])
        assert f.test("x") is False  # the failed batches changed nothing


def test_non_contiguous_buffer_is_type_error():
    strided = memoryview(b"abcdef")[::2]
    with pytest.raises(TypeError):
        lb.hash_pair(strided)
    for f in _all_filters():
        with pytest.raises(TypeError):
            f.add(strided)
        with pytest.raises(TypeError):
            f.add_many([strided])


@pytest.mark.parametrize("bad", ["\ud800", "ok\udfff", "a\ud83d"])
def test_lone_surrogates_raise_unicode_encode_error(bad):
    with pytest.raises(UnicodeEncodeError):
        lb.hash_pair(bad)
    for f in _all_filters():
        with pytest.raises(UnicodeEncodeError):
            f.add(bad)
        with pytest.raises(UnicodeEncodeError):
            f.test(bad)
        with pytest.raises(UnicodeEncodeError):
            f.add_many(["fine", bad])
        assert f.test("fine") is False
        # the filter still works afterwards
        assert f.add("fine") is True
        assert "fine" in f


def test_long_and_binary_keys():
    f = lb.MemoryFilter(1000)
    big = bytes(range(256)) * 4096  # 1 MiB
    assert f.add(big) is True
    assert f.test(big)
    assert not f.test(big[:-1])
    for b in range(256):
        f.add(bytes([b]))
    assert all(f.test(bytes([b])) for b in range(256))
