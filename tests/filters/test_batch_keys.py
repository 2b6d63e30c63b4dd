"""Batches of the in-memory types: every key shape, over several chunks, gives what the
single-key calls give, and a bad key anywhere changes nothing (keys.c's batch drivers)."""
from __future__ import annotations

import array

import pytest

import ling_bloom as lb


class Sub(str):
    """A str subclass: not the compact-ASCII fast path, hashed as its UTF-8."""


SHAPES = [
    lambda i: f"ascii:{i}",
    lambda i: f"ünïcode:{i}",
    lambda i: f"\U0001F600{i}",
    lambda i: Sub(f"sub:{i}"),
    lambda i: f"bytes:{i}".encode(),
    lambda i: bytearray(f"bytearray:{i}".encode()),
    lambda i: memoryview(f"memoryview:{i}".encode()),
    lambda i: array.array("B", f"array:{i}".encode()),
]


def mixed_keys(n: int, offset: int = 0) -> list:
    return [SHAPES[i % len(SHAPES)](i + offset) for i in range(n)]


FILTERS = {
    "memory": lambda: lb.MemoryFilter(6000, 0.01),
    "memory-xxh3": lambda: lb.MemoryFilter(6000, 0.01, hash="xxh3"),
    "memory-ling-base": lambda: lb.MemoryFilter(6000, 0.01, hash="ling-base"),
    "blocked": lambda: lb.BlockedFilter(6000, 0.01),
    "counting": lambda: lb.CountingFilter(6000, 0.01),
    "scalable": lambda: lb.ScalableFilter(1000, 0.01),
}


@pytest.fixture(params=sorted(FILTERS))
def make(request):
    return FILTERS[request.param]


def test_every_key_shape_in_a_batch_is_the_same_key_as_alone(make):
    # Over two 2048-key chunks and a short last one, with duplicates across chunks.
    ks = mixed_keys(4500) + mixed_keys(200)
    a, b, c = make(), make(), make()
    singles = [a.add(k) for k in ks]
    assert b.add_many(ks) == singles
    assert c.update(ks) is None
    assert a.to_bytes() == b.to_bytes() == c.to_bytes()
    assert singles[4500:] == [False] * 200
    probe = ks + mixed_keys(3000, offset=10**6)
    expected = [a.test(k) for k in probe]
    assert expected[:4700] == [True] * 4700
    assert b.test_many(probe) == expected == [k in b for k in probe]


def test_a_str_and_its_utf8_are_one_key_in_a_batch(make):
    f = make()
    words = [f"ünï-{i}" for i in range(3000)]
    f.update(words)
    assert all(f.test_many([w.encode() for w in words]))
    assert f.add_many([w.encode() for w in words]) == [False] * 3000


@pytest.mark.parametrize("where", [0, 2047, 2048, 4999])
@pytest.mark.parametrize("bad", ["", b"", None, 7.0, True, memoryview(b"abcd")[::2]])
def test_a_bad_key_anywhere_in_a_batch_changes_nothing(make, bad, where):
    f = make()
    f.update(mixed_keys(10))
    before = f.to_bytes()
    batch = mixed_keys(5000, offset=100)
    batch[where] = bad
    error = lb.EmptyKeyError if bad in ("", b"") else TypeError
    for method in (f.add_many, f.update, f.test_many):
        with pytest.raises(error):
            method(batch)
    assert f.to_bytes() == before


@pytest.mark.parametrize("single", [b"ab", bytearray(b"ab"), memoryview(b"ab"), "ab"])
@pytest.mark.parametrize("method", ["add_many", "update", "test_many"])
def test_a_single_bytes_like_key_is_not_a_batch_of_its_byte_values(make, single, method):
    # a memoryview iterates as the numbers of its bytes: taken as a batch it was the keys
    # "97" and "98", silently
    f = make()
    with pytest.raises(TypeError, match="single"):
        getattr(f, method)(single)
    assert f.test_many(["97", "98"]) == [False, False]


def test_a_batch_of_a_closed_filter_raises_closed_error(make):
    f = make()
    f.close()
    for method in (f.add_many, f.update, f.test_many):
        with pytest.raises(lb.ClosedError):
            method(["a", "b"])


def test_a_scalable_batch_that_cannot_grow_raises_from_a_gil_free_chunk():
    # As test_scalable_filter's growth test: a chain that cannot take a 16th key; batches of
    # 3,000 keys (chunks run with the GIL released) raise the growth error of the chunk.
    f = lb.ScalableFilter(1, 1e-18, 2.0, 0.5)
    added = sum(f.add_many([f"k:{i}" for i in range(15)]))
    assert added == 15 and f.num_sub_filters == 4
    before = f.to_bytes()
    for method in (f.add_many, f.update):
        with pytest.raises(lb.InvalidCapacityError, match="cannot grow further"):
            method([f"batch:{i}" for i in range(3000)])
    assert f.to_bytes() == before
    assert f.test_many([f"k:{i}" for i in range(15)]) == [True] * 15


def test_int_likes_in_a_batch_are_the_key_of_their_int(make):
    # numpy's integer scalars (a pandas column's values) and int subclasses between the other
    # shapes, over several chunks: the keys of their ints, as alone.
    np = pytest.importorskip("numpy")
    col = np.arange(-100, 4400, dtype=np.int64)
    ks = [v if i % 3 else SHAPES[i % len(SHAPES)](i) for i, v in enumerate(col)]
    as_ints = [int(k) if isinstance(k, np.integer) else k for k in ks]
    a, b, c = make(), make(), make()
    assert a.add_many(ks) == [b.add(k) for k in as_ints]
    c.update(ks)
    assert a.to_bytes() == b.to_bytes() == c.to_bytes()
    assert c.test_many([str(int(v)) for v in col[1::3]]) == [True] * len(col[1::3])


