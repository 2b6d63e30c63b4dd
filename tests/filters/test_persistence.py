"""to_bytes / from_bytes / pickle / save / load, and rejection of damaged or hostile input."""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ling_bloom as lb
from ling_bloom import CountingFilter, MemoryFilter, ScalableFilter

try:  # the hostile-header tests recompute the format's XXH3-64 checksum (pip install xxhash)
    import xxhash
except ImportError:  # pragma: no cover
    xxhash = None


def keys(n: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


def seal(body: bytes) -> bytes:
    """Append the format's trailer: XXH3-64 (seed 0) of everything before it, little endian."""
    if xxhash is None:
        pytest.skip("needs the xxhash package to forge a valid checksum")
    return bytes(body) + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body)))


def reseal(data: bytes, edit) -> bytes:
    body = bytearray(data[:-8])
    edit(body)
    return seal(body)


def make(kind: str, scheme: str = "xxh3-mix", n: int = 50):
    if kind == "blocked":  # one hashing scheme of its own
        f = lb.BlockedFilter(200, 0.01)
    elif kind == "memory":
        f = MemoryFilter(200, 0.01, hash=scheme)
    elif kind == "counting":
        f = CountingFilter(200, 0.01, hash=scheme)
    else:
        f = ScalableFilter(10, 0.05, hash=scheme)
    f.update(keys(n))
    if kind == "counting":
        f.update(keys(10))
    return f


KINDS = {"blocked": lb.BlockedFilter, "memory": MemoryFilter, "counting": CountingFilter,
         "scalable": ScalableFilter}
KIND_BYTE = {"memory": 1, "counting": 2, "scalable": 3, "blocked": 4}
# (kind, hashing scheme): every scheme of the standard filters; BlockedFilter has its own
SCHEMES = [("blocked", "xxh3-block")] + [(kind, scheme) for kind in KINDS if kind != "blocked"
                                         for scheme in ("xxh3-mix", "xxh3", "ling-base")]


def same(a, b) -> None:
    assert type(a) is type(b)
    assert a == b
    assert a.to_bytes() == b.to_bytes()
    assert a.hash == b.hash and a.error_rate == b.error_rate
    if isinstance(a, ScalableFilter):
        assert a.stages() == b.stages()
        assert (a.initial_capacity, a.growth_ratio, a.fpr_ratio, a.num_sub_filters) == (
            b.initial_capacity, b.growth_ratio, b.fpr_ratio, b.num_sub_filters)
        assert a.approximate_count() == b.approximate_count()
    else:
        assert (a.m, a.k, a.capacity) == (b.m, b.k, b.capacity)


# ---- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("kind,scheme", SCHEMES)
def test_bytes_round_trip(kind, scheme):
    f = make(kind, scheme)
    data = f.to_bytes()
    assert isinstance(data, bytes) and data[:4] == b"LBLM"
    for blob in (data, bytearray(data), memoryview(data)):
        g = KINDS[kind].from_bytes(blob)
        same(f, g)
        h = lb.from_bytes(blob)
        same(f, h)
    assert all(g.test_many(keys(50)))
    # the copy goes on working like the original
    assert g.add("new") == f.add("new")
    assert g == f


def test_round_trip_keeps_geometry_only_filters():
    f = MemoryFilter(m=77, k=5, hash="ling-base")
    f.add("x")
    g = MemoryFilter.from_bytes(f.to_bytes())
    assert (g.m, g.k, g.hash, g.capacity, g.error_rate) == (77, 5, "ling-base", None, None)
    c = CountingFilter(m=9, k=2)
    assert CountingFilter.from_bytes(c.to_bytes()).capacity is None


def test_scalable_round_trip_keeps_growing_the_same_way():
    f = ScalableFilter(5, 0.01, 1.5, 0.8)
    f.update(keys(200))
    g = ScalableFilter.from_bytes(f.to_bytes())
    assert f.add_many(keys(300, "more")) == g.add_many(keys(300, "more"))
    assert f == g and f.stages() == g.stages()


@pytest.mark.parametrize("kind", list(KINDS))
def test_pickle_every_protocol(kind):
    f = make(kind)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        g = pickle.loads(pickle.dumps(f, protocol=proto))
        same(f, g)


@pytest.mark.parametrize("kind", list(KINDS))
def test_save_and_load(kind, tmp_path):
    f = make(kind)
    path = tmp_path / f"{kind}.lbf"
    assert f.save(path) is None  # a PathLike
    same(f, KINDS[kind].load(path))
    same(f, lb.load(str(path)))  # a str, dispatched on the kind byte
    assert path.read_bytes() == f.to_bytes()
    assert sorted(os.listdir(tmp_path)) == [f"{kind}.lbf"]


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "f.lbf"
    a = MemoryFilter(100)
    a.add("one")
    a.save(path)
    b = MemoryFilter(1000)
    b.add("two")
    b.save(str(path))
    assert lb.load(path) == b
    assert os.listdir(tmp_path) == ["f.lbf"]


