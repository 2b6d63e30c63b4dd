"""Errors of one hierarchy and an API without silent defaults: corrupt files, k out of
range, None where a number is required, closed filters compared, save()'s error and
mode, sizes past the limits, the contrib extras."""
import os
import stat
import subprocess
import sys

import pytest

import ling_bloom as lb
from ling_bloom.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAVED = [lb.MemoryFilter, lb.CountingFilter, lb.ScalableFilter, lb.BlockedFilter]


def _new(cls):
    return cls(100, 0.01)


# ---- 1. a corrupt or garbage file is a BloomError (and still a ValueError) ----------------

def test_corrupt_file_error_is_in_the_hierarchy():
    assert issubclass(lb.CorruptFileError, lb.BloomError)
    assert issubclass(lb.CorruptFileError, ValueError)
    assert "CorruptFileError" in lb.__all__


@pytest.mark.parametrize("cls", SAVED)
@pytest.mark.parametrize("data", [b"", b"garbage", b"LBLM" + bytes(100), bytes(4096)])
def test_from_bytes_of_garbage(cls, data):
    with pytest.raises(lb.CorruptFileError, match="not a valid saved filter"):
        cls.from_bytes(data)
    with pytest.raises(lb.CorruptFileError):
        lb.from_bytes(data)


@pytest.mark.parametrize("cls", SAVED)
def test_a_damaged_byte_and_a_truncated_file(cls, tmp_path):
    f = _new(cls)
    f.update(["a", "b", "c"])
    data = bytearray(f.to_bytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(lb.CorruptFileError):
        cls.from_bytes(bytes(data))
    path = tmp_path / "cut.bloom"
    path.write_bytes(f.to_bytes()[:-3])
    with pytest.raises(lb.CorruptFileError):
        lb.load(str(path))
    with pytest.raises(lb.CorruptFileError):
        cls.load(str(path))


def test_garbage_file_and_one_too_long(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 1000)
    with pytest.raises(lb.BloomError):
        lb.load(str(junk))
    f = lb.MemoryFilter(100, 0.01)
    longer = tmp_path / "longer"
    longer.write_bytes(f.to_bytes() + b"tail")
    with pytest.raises(lb.CorruptFileError, match="goes on past"):
        lb.load(str(longer))


def test_a_file_of_another_type():
    data = lb.CountingFilter(100, 0.01).to_bytes()
    with pytest.raises(lb.CorruptFileError, match="holds a CountingFilter"):
        lb.MemoryFilter.from_bytes(data)


# ---- 2. k out of range is InvalidCapacityError, as a bad m is --------------------------------

@pytest.mark.parametrize("k", [0, lb.MAX_K + 1, 10**30, -1, 2.5])
def test_k_out_of_range(k):
    for make in (lambda: lb.MemoryFilter(m=100, k=k), lambda: lb.CountingFilter(m=100, k=k),
                 lambda: lb.MemoryFilter.from_bitmap(b"", 100, k),
                 lambda: lb.indices("key", 100, k)):
        with pytest.raises(lb.InvalidCapacityError, match="^k "):
            make()


def test_k_out_of_range_redis(clean_redis):
    with pytest.raises(lb.InvalidCapacityError, match="k must"):
        lb.RedisFilter("kk", m=100, k=0, url=clean_redis.url)


# ---- 3. None (or a non-number) where a number is required: TypeError -------------------------

@pytest.mark.parametrize("make", [
    lambda: lb.MemoryFilter(100, None),
    lambda: lb.MemoryFilter(None, 0.01),
    lambda: lb.MemoryFilter(None),
    lambda: lb.MemoryFilter(capacity=100, error_rate=None),
    lambda: lb.MemoryFilter(m=None, k=3),
    lambda: lb.MemoryFilter(m=100, k=None),
    lambda: lb.CountingFilter(100, None),
    lambda: lb.CountingFilter(None, 0.01),
    lambda: lb.ScalableFilter(None),
    lambda: lb.ScalableFilter(100, None),
    lambda: lb.ScalableFilter(100, 0.01, None),
    lambda: lb.MemoryFilter(100, "0.01"),
    lambda: lb.MemoryFilter("100", 0.01),
    lambda: lb.estimate(100, None),
    lambda: lb.estimate(None, 0.01),
    lambda: lb.geometry(100, None),
    lambda: lb.geometry(None, 0.01),
], ids=range(17))
def test_none_is_not_a_default(make):
    with pytest.raises(TypeError):
        make()


def test_the_defaults_still_apply_when_left_out():
    assert lb.MemoryFilter(1000).error_rate == 0.01
    assert lb.CountingFilter(1000).error_rate == 0.01


def test_redis_none_rate_beside_a_capacity(clean_redis, bf_server):
    with pytest.raises(TypeError, match="error_rate"):
        lb.RedisFilter("n1", 1000, None, url=clean_redis.url)
    with pytest.raises(TypeError, match="error_rate"):
        lb.RedisFilter.from_url(clean_redis.url, "n1", 1000, None)
    with pytest.raises(TypeError, match="error_rate"):
        lb.RedisBloomFilter("n2", 1000, None, url=bf_server.url)
    with pytest.raises(TypeError):
        lb.RedisFilter("n1", "1000", 0.01, url=clean_redis.url)
    with clean_redis.client() as c:
        assert c.command("EXISTS", "n1") == 0


@pytest.mark.parametrize("call", [
    lambda: lb.RedisFilter.from_url(None, "k", 1000, 0.01),
    lambda: lb.RedisFilter.from_url(None, "k"),
    lambda: lb.RedisFilter.open(None, "k"),
    lambda: lb.RedisFilter.from_url(b"redis://127.0.0.1:1", "k"),
    lambda: lb.RedisBloomFilter.from_url(None, "k", 1000, 0.01),
    lambda: lb.RedisBloomFilter.from_url(None, "k"),
    lambda: lb.RedisFilter.from_redis(None, "k", 1000, 0.01),
    lambda: lb.RedisBloomFilter.from_redis(None, "k", 1000, 0.01),
], ids=range(8))
def test_no_url_is_not_localhost(call):
    # A TypeError before any connection is tried (nothing listens on 6379 in the tests,
    # and a connection attempt would be a RedisConnectionError, not a TypeError).
    with pytest.raises(TypeError):
        call()


# ---- 3b. one wording for a wrong-typed number, whatever the type -----------------------------
# "<Type>: <argument> must be a number, not <type of the value>" (None: "not None"), a
# TypeError, before anything is sized or connected.

_NOWHERE = "redis://127.0.0.1:1/0"  # never reached: the arguments are checked first


def _open_in_tmp(**a):
    import tempfile
    d = tempfile.mkdtemp()
    return lb.MemoryFilter.open(os.path.join(d, "f.bloom"), "x", **a)


def _async(cls_name):
    def make(**a):
        from ling_bloom import aio
        return getattr(aio, cls_name)("k", url=_NOWHERE, **a)
    return make


# (shown name, constructor taking keyword arguments, arguments: {name: valid value}, the
# arguments where None means "not given" rather than a mistake)
_CONSTRUCTORS = [
    ("MemoryFilter", lambda **a: lb.MemoryFilter(**a), [dict(capacity=100, error_rate=0.01),
                                                        dict(m=1024, k=4)], ()),
    ("CountingFilter", lambda **a: lb.CountingFilter(**a), [dict(capacity=100, error_rate=0.01),
                                                            dict(m=1024, k=4)], ()),
    ("BlockedFilter", lambda **a: lb.BlockedFilter(**a), [dict(capacity=100, error_rate=0.01),
                                                          dict(m=1024, k=8)], ()),
    ("ScalableFilter", lambda **a: lb.ScalableFilter(**a),
     [dict(initial_capacity=100, error_rate=0.01, growth_ratio=2.0, fpr_ratio=0.9)], ()),
    ("MemoryFilter.open", _open_in_tmp, [dict(capacity=100, error_rate=0.01),
                                         dict(m=1024, k=4)], ("capacity", "m", "k")),
    ("RedisFilter", lambda **a: lb.RedisFilter("k", url=_NOWHERE, **a),
     [dict(capacity=100, error_rate=0.01), dict(m=1024, k=4)], ("capacity", "m", "k")),
    ("RedisBloomFilter", lambda **a: lb.RedisBloomFilter("k", url=_NOWHERE, **a),
     [dict(capacity=100, error_rate=0.01)], ("capacity",)),
    ("AsyncRedisFilter", _async("AsyncRedisFilter"),
     [dict(capacity=100, error_rate=0.01), dict(m=1024, k=4)], ("capacity", "m", "k")),
    ("AsyncRedisBloomFilter", _async("AsyncRedisBloomFilter"),
     [dict(capacity=100, error_rate=0.01)], ("capacity",)),
]

_BAD_NUMBERS = [None, "100", b"100", [1], object(), 1j, True]


def _wrong_typed_cases():
    for name, make, arg_sets, none_ok in _CONSTRUCTORS:
        for args in arg_sets:
            for arg in args:
                for bad in _BAD_NUMBERS:
                    if bad is None and arg in none_ok:
                        continue
                    yield pytest.param(name, make, {**args, arg: bad}, arg, bad,
                                       id=f"{name}-{arg}-{type(bad).__name__}")


@pytest.mark.parametrize("name, make, args, arg, bad", list(_wrong_typed_cases()))
def test_a_wrong_typed_number_names_the_argument_the_same_way(name, make, args, arg, bad):
    shown = "None" if bad is None else type(bad).__name__
    with pytest.raises(TypeError) as ei:
        make(**args)
    assert str(ei.value) == f"{name}: {arg} must be a number, not {shown}"


@pytest.mark.parametrize("call, text", [
    (lambda: lb.estimate(None, 0.01), "n must be a number, not None"),
    (lambda: lb.estimate("1e6", 0.01), "n must be a number, not str"),
    (lambda: lb.estimate(100, None), "p must be a number, not None"),
    (lambda: lb.estimate(100, "0.01"), "p must be a number, not str"),
    (lambda: lb.geometry(100, b"x"), "p must be a number, not bytes"),
    (lambda: lb.indices("key", "100", 3), "m must be a number, not str"),
])
def test_the_functions_name_a_wrong_typed_argument_the_same_way(call, text):
    with pytest.raises(TypeError) as ei:
        call()
    assert str(ei.value) == text


# ---- 4. comparing closed filters ---------------------------------------------------------------

@pytest.mark.parametrize("cls", SAVED)
def test_a_closed_filter_equals_itself_and_refuses_others(cls):
    f, g = _new(cls), _new(cls)
    f.close()
    assert f == f
    assert not (f != f)
    with pytest.raises(lb.ClosedError):
        f == g  # noqa: B015
    with pytest.raises(lb.ClosedError):
        g == f  # noqa: B015
    with pytest.raises(lb.ClosedError):
        g != f  # noqa: B015
    assert f in [f]


# ---- 5 and 8. save(): the error names the target, the mode follows the umask -----------------

def test_a_failed_save_names_the_target(tmp_path):
    f = lb.MemoryFilter(100, 0.01)
    target = tmp_path / "a_directory"
    target.mkdir()
    with pytest.raises(OSError) as ei:
        f.save(str(target))
    assert ei.value.filename == str(target)
    assert ".tmp" not in str(ei.value)
    assert os.listdir(tmp_path) == ["a_directory"]  # no temporary file left behind
    missing = tmp_path / "no_such_dir" / "f.bloom"
    with pytest.raises(FileNotFoundError) as ei:
        f.save(str(missing))
    assert ei.value.filename == str(missing)


@pytest.mark.parametrize("cls", SAVED)
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664),
                                        (0o000, 0o666)])
