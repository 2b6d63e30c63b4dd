"""Batches of columns: numpy integer arrays and Arrow arrays (pyarrow, pandas, polars) read in
place by add_many, update and test_many.  A column and the same keys as Python objects set
the same bits and answer the same; nulls, empty keys and wrong types raise before anything
changes; add_many and test_many of a column answer a boolean array."""
from __future__ import annotations

import array
import gc
import subprocess
import sys
import threading

import pytest

import ling_bloom as lb

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
TYPES = [lb.MemoryFilter, lb.BlockedFilter, lb.CountingFilter, lb.ScalableFilter]


def new(cls):
    return cls(20_000, 0.01)


def state(f):
    """What a filter holds, bit for bit."""
    return f.to_bytes()


def same_as_objects(cls, column, objects, probe_column, probe_objects, **kw):
    """update() from the column and from the objects give the same filter; test_many and
    add_many answer the same."""
    a, b = new(cls), new(cls)
    assert a.update(column, **kw) is None
    b.update(objects)
    assert state(a) == state(b)
    got = a.test_many(probe_column, **kw)
    assert isinstance(got, np.ndarray) and got.dtype == np.bool_
    assert got.tolist() == b.test_many(probe_objects)
    c, d = new(cls), new(cls)
    assert c.add_many(column, **kw).tolist() == d.add_many(objects)
    assert state(c) == state(d)


def int_values(dtype):
    info = np.iinfo(dtype)
    mid = list(range(-300, 300)) if info.min < 0 else list(range(0, 600))
    vals = [v for v in mid if info.min <= v <= info.max]
    return vals + [int(info.min), int(info.max), int(info.max) - 1, int(info.min) + 1]


# ---- numpy integer arrays -----------------------------------------------------------------

@pytest.mark.parametrize("cls", TYPES)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_numpy_integers_are_the_keys_of_their_ints(cls, dtype):
    vals = int_values(dtype)
    col = np.array(vals, dtype=dtype)
    probe = vals + [v for v in range(1000, 1100) if v <= np.iinfo(dtype).max]
    same_as_objects(cls, col, vals, np.array(probe, dtype=dtype), probe)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_numpy_integers_key_as_the_text_of_their_int(dtype):
    vals = int_values(dtype)
    f = lb.MemoryFilter(20_000, 0.01)
    f.update(np.array(vals, dtype=dtype))
    assert f.test_many([str(v) for v in vals]) == [True] * len(vals)
    assert all(f.test(np.dtype(dtype).type(v)) for v in vals)  # numpy's scalars agree


@pytest.mark.parametrize("dtype", ["int16", "uint32", "int64", "uint64"])
def test_byte_order_other_than_the_machines_is_read_as_its_values(dtype):
    vals = int_values(dtype)
    swapped = np.array(vals, dtype=np.dtype(dtype).newbyteorder())
    assert swapped.tolist() == vals
    same_as_objects(lb.MemoryFilter, swapped, vals, swapped[::-1], vals[::-1])


@pytest.mark.parametrize("cls", TYPES)
def test_strided_sliced_and_reversed_arrays(cls):
    base = np.arange(-5000, 5000, dtype=np.int64)
    for col in (base[::3], base[100:2000], base[::-1], base[::-7][5:], base.reshape(100, 100)[:, 3]):
        vals = col.tolist()
        same_as_objects(cls, col, vals, base[::11], base[::11].tolist())


def test_long_columns_cross_chunks_and_nothing_is_missed():
    col = np.arange(100_000, dtype=np.uint32) * 7
    f = lb.BlockedFilter(200_000, 0.001)
    f.update(col)
    assert bool(f.test_many(col).all())
    g = lb.BlockedFilter(200_000, 0.001)
    g.update(col.tolist())
    assert state(f) == state(g)


def test_empty_columns():
    for col in (np.array([], dtype=np.int64), pa.array([], type=pa.string()),
                pa.chunked_array([], type=pa.large_string())):
        for cls in TYPES:
            f = new(cls)
            before = state(f)
            assert f.update(col) is None
            got = f.test_many(col)
            assert len(got) == 0 and got.dtype == np.bool_
            assert len(f.add_many(col)) == 0
            assert state(f) == before