@pytest.mark.parametrize("fail_in", ["fsync", "replace", "write"])
def test_failed_save_leaves_the_original_and_no_temp_file(tmp_path, monkeypatch, fail_in):
    path = tmp_path / "f.lbf"
    old = MemoryFilter(100)
    old.add("old")
    old.save(path)
    original = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")

    if fail_in == "write":
        real_fdopen = os.fdopen

        class Broken:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()
                return False

            def write(self, data):
                self.f.write(data[: len(data) // 2])
                raise OSError("disk full (simulated)")

        monkeypatch.setattr(os, "fdopen", lambda *a, **k: Broken(real_fdopen(*a, **k)))
    else:
        monkeypatch.setattr(os, fail_in, boom)
    new = MemoryFilter(5000)
    new.update(keys(100))
    with pytest.raises(OSError):
        new.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["f.lbf"]
    assert lb.load(path) == old


def test_save_to_a_missing_directory(tmp_path):
    f = MemoryFilter(10)
    with pytest.raises(FileNotFoundError):
        f.save(tmp_path / "no" / "such" / "dir.lbf")
    assert os.listdir(tmp_path) == []


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        lb.load(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        MemoryFilter.load(str(tmp_path / "missing"))


class MyMemory(MemoryFilter):
    pass


class MyBlocked(lb.BlockedFilter):
    pass


class MyCounting(CountingFilter):
    pass


class MyScalable(ScalableFilter):
    pass


SUBCLASSES = {"memory": MyMemory, "blocked": MyBlocked, "counting": MyCounting,
              "scalable": MyScalable}


@pytest.mark.parametrize("kind", list(KINDS))
def test_pickle_and_copy_keep_a_subclass_instance_attributes(kind):
    # A subclass instance's own attributes (its __dict__) travel with it, as for any
    # Python object: pickle and copy.copy gave the filter back without them.
    import copy

    Mine = SUBCLASSES[kind]
    f = Mine.from_bytes(make(kind).to_bytes())
    f.owner, f.tags = "svc", ["a"]
    for g in [pickle.loads(pickle.dumps(f, protocol=p))
              for p in range(pickle.HIGHEST_PROTOCOL + 1)] + [copy.copy(f), copy.deepcopy(f)]:
        assert type(g) is Mine and g == f
        assert (g.owner, g.tags) == ("svc", ["a"])
    assert copy.deepcopy(f).tags is not f.tags
    plain = make(kind)  # no attributes of its own: the reduction has no state
    assert len(plain.__reduce__()) == 2


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_subclass_with_its_own_init_is_told_to_define_new_and_works_when_it_does(kind):
    base = KINDS[kind]

    class OwnInit(base):
        def __init__(self, shop):
            self.shop = shop

    with pytest.raises(TypeError, match="OwnInit is a subclass whose __init__ is its own.*"
                                        "define __new__ too") as e:
        OwnInit("products")
    assert type(e.value.__cause__) is TypeError and "must be a number" in str(e.value.__cause__)

    class WithNew(OwnInit):
        def __new__(cls, shop):
            return super().__new__(cls, 1000, 0.01)

    f = WithNew("products")
    f.add("a")
    assert "a" in f and f.shop == "products"
    with pytest.raises(TypeError) as plain:
        base("products")                      # no subclass: the message as it was
    assert "subclass" not in str(plain.value)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_subclass_that_defines_new_is_not_told_to_define_new(kind):
    # Its __new__ passed the filter wrong arguments: the error is the filter's own, not
    # advice to do what the class already does.
    class BadNew(KINDS[kind]):
        def __new__(cls, shop):
            return super().__new__(cls, shop)

        def __init__(self, shop):
            self.shop = shop

    with pytest.raises(TypeError) as e:
        BadNew("products")
    assert "must be a number" in str(e.value) and "__new__" not in str(e.value)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_subclass_of_type_error_reaches_a_subclass_with_its_own_init_unchanged(kind):
    # The hint is for the filter's own refusal (a TypeError): an error of another class
    # raised while reading the arguments keeps its class, so `except` still catches it.
    class Refused(TypeError):
        pass

    class Capacity:
        def __index__(self):
            raise Refused("no")

        __int__ = __float__ = __index__

    class OwnInit(KINDS[kind]):
        def __init__(self, *args):
            pass

    with pytest.raises(Refused, match="^no$"):
        OwnInit(Capacity())


def test_subclass_round_trips(tmp_path):
    class Mine(MemoryFilter):
        pass

    f = Mine(100)
    f.add("x")
    assert type(Mine.from_bytes(f.to_bytes())) is Mine
    f.save(tmp_path / "m")
    assert type(Mine.load(tmp_path / "m")) is Mine


# ---- the format is stable -------------------------------------------------------------------

# Written by ling_bloom 0.1 (hash byte 0: the "xxh3" walk).  They must load, and be read with
# the walk they were written with: the keys test present, and a filter built with
# hash="xxh3" today writes the same bytes.
GOLDEN = {
    "memory": (
        lambda: MemoryFilter(m=64, k=3, hash="xxh3"),
        ["a", "b"],
        "4c424c4d01000100400000000000000003000000000000000000000000000000000000000000000000020400"
        "088000503b4ba3976c5ccb91",
    ),
    "counting": (
        lambda: CountingFilter(m=9, k=2, hash="xxh3"),
        ["a", "b", "a"],
        "4c424c4d010002000900000000000000020000000000000000000000000000000000000000000000001030"
        "000200b4a8c3e68f3714",
    ),
    "scalable": (
        lambda: ScalableFilter(2, 0.1, hash="xxh3"),
        ["a", "b", "c", "d"],
        "4c424c4d0100030002000000000000009a9999999999b93f0000000000000040cdccccccccccec3f0200000000"
        "000000020000000000000002000000000000002a38e0003804d24bdae14cb5fc941926",
    ),
}

# The same filters with the default hash (byte 7 = 2, "xxh3-mix"), pinned when it became the
# default: the walk and the stage sizing must not change under saved files.
GOLDEN_MIX = {
    "memory": (
        lambda: MemoryFilter(m=64, k=3),
        ["a", "b"],
        "4c424c4d010001024000000000000000030000000000000000000000000000000000000000000000002000"
        "008002006089f11094268f3ab4",
    ),
    "counting": (
        lambda: CountingFilter(m=9, k=2),
        ["a", "b", "a"],
        "4c424c4d0100020209000000000000000200000000000000000000000000000000000000000000001000"
        "020102147a58d5345e1ddf",
    ),
    "scalable": (
        lambda: ScalableFilter(2, 0.1),
        ["a", "b", "c", "d"],
        "4c424c4d0100030202000000000000009a9999999999b93f0000000000000040cdccccccccccec3f0200"
        "00000000000002000000000000000200000000000000506d66c08080a23b0047b42fec004e2858",
    ),
}


@pytest.mark.parametrize("golden", ["0.1", "default"])
@pytest.mark.parametrize("kind", list(GOLDEN))
def test_golden_bytes(kind, golden):
    """Saved filters must stay readable with the walk they were written with."""
    factory, ks, hexdata = (GOLDEN if golden == "0.1" else GOLDEN_MIX)[kind]
    f = factory()
    f.update(ks)
    data = bytes.fromhex(hexdata)
    assert f.to_bytes() == data
    g = lb.from_bytes(data)
    assert g == f and all(g.test_many(ks))
    assert g.hash == ("xxh3" if golden == "0.1" else "xxh3-mix")
    if xxhash is not None:
        assert struct.unpack("<Q", data[-8:])[0] == xxhash.xxh3_64_intdigest(data[:-8])
    assert data[4:6] == struct.pack("<H", lb.FORMAT_VERSION)


def test_a_0_1_file_is_never_read_with_the_new_walk():
    """The bytes of a 0.1 filter, relabelled as xxh3-mix (checksum fixed), would answer for
    other keys: the scheme byte is what decides, and each scheme reads its own bits."""
    factory, ks, hexdata = GOLDEN["memory"]
    old = lb.from_bytes(bytes.fromhex(hexdata))
    assert old.hash == "xxh3" and old.test_many(ks) == [True, True]
    assert lb.indices("a", 64, 3, hash="xxh3") != lb.indices("a", 64, 3)


# ---- damaged input ---------------------------------------------------------------------------

SMALL = {
    "blocked": lambda: lb.BlockedFilter(m=512, k=8),
    "memory": lambda: MemoryFilter(m=60, k=3),
    "counting": lambda: CountingFilter(m=13, k=2),
    "scalable": lambda: ScalableFilter(2, 0.2),
}


def small(kind: str):
    f = SMALL[kind]()
    f.update(keys(5))
    return f


@pytest.mark.parametrize("kind", list(SMALL))
def test_every_truncation_is_rejected(kind):
    f = small(kind)
    data = f.to_bytes()
    cls = KINDS[kind]
    for n in range(len(data)):
        with pytest.raises(ValueError):
            cls.from_bytes(data[:n])
        with pytest.raises(ValueError):
            lb.from_bytes(data[:n])
    with pytest.raises(ValueError):
        cls.from_bytes(data + b"\x00")  # and one byte too many


@pytest.mark.parametrize("kind", list(SMALL))
def test_every_single_byte_change_is_rejected(kind):
    data = small(kind).to_bytes()
    cls = KINDS[kind]
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= mask
            with pytest.raises(ValueError):
                cls.from_bytes(bytes(bad))


@pytest.mark.parametrize("kind", list(KINDS))
def test_wrong_kind_for_the_class(kind):
    data = make(kind).to_bytes()
    for other_kind, cls in KINDS.items():
        if other_kind != kind:
            with pytest.raises(ValueError):
                cls.from_bytes(data)
    # the same bytes with the kind byte changed and the checksum recomputed
    for kind_byte in KIND_BYTE.values():
        if kind_byte != KIND_BYTE[kind]:
            forged = reseal(data, lambda b: b.__setitem__(6, kind_byte))
            with pytest.raises(ValueError):
                lb.from_bytes(forged)


def test_not_bytes_at_all():
    for cls in KINDS.values():
        with pytest.raises(TypeError):
            cls.from_bytes("LBLM text")
        with pytest.raises(TypeError):
            cls.from_bytes(12345)
        with pytest.raises(ValueError):
            cls.from_bytes(b"")
        with pytest.raises(ValueError):
            cls.from_bytes(b"\x00" * 100)
    with pytest.raises(ValueError):
        lb.from_bytes(b"")
    with pytest.raises(ValueError):
        lb.from_bytes(b"GIF89a" + bytes(100))
    with pytest.raises(ValueError):
        lb.from_bytes(seal(b"LBLM\x01\x00\x07\x00" + bytes(40)))  # unknown kind 7


def _fixed_edits():
    def u64(off, v):
        return lambda b: struct.pack_into("<Q", b, off, v)

    def u32(off, v):
        return lambda b: struct.pack_into("<I", b, off, v)

    def f64(off, v):
        return lambda b: struct.pack_into("<d", b, off, v)

    def both(*edits):
        def run(b):
            for e in edits:
                e(b)
        return run

    return {
        "version 0": lambda b: struct.pack_into("<H", b, 4, 0),
        "version 2": lambda b: struct.pack_into("<H", b, 4, 2),
        "magic": lambda b: b.__setitem__(0, ord("X")),
        "unknown hash scheme": lambda b: b.__setitem__(7, 3),
        "hash scheme 255": lambda b: b.__setitem__(7, 255),
        "kind 0": lambda b: b.__setitem__(6, 0),
        "kind 4": lambda b: b.__setitem__(6, 4),
        "m = 0": u64(8, 0),
        "m = 2**48 + 1": u64(8, 2**48 + 1),
        "m = 2**48 (32 TiB)": u64(8, 2**48),
        "m = 2**40": u64(8, 2**40),
        "m = 2**64 - 1": u64(8, 2**64 - 1),
        "m = 2**64 - 7 (ceil(m/8) wraps)": u64(8, 2**64 - 7),
        "m one more": lambda b: struct.pack_into("<Q", b, 8, struct.unpack_from("<Q", b, 8)[0] + 64),
        "k = 0": u32(16, 0),
        "k = 65": u32(16, 65),
        "k = 2**32 - 1": u32(16, 2**32 - 1),
        "flags = 2": u32(20, 2),
        "flags = 0xffffffff": u32(20, 0xFFFFFFFF),
        "capacity 0": both(u32(20, 1), u64(24, 0)),
        "rate 0": both(u32(20, 1), f64(32, 0.0)),
        "rate 1": both(u32(20, 1), f64(32, 1.0)),
        "rate nan": both(u32(20, 1), f64(32, float("nan"))),
        "rate inf": both(u32(20, 1), f64(32, float("inf"))),
        "rate -0.5": both(u32(20, 1), f64(32, -0.5)),
    }


@pytest.mark.parametrize("kind", ["memory", "counting"])
@pytest.mark.parametrize("name", list(_fixed_edits()))
def test_hostile_fixed_header_with_a_valid_checksum(kind, name):
    data = small(kind).to_bytes()
    forged = reseal(data, _fixed_edits()[name])
    with pytest.raises(ValueError):
        KINDS[kind].from_bytes(forged)
    with pytest.raises(ValueError):
        lb.from_bytes(forged)


def test_padding_bits_past_m_are_rejected():
    f = MemoryFilter(m=60, k=3)  # 8 bytes, the last 4 bits are padding
    data = f.to_bytes()
    forged = reseal(data, lambda b: b.__setitem__(40 + 7, b[40 + 7] | 0x01))
    with pytest.raises(ValueError):
        MemoryFilter.from_bytes(forged)
    ok = reseal(data, lambda b: b.__setitem__(40 + 7, 0x10))  # bit 59, inside m
    assert MemoryFilter.from_bytes(ok).bits_set == 1
    c = CountingFilter(m=13, k=2)  # 7 bytes, the high nibble of the last is padding
    data = c.to_bytes()
    forged = reseal(data, lambda b: b.__setitem__(40 + 6, 0x10))
    with pytest.raises(ValueError):
        CountingFilter.from_bytes(forged)
    ok = reseal(data, lambda b: b.__setitem__(40 + 6, 0x0F))
    assert CountingFilter.from_bytes(ok).fill_ratio() == 1 / 13


def _scalable_edits():
    def u64(off, v):
        return lambda b: struct.pack_into("<Q", b, off, v)

    def u32(off, v):
        return lambda b: struct.pack_into("<I", b, off, v)

    def f64(off, v):
        return lambda b: struct.pack_into("<d", b, off, v)

    return {
        "initial capacity 0": u64(8, 0),
        "initial capacity 2**62": u64(8, 2**62),
        "initial capacity 2**64-1": u64(8, 2**64 - 1),
        "error rate 0": f64(16, 0.0),
        "error rate nan": f64(16, float("nan")),
        "error rate 1e-300 (k > 64)": f64(16, 1e-300),
        "growth 1": f64(24, 1.0),
        "growth nan": f64(24, float("nan")),
        "growth inf": f64(24, float("inf")),
        "fpr ratio 0": f64(32, 0.0),
        "fpr ratio 1": f64(32, 1.0),
        "fpr ratio nan": f64(32, float("nan")),
        "stages 0": u32(40, 0),
        "stages 3 (one more than held)": u32(40, 3),
        "stages 64": u32(40, 64),
        "stages 65": u32(40, 65),
        "stages 2**32-1": u32(40, 2**32 - 1),
        "reserved set": u32(44, 1),
        "count above capacity": u64(48, 3),
        "count 2**64-1": u64(56, 2**64 - 1),
        "unknown hash": lambda b: b.__setitem__(7, 9),
    }


@pytest.mark.parametrize("name", list(_scalable_edits()))
def test_hostile_scalable_header_with_a_valid_checksum(name):
    f = ScalableFilter(2, 0.2)
    f.update(keys(4))
    data = f.to_bytes()
    assert f.num_sub_filters == 2 and struct.unpack_from("<I", data, 40)[0] == 2
    forged = reseal(data, _scalable_edits()[name])
    with pytest.raises(ValueError):
        ScalableFilter.from_bytes(forged)
    with pytest.raises(ValueError):
        lb.from_bytes(forged)


def test_hostile_scalable_claiming_many_huge_stages():
    """A short file that claims 64 stages of a fast-growing chain (the last ones would need
    petabytes): rejected from the header alone."""
    body = bytearray(b"LBLM" + struct.pack("<HBB", 1, 3, 0))
    body += struct.pack("<Qddd", 10**6, 0.01, 10.0, 0.9)
    body += struct.pack("<II", 64, 0)
    body += struct.pack("<Q", 0) * 64
    with pytest.raises(ValueError):
        ScalableFilter.from_bytes(seal(body))
    # a growth that keeps every stage small: 64 stages are fine only with all their bytes
    f = ScalableFilter(1, 0.5, 1.0001, 0.99)
    f.update(keys(500))
    if f.num_sub_filters <= 64:
        data = f.to_bytes()
        assert ScalableFilter.from_bytes(data) == f
        with pytest.raises(ValueError):
            ScalableFilter.from_bytes(reseal(data, lambda b: b.extend(b"\x00")))


HOSTILE_SCRIPT = textwrap.dedent(
    r"""
    import resource, struct, sys
    import ling_bloom as lb, xxhash

    def seal(body):
        return bytes(body) + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body)))

    # Nothing below may allocate more than a few MB; cap the address space to catch it.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    import os
    vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 2**20, hard))

    cases = []
    for m in (2**40, 2**45, 2**48, 2**48 - 1):
        for kind in (1, 2):
            body = b"LBLM" + struct.pack("<HBB", 1, kind, 0)
            body += struct.pack("<QIIQd", m, 3, 0, 0, 0.0) + bytes(64)
            cases.append(seal(body))
    body = bytearray(b"LBLM" + struct.pack("<HBB", 1, 3, 0))
    body += struct.pack("<Qddd", 2**40, 0.01, 2.0, 0.9) + struct.pack("<II", 5, 0)
    body += struct.pack("<Q", 0) * 5 + bytes(1000)
    cases.append(seal(body))
    for nstages in (64, 4096, 4097, 2**31):
        # a chain that claims many stages with a full stage table but no bits
        body = bytearray(b"LBLM" + struct.pack("<HBB", 1, 3, 0))
        body += struct.pack("<Qddd", 1, 0.5, 1.0001, 0.9999) + struct.pack("<II", nstages, 0)
        body += struct.pack("<Q", 1) * min(nstages, 4097)
        cases.append(seal(body))
    for data in cases:
        for fn in (lb.from_bytes, lb.MemoryFilter.from_bytes, lb.CountingFilter.from_bytes,
                   lb.ScalableFilter.from_bytes):
            try:
                fn(data)
            except ValueError:
                continue
            except MemoryError:
                print("MemoryError: tried to allocate", fn, data[:48].hex())
                sys.exit(3)
            print("accepted", data[:48].hex())
            sys.exit(4)
    print("ok")
    """
)


def test_hostile_headers_never_allocate_what_they_claim():
    if xxhash is None:
        pytest.skip("needs the xxhash package to forge a valid checksum")
    env = dict(os.environ)
    root = str(Path(lb.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", HOSTILE_SCRIPT], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)


def test_random_garbage_never_crashes():
    import random

    rng = random.Random(7)
    good = [small(k).to_bytes() for k in SMALL]
    for _ in range(3000):
        base = bytearray(rng.choice(good))
        for _ in range(rng.randint(1, 6)):
            op = rng.random()
            if op < 0.5 and base:
                base[rng.randrange(len(base))] = rng.randrange(256)
            elif op < 0.75 and base:
                del base[rng.randrange(len(base)) :]
            else:
                base += rng.randbytes(rng.randint(1, 20))
        resealed = xxhash is not None and rng.random() < 0.5 and len(base) >= 8
        data = seal(base[:-8]) if resealed else bytes(base)
        try:
            f = lb.from_bytes(data)
        except ValueError:
            continue
        # accepted: it must be a sound filter whose bytes round-trip
        assert lb.from_bytes(f.to_bytes()) == f


# ---- accept exactly what the writer writes -----------------------------------------------

@pytest.mark.parametrize("kind", ["memory", "counting"])
def test_no_capacity_means_both_fields_are_zero(kind):
    data = KINDS[kind](m=1000, k=5).to_bytes()
    assert KINDS[kind].from_bytes(data).capacity is None
    for off, fmt, value in [(24, "<Q", 7), (32, "<d", float("nan")), (32, "<d", 0.01),
                            (32, "<d", -0.0)]:
        forged = reseal(data, lambda b: struct.pack_into(fmt, b, off, value))
        with pytest.raises(ValueError, match="flags say there is none"):
            KINDS[kind].from_bytes(forged)


@pytest.mark.parametrize("kind", ["memory", "counting"])
def test_m_and_k_must_follow_from_capacity_and_rate(kind):
    data = KINDS[kind](1000, 0.01).to_bytes()
    assert KINDS[kind].from_bytes(data).capacity == 1000
    for off, fmt, value in [(24, "<Q", 999), (24, "<Q", 10**6), (32, "<d", 0.02),
                            (16, "<I", 6)]:
        forged = reseal(data, lambda b: struct.pack_into(fmt, b, off, value))
        with pytest.raises(ValueError, match="not a valid saved filter"):
            KINDS[kind].from_bytes(forged)


def test_scalable_growth_the_constructor_refuses_is_refused_in_a_file():
    f = ScalableFilter(5, 0.5)
    data = f.to_bytes()
    assert len(data) < 100
    # Loaded, this one would have asked calloc for about 78 GB on its first growth.
    forged = reseal(data, lambda b: struct.pack_into("<d", b, 24, 8.6e9))
    with pytest.raises(ValueError, match="bad scalable parameters"):
        ScalableFilter.from_bytes(forged)
    with pytest.raises(ValueError):
        ScalableFilter(5, 0.5, 8.6e9)
    ok = reseal(data, lambda b: struct.pack_into("<d", b, 24, 64.0))
    assert ScalableFilter.from_bytes(ok).growth_ratio == 64.0


def test_scalable_stages_past_the_rate_bound_are_corrupt():
    # Stages 0..3 of this chain are all it can have (see test_scalable_filter.py); a file
    # with a fifth stage (its bits present, so the length is right) is not one it wrote.
    f = ScalableFilter(1, 1e-18, 2.0, 0.5)
    f.update(keys(15))
    assert f.num_sub_filters == 4
    data = f.to_bytes()
    m4, _ = lb.estimate(16, 2.0 ** -63)
    body = bytearray(data[:48])
    struct.pack_into("<I", body, 40, 5)
    body += data[48:48 + 32] + bytes(8) + data[48 + 32:-8] + bytes((m4 + 7) // 8)
    forged = seal(body)
    with pytest.raises(ValueError, match="not a valid saved filter.*rates") as ei:
        ScalableFilter.from_bytes(forged)
    assert not isinstance(ei.value, lb.InvalidCapacityError)


# ---- load() reads no more than the header says ------------------------------------------

def test_load_reads_no_further_than_the_header(tmp_path):
    f = make("scalable")
    path = tmp_path / "f.bloom"
    f.save(path)
    assert lb.load(path) == f
    with open(path, "ab") as out:
        out.write(b"x")
    with pytest.raises(ValueError, match="goes on past"):
        lb.load(path)
    with pytest.raises(ValueError, match="goes on past"):
        ScalableFilter.load(path)
    path.write_bytes(f.to_bytes()[:-3])
    with pytest.raises(ValueError):
        lb.load(path)
    path.write_bytes(b"LBLM")
    with pytest.raises(ValueError):
        lb.load(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_load_of_an_endless_file_stops_at_the_header():
    # In a process of its own, with its address space capped when no sanitizer is loaded
    # (ASan needs a huge one): the old load() read /dev/zero until memory ran out.  The cap
    # is 1 GiB above what the interpreter has mapped already (a free-threaded CPython
    # reserves its allocator's arenas at start).
    code = textwrap.dedent("""
        import os, resource, sys
        if "asan" not in os.environ.get("LD_PRELOAD", ""):
            with open("/proc/self/statm") as statm:
                mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), mapped + (1 << 30)))
        import ling_bloom as lb
        for load in (lb.load, lb.MemoryFilter.load, lb.ScalableFilter.load):
            try:
                load("/dev/zero")
            except ValueError as e:
                assert "not a valid saved filter" in str(e), e
            else:
                sys.exit("loaded /dev/zero")
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


# ---- padding bits: every kind refuses bits outside its filter ----------------------------

def _flip(data: bytes, at: int, mask: int) -> bytes:
    return reseal(data, lambda b: b.__setitem__(at, b[at] | mask))


def test_a_chain_stage_with_padding_bits_set_is_refused():
    """Each stage's bits end in a partial byte here (m % 8 != 0): a bit past m in it is
    outside the filter, and refused as MemoryFilter refuses it; the last bit inside m of
    the same byte is accepted and counted."""
    f = ScalableFilter(10, 0.05, 2.0, 0.5)
    f.update(keys(40))
    stages = f.stages()
    assert len(stages) == 3 and all(s["m"] % 8 for s in stages)
    data = f.to_bytes()
    pos = 48 + 8 * len(stages)
    for i, s in enumerate(stages):
        nbytes = (s["m"] + 7) // 8
        last = pos + nbytes - 1
        pos += nbytes
        padding = 0xFF >> (s["m"] % 8)  # bits m .. 8*nbytes-1 (Redis bit order)
        for bit in range(8):
            if not padding & (1 << bit):
                continue
            with pytest.raises(lb.CorruptFileError, match="padding"):
                ScalableFilter.from_bytes(_flip(data, last, 1 << bit))
            with pytest.raises(lb.CorruptFileError, match="padding"):
                lb.from_bytes(_flip(data, last, 1 << bit))
        inside = 0x80 >> ((s["m"] - 1) % 8)  # bit m-1, the filter's last
        if data[last] & inside:
            continue
        ok = ScalableFilter.from_bytes(_flip(data, last, inside))
        assert ok.stages()[i]["bits_set"] == s["bits_set"] + 1
        assert ok != f
    assert ScalableFilter.from_bytes(data) == f


@pytest.mark.parametrize("kind", ["memory", "counting", "blocked"])
def test_the_fixed_kinds_refuse_padding_bits_too(kind):
    if kind == "blocked":
        # m is a whole number of 64-byte blocks: every byte of the payload is inside the
        # filter, so there are no padding bits; a header whose m is not such a number is
        # refused even when the payload is as long as it says.
        f = lb.BlockedFilter(m=1024, k=8)
        data = f.to_bytes()
        assert len(data) == 40 + f.m // 8 + 8 and f.nbytes * 8 == f.m
        full = reseal(data, lambda b: b.__setitem__(slice(40, len(b)), b"\xff" * (len(b) - 40)))
        assert lb.BlockedFilter.from_bytes(full).bits_set == f.m
        body = bytearray(data[:40])
        struct.pack_into("<Q", body, 8, 1000)
        body += bytes((1000 + 7) // 8)
        with pytest.raises(lb.CorruptFileError):
            lb.BlockedFilter.from_bytes(seal(body))
        return
    # memory: m = 61, bits 61..63 of the last byte are padding; counting: m = 13 cells,
    # the high nibble of the last byte is padding.
    f = MemoryFilter(m=61, k=3) if kind == "memory" else CountingFilter(m=13, k=2)
    data = f.to_bytes()
    last = len(data) - 9
    for mask in ((0x04, 0x02, 0x01) if kind == "memory" else (0x10, 0x80)):
        with pytest.raises(lb.CorruptFileError, match="padding"):
            type(f).from_bytes(_flip(data, last, mask))
        with pytest.raises(lb.CorruptFileError, match="padding"):
            lb.from_bytes(_flip(data, last, mask))


# ---- a header that claims more than the file holds -----------------------------------------

def _fixed_header(kind: int, m: int, k: int) -> bytes:
    return b"LBLM" + struct.pack("<HBBQIIQd", 1, kind, 2, m, k, 0, 0, 0.0)


def _chain_header(n0: int, rate: float, growth: float, ratio: float, stages: int) -> bytes:
    return (b"LBLM" + struct.pack("<HBB", 1, 3, 2) + struct.pack("<Qddd", n0, rate, growth, ratio)
            + struct.pack("<II", stages, 0))


def _claiming_more_than_they_hold() -> dict:
    """Sealed files (their checksums right) whose headers claim more bytes than they
    hold, from one byte more to the most a header can claim."""
    cases = {}
    mem, cnt = MemoryFilter(m=60, k=3).to_bytes(), CountingFilter(m=13, k=2).to_bytes()
    blk = lb.BlockedFilter(m=1024, k=8).to_bytes()
    chain = small("scalable").to_bytes()
    for name, data in (("memory", mem), ("counting", cnt), ("blocked", blk),
                       ("scalable", chain)):
        cases[f"{name}, one byte short"] = seal(data[:-9])
    cases["memory, m=1 in 48 bytes"] = seal(_fixed_header(1, 1, 1))
    for kind, k, name in ((1, 3, "memory"), (2, 3, "counting"), (4, 8, "blocked")):
        for m in (2**40, 2**48):
            cases[f"{name}, m=2**{m.bit_length() - 1} in 104 bytes"] = seal(
                _fixed_header(kind, m, k) + bytes(56))
    cases["memory, m=2**48-1 in 104 bytes"] = seal(_fixed_header(1, 2**48 - 1, 3) + bytes(56))
    # A chain whose first stage alone is terabytes, and one of 4096 stages in 56 bytes.
    cases["scalable, a stage of 2**43 keys"] = seal(
        _chain_header(2**43, 0.5, 2.0, 0.5, 1) + bytes(8) + bytes(40))
    cases["scalable, 4096 stages in 56 bytes"] = seal(_chain_header(1000, 0.5, 1.0001, 0.5, 4096))
    cases["scalable, 4096 stages and their table"] = seal(
        _chain_header(1000, 0.5, 1.0001, 0.5, 4096) + bytes(8 * 4096 + 4096))
    return cases


LOAD_EVERY_WAY = textwrap.dedent(
    r"""
    import io, os, resource, sys
    # Under a cap of the address space (not under ASan, which needs a huge one), so that
    # an allocation of the size a header claims fails even where memory is overcommitted.
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 2**20, hard))
    import ling_bloom as lb
    CLS = {1: lb.MemoryFilter, 2: lb.CountingFilter, 3: lb.ScalableFilter, 4: lb.BlockedFilter}
    bad = 0
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        cls = CLS[data[6]]
        ways = {"lb.load(path)": lambda: lb.load(path),
                "cls.load(path)": lambda: cls.load(path),
                "lb.load(file)": lambda: lb.load(open(path, "rb")),
                "lb.load(BytesIO)": lambda: lb.load(io.BytesIO(data)),
                "from_bytes": lambda: cls.from_bytes(data)}
        for way, load in ways.items():
            try:
                load()
            except lb.CorruptFileError:
                continue
            except BaseException as e:
                print(f"{os.path.basename(path)}: {way} raised {type(e).__name__}: {e}")
            else:
                print(f"{os.path.basename(path)}: {way} accepted it")
            bad += 1
    print("bad", bad)
    """
)


def test_a_header_claiming_more_than_the_file_holds_is_corrupt_every_way(tmp_path):
    """load(path) compares the length the header claims with the file's, and reads a file
    in bounded steps: it never allocates the claimed size (MemoryError), and says
    CorruptFileError, as from_bytes and load(file object) do, for every kind."""
    paths = []
    for i, (name, data) in enumerate(_claiming_more_than_they_hold().items()):
        p = tmp_path / f"{i:02d} {name}.bloom"
        p.write_bytes(data)
        paths.append(str(p))
    env = dict(os.environ)
    root = str(Path(lb.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", LOAD_EVERY_WAY, *paths], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("bad 0"), (r.stdout, r.stderr[-3000:])


def test_load_compares_the_claimed_length_with_the_file_first(tmp_path):
    path = tmp_path / "f.bloom"
    path.write_bytes(seal(_fixed_header(1, 2**40, 3) + bytes(56)))
    claimed = 40 + 2**40 // 8 + 8
    with pytest.raises(lb.CorruptFileError, match=rf"104 bytes.*header claims {claimed} "):
        lb.load(path)
    path.write_bytes(seal(_chain_header(1000, 0.5, 1.0001, 0.5, 4096)))
    with pytest.raises(lb.CorruptFileError, match=r"56 bytes.*header claims at least"):
        ScalableFilter.load(path)


def test_a_chain_header_is_refused_on_its_length_before_any_stage_is_sized():
    """The bytes a chain's stages need at the least are compared with the bytes present
    before any stage is sized (the sizing of a small stage is a search, thousands of them
    a few seconds): a header of 4096 stages in 56 bytes is refused on its length.  The
    order shows in the reason: this header's second stage is out of range (2**46 keys),
    and the short file is refused for its length, not for that stage."""
    late = seal(_chain_header(2**40, 0.5, 64.0, 0.5, 2))
    with pytest.raises(lb.CorruptFileError, match="stage geometry"):  # with bytes enough
        ScalableFilter.from_bytes(seal(_chain_header(2**40, 0.5, 64.0, 0.5, 2) + bytes(26)))
    for data in (late, seal(_chain_header(1000, 0.5, 1.0001, 0.5, 4096)),
                 seal(_chain_header(1, 0.5, 1.0001, 0.9999, 4096) + bytes(8 * 4096))):
        for read in (ScalableFilter.from_bytes, lb.from_bytes):
            with pytest.raises(lb.CorruptFileError, match="shorter than its header says"):
                read(data)


# ---- the header, read by the one reader of its layout ------------------------------------

@pytest.mark.parametrize("flt", [
    MemoryFilter(1000, 0.01), MemoryFilter(m=1000, k=3, hash="ling-base"),
    lb.BlockedFilter(1000, 0.01), CountingFilter(500, 0.02, hash="xxh3"),
], ids=["memory", "memory-m-k", "blocked", "counting"])
def test_peek_header_gives_a_fixed_filters_geometry(flt):
    h = lb._core.peek_header(flt.to_bytes())
    assert (h["kind"], h["version"], h["m"], h["k"], h["hash"], h["live"]) == (
        type(flt).__name__, lb.FORMAT_VERSION, flt.m, flt.k, flt.hash, False)
    assert (h["capacity"], h["error_rate"]) == (flt.capacity, flt.error_rate)
    assert h["header_bytes"] == 40


def test_peek_header_gives_a_chains_parameters_from_its_first_48_bytes():
    f = ScalableFilter(100, 0.01, growth_ratio=4)
    f.update(keys(1000))
    h = lb._core.peek_header(f.to_bytes()[:48])
    assert (h["kind"], h["initial_capacity"], h["error_rate"], h["growth_ratio"],
            h["stages"], h["hash"]) == ("ScalableFilter", 100, 0.01, 4.0, f.num_sub_filters, f.hash)


def test_peek_header_of_a_live_mapped_file(tmp_path):
    path = str(tmp_path / "live.lbf")
    with MemoryFilter.open(path, "w", capacity=100, error_rate=0.01):
        pass
    assert lb._core.peek_header(Path(path).read_bytes())["live"] is True


@pytest.mark.parametrize("data,why", [
    (b"", "too short"), (b"LBLM", "too short"), (b"garbage!" * 10, "bad magic"),
    (b"LBLM\x02\x00\x01\x02" + bytes(40), "version"), (b"LBLM\x01\x00\x09\x02" + bytes(40), "kind"),
    (b"LBLM\x01\x00\x01\x09" + bytes(40), "hash scheme"), (MemoryFilter(10).to_bytes()[:39], "truncated"),
])
def test_peek_header_refuses_what_is_not_a_saved_filter(data, why):
    with pytest.raises(lb.CorruptFileError, match=why):
        lb._core.peek_header(data)


def test_peek_header_takes_bytes_not_str():
    with pytest.raises(TypeError):
        lb._core.peek_header("LBLM")  # type: ignore[arg-type]