@pytest.mark.parametrize("where", [0, 2047, 2048, 4999])
def test_a_numpy_number_that_is_not_an_integer_anywhere_in_a_batch_changes_nothing(make, where):
    np = pytest.importorskip("numpy")
    f = make()
    f.update(mixed_keys(10))
    before = f.to_bytes()
    for bad in (np.float64(7.0), np.float32(7.0), np.bool_(True), np.array(7.5)):
        batch = [np.int64(i) for i in range(5000)]
        batch[where] = bad
        for method in (f.add_many, f.update, f.test_many):
            with pytest.raises(TypeError, match="or int, not "):
                method(batch)
    assert f.to_bytes() == before


# An add keeps the hash pairs of its first 2**20 keys from the check of every key (16 MiB at
# most); the keys past them are checked, then read again chunk by chunk.
KEPT = 2**20

LARGE = {
    "memory": lambda: lb.MemoryFilter(3_000_000, 0.01),
    "memory-ling-base": lambda: lb.MemoryFilter(3_000_000, 0.01, hash="ling-base"),
    "blocked": lambda: lb.BlockedFilter(3_000_000, 0.01),
    "counting": lambda: lb.CountingFilter(3_000_000, 0.01),
    "scalable": lambda: lb.ScalableFilter(3_000_000, 0.01),
}


@pytest.fixture(scope="module")
def past_kept():
    """KEPT + 5,000 keys: str, then every shape (and ints past 64 bits) after KEPT."""
    tail = mixed_keys(5000) + [2**70 + i for i in range(50)] + [-i for i in range(50)]
    return [f"s:{i}" for i in range(KEPT - 100)] + tail


@pytest.mark.parametrize("name", sorted(LARGE))
def test_keys_past_those_an_add_hashes_first_are_the_same_keys(name, past_kept):
    # Split where every part's pairs are kept by its check, the batch gives the same bits
    # and answers as whole.
    whole, parts = LARGE[name](), LARGE[name]()
    answers = whole.add_many(past_kept)
    cut = len(past_kept) // 2
    assert answers == parts.add_many(past_kept[:cut]) + parts.add_many(past_kept[cut:])
    assert whole.to_bytes() == parts.to_bytes()
    again = LARGE[name]()
    again.update(tuple(past_kept))
    assert again.to_bytes() == whole.to_bytes()
    assert all(whole.test_many(past_kept[-6000:]))


@pytest.mark.parametrize("name", sorted(LARGE))
@pytest.mark.parametrize("bad", ["", None, memoryview(b"abcd")[::2]])
def test_a_bad_key_past_those_an_add_hashes_first_changes_nothing(name, bad, past_kept):
    f = LARGE[name]()
    f.update(["before"])
    before = f.to_bytes()
    error = lb.EmptyKeyError if bad == "" else TypeError
    for where in (KEPT + 10, len(past_kept) - 1):
        batch = list(past_kept)
        batch[where] = bad
        with pytest.raises(error):
            f.update(batch)
        with pytest.raises(error):
            f.add_many(iter(batch))
        assert f.to_bytes() == before


def test_a_list_batch_uses_memory_of_its_chunks_not_of_its_length():
    # A test hashes chunk by chunk (a few kB); an add keeps the pairs of its first 2**20
    # keys (16 MiB) at most.  Before, both hashed every key first: 16 bytes per key, 32 MB
    # for these 2,000,000 keys.
    import tracemalloc

    ks = [f"user:{i}" for i in range(2_000_000)]
    for make in (lambda: lb.MemoryFilter(2_000_000, 0.01), lambda: lb.BlockedFilter(2_000_000, 0.01),
                 lambda: lb.CountingFilter(2_000_000, 0.01)):
        f = make()
        peaks = []
        for call in (f.update, f.test_many):
            tracemalloc.start()
            try:
                r = call(ks)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            del r
        add_peak, test_peak = peaks
        assert add_peak < 16 * 2**20 + 300_000, (type(f).__name__, add_peak)
        # the answers' list (8 bytes per key) is the test's own
        assert test_peak < 8 * len(ks) + 300_000, (type(f).__name__, test_peak)


def test_a_key_whose_conversion_empties_the_list_leaves_the_keys_read_before_it_whole(make):
    # A chunk's str keys are read in place, then hashed a few at a time; an int-like's
    # __index__ (Python code) that empties the list frees the keys read before it, so those
    # are hashed before it runs (under a sanitizer build, reading them after is a
    # use-after-free).  The batch is the keys the list had when each was read.
    class Clears:
        def __init__(self, ks):
            self.ks = ks

        def __index__(self):
            self.ks.clear()
            return 5

    def batch():
        ks = [f"fresh:{i}:" * 4 for i in range(20)]  # objects that only the list holds
        ks.append(Clears(ks))
        return ks

    same = [f"fresh:{i}:" * 4 for i in range(20)] + [5]
    f, single = make(), make()
    assert f.add_many(batch()) == [single.add(k) for k in same]
    assert f.to_bytes() == single.to_bytes()
    assert f.test_many(batch()) == [True] * 21
    g = make()
    g.update(batch())
    assert g.to_bytes() == single.to_bytes()