def test_float_bool_and_complex_arrays_are_a_type_error_and_change_nothing():
    f = lb.MemoryFilter(1000, 0.01)
    for col in (np.array([1.0, 2.0]), np.array([True]), np.array([1j]),
                np.array([1.0], dtype=np.float16)):
        for call in (f.update, f.test_many, f.add_many):
            with pytest.raises(TypeError, match="ints, strings or bytes"):
                call(col)
    assert f.bits_set == 0


def test_arrays_of_more_or_fewer_dimensions_are_a_type_error():
    f = lb.MemoryFilter(1000, 0.01)
    with pytest.raises(TypeError, match="one dimension"):
        f.update(np.arange(6).reshape(2, 3))
    with pytest.raises(TypeError):
        f.update(np.array(5))
    assert f.bits_set == 0


def test_other_buffers_of_integers_are_columns_and_bytes_stay_refused():
    f, g = lb.MemoryFilter(1000, 0.01), lb.MemoryFilter(1000, 0.01)
    f.update(array.array("q", [1, -2, 3]))
    f.update(array.array("B", b"abc"))  # an array of bytes' numbers: the ints 97, 98, 99
    g.update([1, -2, 3, 97, 98, 99])
    assert state(f) == state(g)
    # a memoryview, like bytes, is one key, not a batch of its bytes' numbers
    for single in (b"abc", bytearray(b"abc"), "abc", memoryview(b"abc")):
        with pytest.raises(TypeError, match="single str or bytes"):
            f.update(single)


def test_numpy_bytes_and_text_arrays_are_iterated_as_before():
    f = lb.MemoryFilter(1000, 0.01)
    f.update(np.array([b"ab", b"cd"]))
    f.update(np.array(["ef", "gh"]))
    assert f.test_many([b"ab", "cd", "ef", b"gh", "zz"]) == [True] * 4 + [False]


# ---- Arrow ---------------------------------------------------------------------------------

STRING_TYPES = [pa.string(), pa.large_string(), pa.string_view(),
                pa.binary(), pa.large_binary(), pa.binary_view()]
ARROW_INTS = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(),
              pa.int64(), pa.uint64()]


def words(n, start=0):
    # short (inline in a view) and long (past 12 bytes: in a data buffer) keys, non-ASCII too
    return [f"k{i}" if i % 3 else f"a longer key number {i} é" for i in range(start, start + n)]


@pytest.mark.parametrize("cls", TYPES)
@pytest.mark.parametrize("typ", STRING_TYPES, ids=str)
def test_arrow_strings_and_binary_are_their_bytes(cls, typ):
    vals = words(500)
    objs = [v.encode() for v in vals]
    col = pa.array(objs if pa.types.is_binary(typ) or "binary" in str(typ) else vals, type=typ)
    probe = words(200, 400)
    pcol = pa.array([p.encode() for p in probe] if "binary" in str(typ) else probe, type=typ)
    same_as_objects(cls, col, objs, pcol, probe)


@pytest.mark.parametrize("cls", TYPES)
@pytest.mark.parametrize("typ", ARROW_INTS, ids=str)
def test_arrow_integers_are_the_keys_of_their_ints(cls, typ):
    vals = int_values(typ.to_pandas_dtype())
    col = pa.array(vals, type=typ)
    same_as_objects(cls, col, vals, col[::-1], vals[::-1])


@pytest.mark.parametrize("typ", STRING_TYPES + [pa.int64()], ids=str)
def test_arrow_slices_and_chunked_arrays(typ):
    vals = words(3000) if typ != pa.int64() else list(range(3000))
    if "binary" in str(typ):
        vals = [v.encode() for v in vals]
    col = pa.array(vals, type=typ)
    sliced = col.slice(1234, 1500)  # an offset into its buffers
    chunked = pa.chunked_array([col.slice(0, 10), col.slice(10, 0), col.slice(10, 2990)])
    same_as_objects(lb.MemoryFilter, sliced, vals[1234:2734], col, vals)
    same_as_objects(lb.BlockedFilter, chunked, vals, sliced, vals[1234:2734])