def test_save_follows_the_umask(cls, umask, mode, tmp_path):
    f = _new(cls)
    f.add("x")
    path = tmp_path / "f.bloom"
    old = os.umask(umask)
    try:
        f.save(str(path))
        with open(tmp_path / "plain", "wb"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "plain").st_mode) == mode  # as open() does
    assert lb.load(str(path)) == f
    assert sorted(os.listdir(tmp_path)) == ["f.bloom", "plain"]


# ---- 6. sizes past the limits -------------------------------------------------------------

def test_geometry_refuses_what_no_filter_can_have():
    with pytest.raises(lb.InvalidCapacityError, match="2\\*\\*48"):
        lb.geometry(10**17, 0.01)
    with pytest.raises(lb.InvalidFalsePositiveRateError, match="at most 64"):
        lb.geometry(1000, 1e-30)
    # estimate() stays ling-base's arithmetic and says what it would take
    assert lb.estimate(10**17, 0.01).m > lb.MAX_BITS
    assert lb.estimate(1000, 1e-30).k > lb.MAX_K


def test_cli_estimate_past_the_limit(capsys):
    assert main(["estimate", "10000000000000", "1e-9"]) == 2
    out, err = capsys.readouterr()
    assert "TiB" in out
    assert "exceeds" in err and "2**48" in err
    assert main(["estimate", "1000", "1e-30"]) == 2
    assert "k = 100" in capsys.readouterr().err
    assert main(["estimate", "1000000", "0.01"]) == 0
    assert capsys.readouterr().err == ""


