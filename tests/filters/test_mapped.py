"""MemoryFilter.open(): one filter file mapped by every process that opens it.

What is promised (docs/integrations.md, "One filter for all workers"):
- the file is the saved format: load() reads it, RedisFilter.load() uploads it;
- adds from several processes at once lose no bit (atomic OR) and answer "was new" right;
- a reader never sees a key missing that a writer finished adding;
- mode "r" refuses every change; "w" replaces a file by renaming, "x" never overwrites;
- the bits live in the page cache once, not once per process.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import struct

import pytest

import ling_bloom as lb
from ling_bloom import (
    CorruptFileError,
    GeometryMismatchError,
    MemoryFilter,
    NotSupportedError,
)


def keys(prefix: str, n: int):
    return [f"{prefix}:{i}" for i in range(n)]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "products.lbf")


# ---- modes and the file ------------------------------------------------------------------

def test_create_add_and_reopen(path):
    with MemoryFilter.open(path, "w", 10_000, 0.01) as f:
        assert (f.path, f.mode) == (path, "w")
        assert f.add("a") is True and f.add("a") is False
        f.update(keys("k", 1000))
        assert f.add_many(["a", "new"]) == [False, True]
        heap = MemoryFilter(10_000, 0.01)
        heap.update(["a", "new"] + keys("k", 1000))
        assert f == heap and f.to_bitmap() == heap.to_bitmap()
        assert len(f) == len(heap) and f.bits_set == heap.bits_set
    with MemoryFilter.open(path) as r:  # "r" is the default
        assert r.mode == "r" and r.test_many(keys("k", 1000)) == [True] * 1000
        assert (r.capacity, r.error_rate, r.m, r.k, r.hash) == (10_000, 0.01, heap.m, heap.k, "xxh3-mix")
    assert MemoryFilter(10).path is None and MemoryFilter(10).mode is None


def test_the_file_is_the_saved_format(path, tmp_path):
    with MemoryFilter.open(path, "w", m=8 * 1000 + 3, k=5, hash="xxh3") as f:
        f.update(keys("k", 300))
        loaded = lb.load(path)
        assert type(loaded) is MemoryFilter and loaded.path is None
        assert loaded == f and loaded.hash == "xxh3"
        assert MemoryFilter.from_bytes(f.to_bytes()) == f
        # save() of a mapped filter writes an ordinary (sealed) file elsewhere.
        f.save(str(tmp_path / "copy.lbf"))
        assert lb.load(str(tmp_path / "copy.lbf")) == f
    raw = open(path, "rb").read()
    flags = struct.unpack_from("<I", raw, 20)[0]
    assert flags & 2, "a file processes add to carries the live flag"
    assert len(raw) == 40 + (8 * 1000 + 3 + 7) // 8 + 8


def test_read_only_refuses_every_change(path):
    MemoryFilter.open(path, "w", 1000).close()
    r = MemoryFilter.open(path, "r")
    other = MemoryFilter(1000)
    for change in (lambda: r.add("a"), lambda: r.update(["a"]), lambda: r.add_many(["a"]),
                   r.reset):
        with pytest.raises(NotSupportedError, match="read-only"):
            change()
    with pytest.raises(NotSupportedError):
        r |= other
    with pytest.raises(NotSupportedError):
        r &= other
    assert r.bits_set == 0 and r.test("a") is False
    assert (r | other) == other  # a new filter in memory: allowed
    r.close()


def test_r_plus_of_a_saved_file_makes_it_live(path):
    heap = MemoryFilter(1000, 0.01)
    heap.update(["old"])
    heap.save(path)
    assert struct.unpack_from("<I", open(path, "rb").read(), 20)[0] & 2 == 0
    with MemoryFilter.open(path, "r+") as f:
        assert "old" in f
        f.add("new")
    assert struct.unpack_from("<I", open(path, "rb").read(), 20)[0] & 2
    again = lb.load(path)
    assert again.test_many(["old", "new"]) == [True, True]


def test_w_replaces_by_rename_and_x_never_overwrites(path):
    old = MemoryFilter.open(path, "w", 1000)
    old.add("before")
    inode = os.stat(path).st_ino
    new = MemoryFilter.open(path, "w", 1000)
    assert os.stat(path).st_ino != inode
    assert "before" in old and "before" not in new  # the old mapping keeps its file
    with pytest.raises(FileExistsError):
        MemoryFilter.open(path, "x", 1000)
    assert MemoryFilter.open(path).test("before") is False
    assert [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".ling_bloom-")] == []
    old.close()
    new.close()


def test_new_file_follows_the_umask(path):
    mask = os.umask(0o027)
    try:
        MemoryFilter.open(path, "w", 100).close()
    finally:
        os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_bad_arguments_and_files(path, tmp_path):
    with pytest.raises(ValueError, match="mode must be"):
        MemoryFilter.open(path, "a", 100)
    with pytest.raises(TypeError, match="creates a file"):
        MemoryFilter.open(path, "w")
    with pytest.raises(TypeError):
        MemoryFilter.open(path, "w", None)
    with pytest.raises(lb.InvalidCapacityError):
        MemoryFilter.open(path, "w", m=10, k=65)
    with pytest.raises(FileNotFoundError):
        MemoryFilter.open(path)
    with pytest.raises(IsADirectoryError):
        MemoryFilter.open(str(tmp_path))
    bad = tmp_path / "bad.lbf"
    bad.write_bytes(b"garbage" * 20)
    with pytest.raises(CorruptFileError, match="bad magic"):
        MemoryFilter.open(str(bad))
    counting = tmp_path / "c.lbf"
    lb.CountingFilter(100).save(str(counting))
    with pytest.raises(CorruptFileError, match="MemoryFilter files only"):
        MemoryFilter.open(str(counting))
    # A truncated file is refused before it is mapped (a mapping past its end would fault).
    MemoryFilter.open(path, "w", 10_000).close()
    data = open(path, "rb").read()
    short = tmp_path / "short.lbf"
    short.write_bytes(data[:-100])
    with pytest.raises(CorruptFileError, match="length"):
        MemoryFilter.open(str(short), "r+")
    # A sealed file whose bits were damaged: its checksum says so.
    heap = MemoryFilter(1000)
    heap.add("x")
    raw = bytearray(heap.to_bytes())
    raw[60] ^= 0xFF
    damaged = tmp_path / "damaged.lbf"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="checksum"):
        MemoryFilter.open(str(damaged), "r+")
    # A live file's header is still checked.
    live = bytearray(data)
    live[16] ^= 1  # k
    (tmp_path / "live.lbf").write_bytes(bytes(live))
    with pytest.raises(CorruptFileError):
        MemoryFilter.open(str(tmp_path / "live.lbf"))
    with pytest.raises(CorruptFileError):
        lb.load(str(tmp_path / "live.lbf"))
    # The geometry asked for must be the file's.
    with pytest.raises(GeometryMismatchError):
        MemoryFilter.open(path, "r", 5000)
    with pytest.raises(GeometryMismatchError):
        MemoryFilter.open(path, "r", hash="xxh3")
    assert MemoryFilter.open(path, "r", 10_000, 0.01).capacity == 10_000


def test_live_flag_only_for_memory_filters(tmp_path):
    import xxhash

    raw = bytearray(lb.CountingFilter(100).to_bytes())
    raw[20] |= 2                                   # the live flag on a CountingFilter ...
    for covered in (len(raw) - 8, 40):             # ... with either checksum forged right
        raw[-8:] = xxhash.xxh3_64_intdigest(bytes(raw[:covered])).to_bytes(8, "little")
        with pytest.raises(CorruptFileError):
            lb.CountingFilter.from_bytes(bytes(raw))
    # and a MemoryFilter's live file with a payload checksum is refused: the trailer of a
    # live file covers its header only.
    heap = bytearray(lb.MemoryFilter(100).to_bytes())
    heap[20] |= 2
    heap[-8:] = xxhash.xxh3_64_intdigest(bytes(heap[:-8])).to_bytes(8, "little")
    with pytest.raises(CorruptFileError, match="checksum"):
        lb.MemoryFilter.from_bytes(bytes(heap))
    heap[-8:] = xxhash.xxh3_64_intdigest(bytes(heap[:40])).to_bytes(8, "little")
    assert lb.MemoryFilter.from_bytes(bytes(heap)) == lb.MemoryFilter(100)


def test_closed_pickle_copy_and_repr(path):
    f = MemoryFilter.open(path, "w", 1000)
    f.update(["a", "b"])
    assert "mapped=" in repr(f) and "mode=w" in repr(f)
    c = f.copy()
    assert c.path is None and c == f
    c.add("only in the copy")
    assert "only in the copy" not in f
    import pickle

    p = pickle.loads(pickle.dumps(f))
    assert p.path is None and p == f
    assert f.__sizeof__() < 1000  # the bits are the file's pages, not the object's
    f.flush()
    f.close()
    f.close()
    assert "closed" in repr(f)
    with pytest.raises(lb.ClosedError):
        f.add("x")
    with pytest.raises(lb.ClosedError):
        f.flush()


def test_redis_filter_loads_a_mapped_file(path, clean_redis):
    with MemoryFilter.open(path, "w", 5000, 0.01) as f:
        f.update(keys("row", 2000))
        with lb.RedisFilter("bf", 5000, 0.01, host=clean_redis.host, port=clean_redis.port) as r:
            r.load(f)
            assert r.test_many(keys("row", 2000)) == [True] * 2000
            assert r.snapshot() == f


# ---- processes ---------------------------------------------------------------------------

def _adder(path, prefix, n, start):
    start.wait()
    with MemoryFilter.open(path, "r+") as f:
        for i in range(0, n, 500):  # batches and single adds both
            f.update([f"{prefix}:{j}" for j in range(i, min(n, i + 499))])
            f.add(f"{prefix}:{min(n, i + 500) - 1}")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_concurrent_adds_from_processes_lose_nothing(path, method):
    ctx = mp.get_context(method)
    n, procs = 20_000, 4
    MemoryFilter.open(path, "w", n * procs, 0.01).close()
    start = ctx.Event()
    workers = [ctx.Process(target=_adder, args=(path, f"p{i}", n, start)) for i in range(procs)]
    for w in workers:
        w.start()
    start.set()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    every = [f"p{i}:{j}" for i in range(procs) for j in range(n)]
    expected = MemoryFilter(n * procs, 0.01)
    expected.update(every)
    with MemoryFilter.open(path) as f:
        assert all(f.test_many(every))
        # Not one bit lost to a race: the same bits as one process adding every key.
        assert f.to_bitmap() == expected.to_bitmap()


def _writer(path, n, progress):
    with MemoryFilter.open(path, "r+") as f:
        for i in range(0, n, 200):
            f.update([f"w:{j}" for j in range(i, i + 200)])
            progress.value = i + 200  # published after the adds finished


def _reader(path, progress, misses, rounds):
    with MemoryFilter.open(path, "r") as f:
        for _ in range(rounds):
            done = progress.value
            if done and not all(f.test_many([f"w:{j}" for j in range(max(0, done - 400), done)])):
                misses.value += 1


def test_readers_never_miss_what_a_writer_finished(path):
    ctx = mp.get_context("fork")
    n = 40_000
    MemoryFilter.open(path, "w", n, 0.01).close()
    progress, misses = ctx.Value("q", 0), ctx.Value("q", 0)
    w = ctx.Process(target=_writer, args=(path, n, progress))
    readers = [ctx.Process(target=_reader, args=(path, progress, misses, 400)) for _ in range(2)]
    for p in [w, *readers]:
        p.start()
    for p in [w, *readers]:
        p.join(60)
        assert p.exitcode == 0
    assert misses.value == 0
    assert progress.value == n


def test_a_forked_child_adds_to_the_same_file(path):
    f = MemoryFilter.open(path, "w", 1000)
    pid = os.fork()
    if pid == 0:  # child: the mapping is shared, not copied
        try:
            f.add("from the child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert "from the child" in f
    f.close()


def _map_and_measure(path, barrier, out, i):
    f = MemoryFilter.open(path, "r")
    len(f)  # reads every page of the bits
    barrier.wait()  # all processes have the pages mapped now
    private = pss = rss = 0
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            if "-" in line.split()[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside:
                name, value = line.split(":", 1)
                if not value.strip().endswith("kB"):
                    continue
                kb = int(value.split()[0])
                if name in ("Private_Clean", "Private_Dirty"):
                    private += kb
                elif name == "Pss":
                    pss += kb
                elif name == "Rss":
                    rss += kb
    out[i] = (rss, pss, private)
    barrier.wait()
    f.close()


def test_one_copy_in_memory_for_all_processes(path):
    mib = 64
    MemoryFilter.open(path, "w", m=mib * 8 * 2**20, k=7).close()
    ctx = mp.get_context("fork")
    procs = 4
    barrier = ctx.Barrier(procs)
    out = ctx.Manager().dict()
    ws = [ctx.Process(target=_map_and_measure, args=(path, barrier, out, i)) for i in range(procs)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(60)
        assert w.exitcode == 0
    for rss, pss, private in out.values():
        assert rss >= mib * 1024 * 0.9  # each process sees every page ...
        assert private < 1024  # ... but owns almost none of them (kB)
        assert pss <= mib * 1024 / procs * 1.2  # its share is a quarter of one copy


# ---- an "r+" open marks a sealed file live while others open it --------------------------

def _open_each_round(path, mode, rounds, barrier, started, done, failures):
    for _ in range(rounds):
        barrier.wait()  # a freshly saved (sealed) file is in place
        if mode == "r+":
            started.set()
            opened = [MemoryFilter.open(path, "r+")]
            done.set()
        else:
            # "r" opens, one after the other, for as long as the "r+" open takes: one of
            # them is checking the file at the moment it is marked live.
            started.wait(10)
            opened = []
            while not done.is_set() or not opened:
                try:
                    opened.append(MemoryFilter.open(path, "r") if mode == "r" else lb.load(path))
                except CorruptFileError as e:
                    with failures.get_lock():
                        failures.value += 1
                    print(f"{mode}: {e}", flush=True)
                    opened.append(None)
        for f in opened:
            if f is not None and f.path is not None:
                f.close()
        barrier.wait()  # the opens are over
        started.clear()
        done.clear()


@pytest.mark.parametrize("reader", ["r", "load"])
def test_r_plus_marking_a_file_live_never_makes_it_corrupt_to_a_reader(path, reader):
    """One process opens a freshly saved file "r+" (which marks it live in place) while
    another opens it "r" (which checks it), or loads it: the reader must see a sealed file
    or a live one, never a corrupt one, and the bits are the saved ones either way."""
    ctx = mp.get_context("fork")
    rounds = 150
    heap = MemoryFilter(m=8 * 8 * 2**20, k=7)  # 8 MiB: checking it takes a while
    heap.update(keys("saved", 5000))
    sealed = heap.to_bytes()
    barrier = ctx.Barrier(3)
    failures, started, done = ctx.Value("q", 0), ctx.Event(), ctx.Event()
    workers = [ctx.Process(target=_open_each_round,
                           args=(path, mode, rounds, barrier, started, done, failures))
               for mode in ("r+", reader)]
    for w in workers:
        w.start()
    try:
        for i in range(rounds):
            with open(path + ".new", "wb") as out:  # save() without its fsync
                out.write(sealed)
            os.replace(path + ".new", path)
            barrier.wait(60)
            barrier.wait(60)
            assert struct.unpack_from("<I", open(path, "rb").read(48), 20)[0] & 2  # live now
            if i % 10 == 0:
                assert lb.load(path) == heap
    except BaseException:
        barrier.abort()  # the workers stop waiting for the next round
        raise
    finally:
        for w in workers:
            w.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    assert failures.value == 0, f"{failures.value} opens in {rounds} rounds saw a corrupt file"


def test_a_damaged_file_is_refused_by_every_mode(path, tmp_path):
    heap = MemoryFilter(50_000, 0.01)
    heap.update(keys("k", 500))
    heap.save(path)
    sealed = open(path, "rb").read()
    for at in (20, 45, len(sealed) // 2, len(sealed) - 9, len(sealed) - 1):
        raw = bytearray(sealed)
        raw[at] ^= 0x04  # the live flag's neighbour, a bit, a bit, the last bit, the trailer
        with open(path, "wb") as out:
            out.write(raw)
        for mode in ("r", "r+"):
            with pytest.raises(CorruptFileError):
                MemoryFilter.open(path, mode)
        assert open(path, "rb").read() == bytes(raw)  # "r+" left a refused file as it was
        with pytest.raises(CorruptFileError):
            lb.load(path)
    # A sealed file's damaged payload with the live flag set (its checksum still the
    # sealed one's): refused, not taken for a live file.
    raw = bytearray(sealed)
    raw[20] |= 2
    raw[len(sealed) // 2] ^= 1
    with open(path, "wb") as out:
        out.write(raw)
    for mode in ("r", "r+"):
        with pytest.raises(CorruptFileError, match="checksum"):
            MemoryFilter.open(path, mode)