def test_a_null_raises_naming_its_position_and_changes_nothing():
    chunked = pa.chunked_array([["a", "b"], ["c", None, "d"]])
    for cls in TYPES:
        f = new(cls)
        before = state(f)
        for col, pos in ((pa.array(["a", "b", None]), 2), (chunked, 3),
                         (pa.array([1, None, 3]), 1), (pa.array([None, None]), 0)):
            for call in (f.update, f.add_many, f.test_many):
                with pytest.raises(ValueError, match=f"null at position {pos}"):
                    call(col)
        assert state(f) == before


@pytest.mark.parametrize("typ", STRING_TYPES + [pa.int32()], ids=str)
def test_skip_nulls_skips_them_and_answers_false(typ):
    if pa.types.is_integer(typ):
        vals = [1, None, 3, None, 5]
    elif "binary" in str(typ):
        vals = [b"a", None, b"a long key of many bytes", None, b"e"]
    else:
        vals = ["a", None, "a long key of many bytes", None, "e"]
    col = pa.chunked_array([pa.array(vals, type=typ), pa.array([None], type=typ)])
    present = [v for v in vals if v is not None]
    f, g = lb.MemoryFilter(1000, 0.01), lb.MemoryFilter(1000, 0.01)
    assert f.add_many(col, skip_nulls=True).tolist() == [True, False, True, False, True, False]
    g.update(present)
    assert state(f) == state(g)
    assert f.test_many(col, skip_nulls=True).tolist() == [True, False, True, False, True, False]
    assert f.test_many(pa.array([None] * 5000, type=typ), skip_nulls=True).sum() == 0
    f.update(pa.nulls(3), skip_nulls=True)
    assert state(f) == state(g)


@pytest.mark.parametrize("typ", [pa.string(), pa.large_binary(), pa.string_view(), pa.int64()],
                         ids=str)
def test_dictionary_encoded_columns_are_their_values(typ):
    if pa.types.is_integer(typ):
        vals = [7, -3, 7, 10**15, -3, 0]
    elif "binary" in str(typ):
        vals = [b"a", b"a longer key than a view", b"a", b"c", b"c", b"d"]
    else:
        vals = ["a", "a longer key than a view", "a", "c", "c", "d"]
    col = pa.array(vals, type=typ).dictionary_encode()
    chunked = pa.chunked_array([col.slice(0, 2), col.slice(2)])
    same_as_objects(lb.MemoryFilter, col, vals, chunked, vals)
    same_as_objects(lb.BlockedFilter, col.slice(3), vals[3:], col, vals)


def test_dictionary_nulls_in_the_indices_or_the_values():
    values = pa.array(["a", None, "c", ""])
    col = pa.DictionaryArray.from_arrays(pa.array([0, 2, None, 1, 0], type=pa.int8()), values)
    f = lb.MemoryFilter(1000, 0.01)
    with pytest.raises(ValueError, match="null at position 2"):
        f.update(col)
    assert f.add_many(col, skip_nulls=True).tolist() == [True, True, False, False, False]
    assert f.test_many(["a", "c"]) == [True, True]
    # an empty value only matters where an index picks it
    with pytest.raises(lb.EmptyKeyError, match="position 1"):
        f.update(pa.DictionaryArray.from_arrays(pa.array([0, 3]), values))
    bad = pa.DictionaryArray.from_arrays(pa.array([0, 9]), values, safe=False)
    with pytest.raises(ValueError, match="malformed Arrow array"):
        f.update(bad)


def test_categorical_pandas_and_polars_columns():
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    f = lb.MemoryFilter(1000, 0.01)
    f.update(pd.Series(["a", "b", "a"], dtype="category"))
    assert f.test_many(pl.Series(["a", "z", "b"], dtype=pl.Categorical)).tolist() == [
        True, False, True]
    assert f.test_many(pl.Series(["b", "a"], dtype=pl.Enum(["a", "b"]))).tolist() == [True, True]