# ---- 7. contrib without its framework names the extra ------------------------------------

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("No module named " + repr(name), name=name)
sys.meta_path.insert(0, Block())
try:
    import ling_bloom.contrib.{mod}
except ImportError as e:
    print(e)
else:
    print("imported")
"""


@pytest.mark.parametrize("mod,blocked,extra", [
    ("flask", {"flask", "click", "werkzeug"}, "flask"),
    ("django", {"django"}, "django"),
    ("asgi", {"starlette"}, "asgi"),
])
def test_contrib_without_its_framework(mod, blocked, extra):
    p = subprocess.run([sys.executable, "-c", BLOCK.format(blocked=blocked, mod=mod)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"pip install 'ling_bloom[{extra}]'" in p.stdout, p.stdout


# ---- 9. what users of the peers expect: len() ---------------------------------------------

@pytest.mark.parametrize("cls", SAVED)
def test_len_is_the_estimated_count(cls):
    f = cls(10_000, 0.01)
    assert len(f) == 0
    assert f  # a filter is true even when empty: `if f:` does not mean "has keys"
    f.update(str(i) for i in range(1000))
    assert len(f) == f.approximate_count()
    assert 950 <= len(f) <= 1050
    f.close()
    assert f
    with pytest.raises(lb.ClosedError):
        len(f)


FIXED = [lb.MemoryFilter, lb.CountingFilter, lb.BlockedFilter]


@pytest.mark.parametrize("cls", FIXED)
def test_getsizeof_counts_the_storage_of_every_fixed_type(cls):
    small, big = cls(m=512 * 8, k=8), cls(m=512 * 8 * 64, k=8)
    assert sys.getsizeof(big) - sys.getsizeof(small) == big.nbytes - small.nbytes


@pytest.mark.parametrize("cls", FIXED)
def test_a_subclass_of_a_fixed_type_keeps_its_class_through_bytes_copy_and_union(cls):
    sub = type("Sub" + cls.__name__, (cls,), {})
    f = sub(m=512 * 8, k=8)
    f.add("a")
    for g in (sub.from_bytes(f.to_bytes()), f.copy(), f & f, f.intersection(f)):
        assert type(g) is sub and "a" in g and g == f
    for g in (f | f, f.union(f)):  # a counting filter's union sums: not equal to f
        assert type(g) is sub and "a" in g
    assert cls.from_bytes(f.to_bytes()) == f
    other = lb.CountingFilter if cls is not lb.CountingFilter else lb.MemoryFilter
    with pytest.raises(TypeError):
        f.union(other(m=512 * 8, k=8))


def test_len_of_the_redis_types(clean_redis, bf_server):
    with lb.RedisFilter("lenr", 10_000, 0.01, url=clean_redis.url) as f:
        assert len(f) == 0 and f
        f.update(str(i) for i in range(1000))
        assert len(f) == f.approximate_count()
        assert 950 <= len(f) <= 1050
    with lb.RedisBloomFilter("lenb", 10_000, 0.01, url=bf_server.url) as b:
        assert len(b) == 0 and b
        b.update(str(i) for i in range(1000))
        assert len(b) == b.card() == 1000
    with pytest.raises(lb.ClosedError):
        len(b)


# ---- 9. union and intersection where they are sound ---------------------------------------

def test_counting_union_is_the_saturating_sum():
    a, b = lb.CountingFilter(1000, 0.01), lb.CountingFilter(1000, 0.01)
    a.update(["x", "y"])
    b.update(["y", "z"])
    u = a.union(b)
    assert u == a | b and u is not a
    assert [u.count(k) for k in "xyz"] == [1, 2, 1]
    # remove() stays sound: it is the filter that had every add of both
    u.remove("y")
    assert all(k in u for k in "xyz")
    u.remove("y")
    assert "y" not in u and "x" in u and "z" in u
    # saturation: counters stop at 15
    for _ in range(10):
        a.add("s")
        b.add("s")
    assert (a | b).count("s") == 15
    assert a.count("s") == 10  # the operands are unchanged
    c = a.copy()
    c |= b
    assert c == a | b


def test_counting_intersection_is_the_minimum():
    a, b = lb.CountingFilter(1000, 0.01), lb.CountingFilter(1000, 0.01)
    a.update(["x", "y", "y"])
    b.update(["y", "z"])
    i = a.intersection(b)
    assert i == a & b
    assert "y" in i and i.count("y") == 1
    assert "x" not in i and "z" not in i
    a_before = a.copy()
    a &= b
    assert a == i != a_before
    i.remove("y")
    assert "y" not in i and len(i) == 0


def test_counting_union_refuses_unlike_filters():
    a = lb.CountingFilter(1000, 0.01)
    with pytest.raises(lb.GeometryMismatchError):
        a.union(lb.CountingFilter(2000, 0.01))
    with pytest.raises(lb.GeometryMismatchError):
        a & lb.CountingFilter(m=a.m, k=a.k, hash="ling-base")  # noqa: B018
    with pytest.raises(TypeError):
        a.union(lb.MemoryFilter(1000, 0.01))
    with pytest.raises(TypeError):
        a | lb.MemoryFilter(1000, 0.01)  # noqa: B018
    b = lb.CountingFilter(1000, 0.01)
    b.close()
    with pytest.raises(lb.ClosedError):
        a | b  # noqa: B018


def test_scalable_refuses_union_and_intersection():
    a, b = lb.ScalableFilter(100), lb.ScalableFilter(100)
    with pytest.raises(lb.NotSupportedError, match="stages"):
        a.union(b)
    with pytest.raises(lb.NotSupportedError, match="stages"):
        a.intersection(b)


def test_scalable_operators_raise_what_union_and_intersection_raise():
    a, b = lb.ScalableFilter(100), lb.ScalableFilter(100)
    with pytest.raises(lb.NotSupportedError) as by_method:
        a.union(b)
    for op in (lambda: a | b, lambda: a & b, lambda: b | a, lambda: b & a):
        with pytest.raises(lb.NotSupportedError) as by_operator:
            op()
        assert str(by_operator.value) == str(by_method.value)
    c = a
    with pytest.raises(lb.NotSupportedError):
        c |= b
    with pytest.raises(lb.NotSupportedError):
        c &= b

    class Sub(lb.ScalableFilter):
        pass

    with pytest.raises(lb.NotSupportedError):
        Sub(100) | a  # noqa: B018
    # Anything else is not an operand at all: the usual TypeError, not a refusal.
    for other in (3, "x", None, lb.MemoryFilter(100, 0.01)):
        with pytest.raises(TypeError):
            a | other  # noqa: B018
        with pytest.raises(TypeError):
            other & a  # noqa: B018


# ---- 9. save and load on file objects -----------------------------------------------------

@pytest.mark.parametrize("cls", SAVED)
def test_save_and_load_on_file_objects(cls, tmp_path):
    import io

    f, g = _new(cls), _new(cls)
    f.update(["a", "b"])
    g.add("c")
    buf = io.BytesIO()
    f.save(buf)
    g.save(buf)  # one after the other in one stream
    assert buf.getvalue() == f.to_bytes() + g.to_bytes()
    buf.seek(0)
    assert cls.load(buf) == f
    assert lb.load(buf) == g  # read exactly one filter each: the position is after f
    assert buf.read() == b""
    path = tmp_path / "f.bloom"
    with open(path, "wb") as out:
        f.save(out)
    with open(path, "rb") as inp:
        assert lb.load(inp) == f
    with pytest.raises(lb.CorruptFileError):
        lb.load(io.BytesIO(b"x" * 100))
    with pytest.raises(lb.CorruptFileError):
        lb.load(io.BytesIO(f.to_bytes()[:-1]))
    with pytest.raises(TypeError):
        lb.load(io.StringIO("text"))


def test_open_of_a_missing_redis_filter_is_a_bloom_error(clean_redis):
    with pytest.raises(lb.FilterNotFoundError, match="no ling_bloom filter") as ei:
        lb.RedisFilter.open(clean_redis.url, "nothing-here")
    assert isinstance(ei.value, KeyError) and ei.value.key == "nothing-here"


def test_remaining_ttl(clean_redis, bf_server):
    with lb.RedisFilter("ttl1", 1000, 0.01, ttl=100, url=clean_redis.url) as f:
        assert f.remaining_ttl() is None  # nothing written yet: no key
        f.add("a")
        assert 90 < f.remaining_ttl() <= 100
    with lb.RedisFilter("ttl2", 1000, 0.01, url=clean_redis.url) as g:
        g.add("a")
        assert g.remaining_ttl() is None  # no expiry
    with lb.RedisBloomFilter("ttl3", 1000, 0.01, ttl=50, url=bf_server.url) as b:
        b.add("a")
        assert 40 < b.remaining_ttl() <= 50
    with pytest.raises(lb.ClosedError):
        b.remaining_ttl()