def test_an_empty_string_raises_naming_its_position_and_changes_nothing():
    f = lb.MemoryFilter(1000, 0.01)
    for typ in STRING_TYPES:
        col = pa.array(["a", "b", ""], type=typ)
        with pytest.raises(lb.EmptyKeyError, match="position 2"):
            f.update(col)
    assert f.bits_set == 0


def test_other_arrow_types_are_a_type_error():
    f = lb.MemoryFilter(1000, 0.01)
    for col in (pa.array([1.5]), pa.array([True]), pa.array([1.5]).dictionary_encode(),
                pa.array([[1]]), pa.array([{"x": 1}]), pa.array([1], type=pa.timestamp("s")),
                pa.table({"id": [1]})):
        with pytest.raises(TypeError, match="ints, strings or bytes"):
            f.update(col)
    assert f.bits_set == 0


def test_unknown_keyword_and_extra_arguments_are_a_type_error():
    f = lb.MemoryFilter(1000, 0.01)
    with pytest.raises(TypeError, match="unexpected keyword"):
        f.update([1], skip=True)
    with pytest.raises(TypeError, match="1 positional argument"):
        f.update([1], [2])
    with pytest.raises(TypeError, match="1 positional argument"):
        f.test_many()


class OneShotArrow:
    """Exports an Arrow array it makes on the spot and keeps no reference to: the filter
    must hold what it was given (the array's release) until its batch is done."""

    def __init__(self, values, stream=False):
        self.values = values
        if stream:
            self.__class__ = OneShotStream

    def __arrow_c_array__(self, requested_schema=None):
        return pa.array(self.values).__arrow_c_array__()


class OneShotStream:
    def __arrow_c_stream__(self, requested_schema=None):
        return pa.chunked_array([self.values[:7], self.values[7:]]).__arrow_c_stream__()


def test_the_exported_memory_is_held_while_the_batch_runs():
    vals = words(20_000)
    g = lb.MemoryFilter(50_000, 0.01)
    g.update(vals)
    for stream in (False, True):
        f = lb.MemoryFilter(50_000, 0.01)
        f.update(OneShotArrow(vals, stream))
        gc.collect()
        assert state(f) == state(g)
        assert bool(f.test_many(OneShotArrow(vals, stream)).all())


def test_a_column_whose_exporter_is_gone_is_read_on_another_thread():
    """The Arrow array the exporter made is dropped by Python at once (only its C struct,
    moved into the batch, keeps its buffers): a batch on another thread, with the
    collector running meanwhile, reads every key and releases it once."""
    vals = words(300_000)
    f = lb.BlockedFilter(300_000, 0.01)
    out = {}
    t = threading.Thread(target=lambda: out.update(answers=f.add_many(OneShotArrow(vals))))
    t.start()
    while t.is_alive():
        gc.collect()
    t.join()
    assert len(out["answers"]) == 300_000
    assert bool(f.test_many(vals[::-1]) == [True] * 300_000)
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    assert bool(f.test_many(OneShotArrow(vals, stream=True)).all())
    # the exported arrays (10.8 MB) were released
    assert pool.bytes_allocated() < before + 1_000_000


# ---- the answers ---------------------------------------------------------------------------

def test_answers_are_a_numpy_array_even_where_numpy_was_not_imported_yet():
    code = """
import sys, pyarrow as pa
sys.modules.pop("numpy", None)
import ling_bloom as lb
f = lb.MemoryFilter(100, 0.01)
r = f.test_many(pa.array(["a"]))
print(type(r).__module__, type(r).__name__)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["numpy", "ndarray"], r.stderr


def test_answers_are_a_numpy_mask_over_the_filters_memory():
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["b", "d"])
    ans = f.test_many(pa.array(["a", "b", "c", "d"]))
    assert ans.tolist() == [False, True, False, True]
    assert isinstance(ans.base, lb.BoolArray) or isinstance(getattr(ans.base, "obj", None), lb.BoolArray)
    assert (~ans).tolist() == [True, False, True, False]


def test_lists_still_answer_lists():
    f = lb.MemoryFilter(1000, 0.01)
    assert f.add_many(["a", 1]) == [True, True]
    assert f.test_many(("a", 1, "z")) == [True, True, False]
    assert f.test_many(k for k in ["a"]) == [True]


def test_boolarray_without_numpy():
    """Where numpy cannot be imported, the answers are a BoolArray: a '?' buffer, a sequence
    of bools, negated by ~."""
    code = """
import array, sys
sys.modules["numpy"] = None  # import numpy: ImportError
import ling_bloom as lb
f = lb.MemoryFilter(1000, 0.01)
f.update(array.array("q", [2, 4]))
a = f.test_many(array.array("i", [1, 2, 3, 4]))
assert type(a) is lb.BoolArray, type(a)
assert len(a) == 4 and list(a) == [False, True, False, True] and a[1] is True
assert a.tolist() == [False, True, False, True] and a.count() == 2
assert list(~a) == [True, False, True, False]
m = memoryview(a)
assert m.format == "?" and m.shape == (4,) and m.tolist() == [False, True, False, True]
assert type(f.add_many(array.array("b", [9]))) is lb.BoolArray
try:
    a[4]
except IndexError:
    pass
else:
    raise AssertionError("no IndexError")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---- pandas and polars ---------------------------------------------------------------------

def test_pandas_series_and_the_mask_idiom():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"id": [f"user:{i}" for i in range(1000)], "n": range(1000)})
    f = lb.MemoryFilter(10_000, 0.001)
    f.update(df["id"][:500])
    fresh = df[~f.test_many(df["id"])]
    assert fresh["n"].tolist()[:5] == [500, 501, 502, 503, 504]
    assert len(fresh) >= 495  # false positives only remove rows
    ints = pd.Series([1, 2, 3], dtype="int64")
    nullable = pd.Series([1, None, 3], dtype="Int64")
    if not hasattr(pd.Series, "__arrow_c_stream__"):
        # before pandas 3 a Series exports no Arrow: its numpy array has floats for nulls
        with pytest.raises(TypeError, match="format 'd'"):
            lb.MemoryFilter(1000, 0.01).update(nullable)
        nullable = pa.array(nullable)
    g = lb.MemoryFilter(1000, 0.01)
    g.update(ints)
    assert g.test_many(nullable, skip_nulls=True).tolist() == [True, False, True]
    with pytest.raises(ValueError, match="position 1"):
        g.update(nullable)


class ArrayLike:
    """An array-like that exports neither Arrow nor a buffer, only numpy's __array__ (as a
    pandas Series before pandas 3)."""

    def __init__(self, values, dtype=None):
        self.values = np.array(values, dtype=dtype)

    def __array__(self, dtype=None, copy=None):
        return self.values

    def __iter__(self):
        return iter(self.values.tolist())

    def __len__(self):
        return len(self.values)


@pytest.mark.parametrize("cls", TYPES)
def test_array_likes_are_read_through_their_numpy_array(cls):
    ints = list(range(-500, 500, 7))
    strs = [f"user:{i}" for i in range(300)]
    same_as_objects(cls, ArrayLike(ints, np.int16), ints, ArrayLike(ints[::-1], np.int64),
                    ints[::-1])
    same_as_objects(cls, ArrayLike(strs, object), strs, ArrayLike(strs[::-1], object),
                    strs[::-1])
    f = new(cls)
    with pytest.raises(TypeError, match="ints, strings or bytes"):
        f.update(ArrayLike([1.5, 2.5]))
    with pytest.raises(TypeError, match="NoneType"):
        f.update(ArrayLike(["a", None], object))
    assert len(f.test_many(ArrayLike([], object))) == 0


def test_a_series_arrow_cannot_hold_is_iterated_as_before():
    pd = pytest.importorskip("pandas")
    f, g = lb.MemoryFilter(1000, 0.01), lb.MemoryFilter(1000, 0.01)
    mixed = pd.Series(["a", 1, b"c"], dtype=object)  # no Arrow type holds these
    assert f.add_many(mixed).tolist() == [True, True, True]
    g.update(["a", 1, b"c"])
    assert state(f) == state(g)


def test_polars_series():
    pl = pytest.importorskip("polars")
    s = pl.Series("id", [f"user:{i}" for i in range(1000)])
    f, g = lb.MemoryFilter(10_000, 0.001), lb.MemoryFilter(10_000, 0.001)
    f.update(s)
    g.update(s.to_list())
    assert state(f) == state(g)
    assert bool(f.test_many(s).all())
    f.update(pl.Series([5, 6, None], dtype=pl.Int16), skip_nulls=True)
    assert f.test_many([5, 6, "5"]) == [True, True, True]
    df = pl.DataFrame({"id": s})
    assert df.filter(~f.test_many(df["id"])).height == 0


# ---- Arrow arrays that do not hold together --------------------------------------------------

def test_arrow_offsets_that_go_down_are_refused():
    f = lb.MemoryFilter(1000, 0.01)
    data = pa.py_buffer(b"abcdef")
    for offsets in ([0, 3, 1], [2, 1, 5]):  # pyarrow's own check refuses a negative one
        bad = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(
            np.array(offsets, dtype=np.int32).tobytes()), data])
        with pytest.raises(ValueError, match="malformed Arrow array"):
            f.update(bad)
    assert f.bits_set == 0


def test_arrow_views_that_point_outside_their_buffers_are_refused():
    f = lb.MemoryFilter(1000, 0.01)
    data = pa.py_buffer(b"x" * 40)

    def view(length, buf, offset):
        return np.array([length, 0, buf, offset], dtype=np.int32).tobytes()

    for v in (view(20, 1, 0),      # no buffer 1
              view(20, 0, 30),     # past the end of buffer 0 (40 bytes)
              view(20, -1, 0),
              view(-3, 0, 0)):
        bad = pa.Array.from_buffers(pa.string_view(), 1, [None, pa.py_buffer(v), data])
        with pytest.raises(ValueError, match="malformed Arrow array"):
            f.update(bad)
    good = pa.Array.from_buffers(pa.string_view(), 1, [None, pa.py_buffer(view(20, 0, 20)), data])
    f.update(good)
    assert f.test("x" * 20)


def test_a_batch_on_a_column_uses_memory_of_a_chunk_not_of_the_column():
    """No Python object per key, no array per key: what update() of a million-key column
    allocates (traced: PyMem_Raw* and objects; 134 kB here, where a list of the same keys
    takes 16 MB of hash pairs) stays far below a byte per key."""
    import tracemalloc

    ints = np.arange(1_000_000, dtype=np.int64)
    strs = pa.chunked_array([pa.array([f"user:{i}" for i in range(500_000)])] * 2)
    for cls in TYPES:
        f = cls(2_000_000, 0.01)
        for col in (ints, strs):
            tracemalloc.start()
            try:
                f.update(col)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 300_000, (cls.__name__, type(col).__name__, peak)


@pytest.mark.parametrize("cls", [lb.MemoryFilter, lb.BlockedFilter, lb.CountingFilter])
def test_column_batches_on_many_threads_set_what_one_thread_sets(cls):
    parts = [np.arange(i * 50_000, (i + 1) * 50_000, dtype=np.int64) for i in range(4)]
    strs = [pa.array([f"k{i}:{j}" for j in range(20_000)]) for i in range(4)]
    shared, alone = cls(400_000, 0.01), cls(400_000, 0.01)
    answers = {}

    def work(i):
        shared.update(parts[i])
        shared.update(strs[i])
        answers[i] = shared.test_many(parts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        alone.update(parts[i].tolist())
        alone.update(strs[i].to_pylist())
        assert bool(answers[i].all())
    assert state(shared) == state(alone)
