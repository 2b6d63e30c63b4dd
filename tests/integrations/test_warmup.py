"""ling_bloom.warmup: batches, key conversion, the progress bar and summary, the
incremental sync and its saved position."""
from __future__ import annotations

import io
import sqlite3
import threading


import pytest

import ling_bloom as lb
from ling_bloom.warmup import (
    CallbackState,
    FileState,
    keys_from_file,
    sync,
    sync_forever,
    warmup,
)


class CountingFilter:
    """Records update() calls (batch sizes) and delegates to a real filter."""

    def __init__(self, inner):
        self.inner = inner
        self.batches = []

    def update(self, keys):
        keys = list(keys)
        self.batches.append(len(keys))
        self.inner.update(keys)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class TTY(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def db():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE product (id INTEGER PRIMARY KEY, sku TEXT)")
    conn.executemany("INSERT INTO product VALUES (?, ?)",
                     [(i, f"sku-{i}") for i in range(1, 2501)])
    yield conn
    conn.close()


def test_warmup_in_batches_from_a_generator():
    f = CountingFilter(lb.MemoryFilter(10_000, 0.01))
    s = warmup(f, (i for i in range(2500)), batch_size=1000, progress=False)
    assert f.batches == [1000, 1000, 500]
    assert s.keys == 2500
    assert all(str(i) in f.inner for i in range(2500))  # ints are added as str
    assert s.fill_ratio is not None and 0 < s.fill_ratio < 1
    assert s.approximate_count == pytest.approx(2500, rel=0.05)
    assert s.keys_per_second > 0


def test_warmup_from_a_db_cursor_unpacks_one_column_rows(db):
    f = lb.MemoryFilter(10_000, 0.01)
    cur = db.execute("SELECT id FROM product")
    s = warmup(f, cur, batch_size=700, progress=False)
    assert s.keys == 2500
    assert f.test_many(["1", "2500"]) == [True, True]


def test_warmup_refuses_rows_of_two_columns_and_says_key_picks_the_column(db):
    # SELECT id, sku without key=: no key made of the whole row ("(7, 'sku-7')"), no
    # summary of success; the error says how to pick the column.
    f = lb.MemoryFilter(10_000, 0.01)
    with pytest.raises(TypeError, match=r"row of 2 columns.*key=lambda row: row\[0\]"):
        warmup(f, db.execute("SELECT id, sku FROM product"), progress=False)
    assert f.approximate_count() == 0
    db.row_factory = sqlite3.Row
    with pytest.raises(TypeError, match="key="):
        warmup(f, db.execute("SELECT id, sku FROM product"), progress=False)
    with pytest.raises(TypeError, match="key="):
        warmup(f, [[1, 2]], progress=False)
    with pytest.raises(TypeError, match="key="):  # key= that still gives a row
        warmup(f, db.execute("SELECT id, sku FROM product"), key=lambda r: tuple(r),
               progress=False)
    # One column of sqlite3.Row, a 1-tuple, a 1-list: that column's value.
    s = warmup(f, db.execute("SELECT id FROM product"), progress=False)
    assert s.keys == 2500 and f.test_many([1, "2500", 2500]) == [True] * 3
    warmup(f, [("a",), ["b"]], progress=False)
    assert f.test_many(["a", "b"]) == [True, True]


def test_warmup_refuses_floats_and_keys_int_likes_by_their_int():
    f = lb.MemoryFilter(1000, 0.01)
    with pytest.raises(TypeError, match="not float.*key=int"):
        warmup(f, [1, 2, 3.0], progress=False)  # never the key "3.0"
    assert f.approximate_count() == 0
    import enum

    class Status(int, enum.Enum):
        OK = 200

    warmup(f, [Status.OK, (Status.OK,)], progress=False)
    assert f.test(200) and f.test("200") and not f.test("Status.OK")


def test_warmup_from_a_numpy_column_is_the_keys_of_its_ints():
    np = pytest.importorskip("numpy")
    f = lb.MemoryFilter(10_000, 0.01)
    col = np.arange(1, 2501, dtype=np.int64)  # a pandas column's values
    assert warmup(f, col, batch_size=700, progress=False).keys == 2500
    assert f.test_many(list(range(1, 2501))) == [True] * 2500
    with pytest.raises(TypeError, match="key="):
        warmup(f, np.array([1.0, 2.0]), progress=False)


def test_warmup_from_a_2d_numpy_array_takes_its_rows_as_rows():
    # df[["id"]].to_numpy(): each item a 1-D array of one id.  Its raw bytes were the key
    # (b"\x01\0\0\0\0\0\0\0"), so no lookup of an id ever found a row.
    np = pytest.importorskip("numpy")
    from ling_bloom.guard import as_key

    f = lb.MemoryFilter(10_000, 0.01)
    assert warmup(f, np.arange(1, 101).reshape(-1, 1), progress=False).keys == 100
    assert f.test_many(list(range(1, 101))) == [True] * 100
    warmup(f, np.array([["sku-1"], ["sku-2"]]), progress=False)  # text columns
    assert f.test_many(["sku-1", "sku-2"]) == [True, True]
    with pytest.raises(TypeError, match=r"row of 2 columns.*key="):
        warmup(f, np.array([[1, 2]]), progress=False)
    with pytest.raises(TypeError, match="not numpy.float64.*key="):
        warmup(f, np.array([[1.5]]), progress=False)
    # a 1-D array of bytes is still its bytes, as the filters take it
    assert as_key(np.frombuffer(b"ab", dtype=np.uint8)) == b"ab"
    assert as_key(np.array([b"xyz"], dtype="S3")) == b"xyz"


def test_sync_keys_are_the_filters_keys():
    import enum

    class Status(int, enum.Enum):
        OK = 200

    f = lb.MemoryFilter(1000, 0.01)
    sync(f, lambda after, limit: [] if after else [(1, Status.OK), (2, "x")])
    assert f.test(200) and f.test("x") and not f.test("Status.OK")
    with pytest.raises(TypeError):
        sync(f, lambda after, limit: [(1, 2.5)])


def test_warmup_with_a_key_function(db):
    f = lb.MemoryFilter(10_000, 0.01)
    warmup(f, db.execute("SELECT id, sku FROM product"), key=lambda row: row[1],
           progress=False)
    assert "sku-1" in f and "sku-2500" in f
    assert sum(f.test_many([f"sku-{i}" for i in range(1, 2501)])) == 2500


def test_warmup_from_a_file(tmp_path):
    p = tmp_path / "keys.txt"
    p.write_text("a\n  b  \n\nc\n")
    f = lb.MemoryFilter(100, 0.01)
    assert warmup(f, keys_from_file(p), progress=False).keys == 3
    assert f.test_many(["a", "b", "c"]) == [True, True, True]


def test_warmup_is_silent_when_not_a_terminal():
    out = io.StringIO()
    warmup(lb.MemoryFilter(100, 0.01), ["a", "b"], stream=out)
    assert out.getvalue() == ""


def test_plain_bar_and_summary_on_a_terminal():
    out = TTY()
    f = lb.MemoryFilter(10_000, 0.01)
    s = warmup(f, list(range(3000)), batch_size=1000, stream=out, progress="plain")
    text = out.getvalue()
    assert "\r" in text and "3,000/3,000 keys (100%)" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("warm-up: 3,000 keys in ") and "keys/s" in last
    assert "filter fill" in last
    assert str(s) in last


def test_auto_progress_on_a_terminal_without_tqdm(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tqdm(name, *a, **kw):
        if name == "tqdm":
            raise ImportError("no tqdm")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    out = TTY()
    warmup(lb.MemoryFilter(100, 0.01), ["a", "b"], stream=out)  # progress=None: a TTY
    assert "2/2 keys" in out.getvalue() and "warm-up: 2 keys in" in out.getvalue()
    with pytest.raises(ImportError):
        warmup(lb.MemoryFilter(100, 0.01), ["a"], stream=out, progress="tqdm")


def test_tqdm_bar_when_installed():
    pytest.importorskip("tqdm")
    out = io.StringIO()
    warmup(lb.MemoryFilter(100, 0.01), ["a", "b"], stream=out, progress="tqdm")
    assert "100%|" in out.getvalue() and "warm-up: 2 keys in" in out.getvalue()


def test_summary_can_be_forced_without_a_bar():
    out = io.StringIO()
    warmup(lb.MemoryFilter(100, 0.01), ["a"], stream=out, progress=False, summary=True,
           desc="users")
    assert out.getvalue().startswith("users: 1 keys in ")


def test_warmup_rejects_bad_batch_size_and_bad_keys():
    with pytest.raises(ValueError):
        warmup(lb.MemoryFilter(100, 0.01), ["a"], batch_size=0)
    with pytest.raises(TypeError):
        warmup(lb.MemoryFilter(100, 0.01), ["a", None], progress=False)


# ------------------------------------------------------------------------- sync


def fetcher(db, calls=None):
    def fetch(after, limit):
        if calls is not None:
            calls.append((after, limit))
        return db.execute("SELECT id, sku FROM product WHERE id > ? ORDER BY id LIMIT ?",
                          (after or 0, limit)).fetchall()
    return fetch


def test_sync_resumes_from_the_last_id(db, tmp_path):
    f = CountingFilter(lb.MemoryFilter(10_000, 0.01))
    state = FileState(tmp_path / "products.sync.json")
    calls = []
    r = sync(f, fetcher(db, calls), state, batch_size=1000)
    assert (r.keys, r.batches, r.last_id) == (2500, 3, 2500)
    assert calls == [(None, 1000), (1000, 1000), (2000, 1000)]  # last batch short: stop
    assert state.load() == 2500
    assert "sku-2500" in f.inner

    db.executemany("INSERT INTO product VALUES (?, ?)", [(2501, "sku-new"), (2502, "sku-new2")])
    calls.clear()
    r = sync(f, fetcher(db, calls), FileState(tmp_path / "products.sync.json"), batch_size=1000)
    assert calls == [(2500, 1000)]  # only what is new is read
    assert (r.keys, r.last_id) == (2, 2502)
    assert "sku-new2" in f.inner

    calls.clear()
    assert sync(f, fetcher(db, calls), state, batch_size=1000).keys == 0
    assert calls == [(2502, 1000)]


def test_sync_saves_after_each_batch_so_a_failure_resumes(db):
    saved = []
    state = CallbackState(lambda: saved[-1] if saved else None, saved.append)
    f = lb.MemoryFilter(10_000, 0.01)
    real = fetcher(db)

    def flaky(after, limit):
        if after == 2000:
            raise ConnectionError("db went away")
        return real(after, limit)

    with pytest.raises(ConnectionError):
        sync(f, flaky, state, batch_size=1000)
    assert saved == [1000, 2000]
    r = sync(f, real, state, batch_size=1000)
    assert (r.keys, r.last_id) == (500, 2500)


def test_sync_with_plain_ids_and_a_start():
    f = lb.MemoryFilter(100, 0.01)
    ids = list(range(1, 11))
    r = sync(f, lambda after, n: [i for i in ids if i > (after or 0)][:n], batch_size=4,
             start=5)
    assert (r.keys, r.batches, r.last_id) == (5, 2, 10)
    assert "6" in f and "10" in f


def test_sync_rejects_rows_of_three():
    with pytest.raises(ValueError):
        sync(lb.MemoryFilter(100, 0.01), lambda a, n: [(1, 2, 3)], batch_size=10)


def test_file_state_missing_then_written(tmp_path):
    st = FileState(tmp_path / "s.json")
    assert st.load() is None
    st.save("2024-01-01T00:00:00|17")
    assert FileState(tmp_path / "s.json").load() == "2024-01-01T00:00:00|17"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no temp file left


def test_sync_forever_until_stopped(db):
    f = lb.MemoryFilter(10_000, 0.01)
    stop = threading.Event()
    passes = []
    real = fetcher(db)

    def fetch(after, limit):
        rows = real(after, limit)
        if len(rows) < limit:
            passes.append(after)
            if len(passes) == 2:
                db.execute("INSERT INTO product VALUES (3000, 'late')")
            if len(passes) == 3:
                stop.set()
        return rows

    sync_forever(f, fetch, interval=0, stop=stop, batch_size=1000)
    assert "late" in f
    assert passes == [2000, 2500, 2500]  # the position is kept between passes in memory


def test_file_filter_reloads_a_replaced_file_and_keeps_the_old_one_on_a_bad_file(tmp_path, caplog):
    from ling_bloom.warmup import FileFilter

    now = [0.0]
    path = tmp_path / "f.bloom"
    ff = FileFilter(path, check_every=2.0, clock=lambda: now[0])
    assert not ff.warmed and ff.test("anything")            # unwarmed="serve"
    assert not FileFilter(path, unwarmed="reject").test("anything")
    first = lb.MemoryFilter(1000, 0.01)
    first.add("a")
    first.save(str(path))
    assert ff.filter is None                                # not checked before the interval
    now[0] = 2.0
    assert ff.warmed and ff.test("a") and not ff.test("b")
    ff.add("local")                                         # e.g. a post_save hook
    second = lb.MemoryFilter(1000, 0.01)
    second.add("b")
    second.save(str(path))
    now[0] = 4.0
    assert ff.test("b") and not ff.test("a")
    assert ff.test("local")                                 # replayed into the new filter
    assert ff.reloads == 2
    path.write_bytes(b"not a filter at all")
    now[0] = 6.0
    with caplog.at_level("ERROR", logger="ling_bloom.warmup"):
        assert ff.test("b")                                 # the old filter stays
    assert any("reloading" in m and "keeping the current filter" in m for m in caplog.messages)
    with pytest.raises(ValueError):
        FileFilter(path, unwarmed="maybe")


def test_file_filter_mapped_shares_the_file_and_remaps_on_replace(tmp_path, caplog):
    from ling_bloom.warmup import FileFilter

    now = [0.0]
    path = tmp_path / "f.bloom"
    first = lb.MemoryFilter(1000, 0.01)
    first.add("a")
    first.save(str(path))
    ff = FileFilter(path, check_every=2.0, clock=lambda: now[0], mapped=True)
    # mapped, not read in; "r+": an add sets its bits in the file every worker maps
    assert ff.filter.path == str(path) and ff.filter.mode == "r+"
    assert ff.test("a") and not ff.test("b")
    assert ff.add("local") is True and ff.add("local") is False
    ff.update(["local2"])
    assert ff.test("local") and ff.test(b"local2") and ff.filter.bits_set > first.bits_set
    assert lb.MemoryFilter.open(str(path)).test("local")    # in the shared file itself
    held = ff.filter
    second = lb.MemoryFilter(1000, 0.01)
    second.add("b")
    second.save(str(path))                                  # atomic: a rename
    now[0] = 2.0
    assert ff.test("b") and not ff.test("a") and ff.test("local")
    assert ff.reloads == 2 and held.closed                  # the old mapping is let go
    # A file of another kind is loaded as usual.
    c = lb.CountingFilter(1000, 0.01)
    c.add("c")
    c.save(str(path))
    now[0] = 4.0
    assert ff.test("c") and type(ff.filter) is lb.CountingFilter
    # Rewritten in place (never do this to a mapped file): the mapping is dropped, no crash.
    m = lb.MemoryFilter(1000, 0.01)
    m.save(str(path))
    now[0] = 6.0
    assert ff.filter.path == str(path)
    with caplog.at_level("ERROR", logger="ling_bloom.warmup"):
        path.write_bytes(b"LBLM")
        now[0] = 8.0
        assert ff.test("anything")                          # unwarmed="serve" again
    assert any("rewritten in place" in msg for msg in caplog.messages)


# ---- adds shared through the file's add log ----------------------------------------------
# Two FileFilters of one path stand for two worker processes (and real processes below):
# a key added through either is present in both from the moment add() returns, across a
# publish (a warm-up replacing the file) and a reload.

@pytest.mark.parametrize("mapped", [False, True])
def test_file_filter_add_in_one_is_seen_by_another_at_once(tmp_path, mapped):
    from ling_bloom.warmup import FileFilter, begin, publish

    path = str(tmp_path / "f.bloom")
    a = FileFilter(path, check_every=3600, unwarmed="reject", mapped=mapped)
    b = FileFilter(path, check_every=3600, unwarmed="reject", mapped=mapped)
    assert not b.test("early")
    a.add("early")                                   # before any file: kept aside
    assert b.test("early") and not b.test("other")
    warm = lb.MemoryFilter(10_000, 0.001)
    warm.update(["1", "2"])
    since = begin(path)                              # the warm-up's snapshot starts
    b.update(["late-1", "late-2"])                   # rows created while it runs
    assert publish(warm, path, since) == 3           # early, late-1, late-2 carried over
    assert lb.load(path).test("late-2") and lb.load(path).test("early")
    for ff in (a, b):                                # the old log is sealed: both reload
        assert ff.test("1") and ff.test("late-1") and ff.test("early") and not ff.test("3")
    a.add("after")
    assert b.test("after") and b.reloads == 1
    c = FileFilter(path, check_every=3600, mapped=mapped)   # a restarted worker
    assert c.test("after") and c.test("late-2") and c.test("1")
    for ff in (a, b, c):
        ff.close()


def test_publish_refuses_when_another_warm_up_published_in_between(tmp_path):
    from ling_bloom.warmup import FileFilter, WarmupConflictError, begin, publish

    path = str(tmp_path / "f.bloom")
    ff = FileFilter(path, check_every=3600)
    first, second = lb.MemoryFilter(1000, 0.01), lb.MemoryFilter(1000, 0.01)
    since = begin(path)
    publish(second, path)                            # another warm-up, in between
    ff.add("k")
    with pytest.raises(WarmupConflictError, match="run it again"):
        publish(first, path, since)
    assert lb.load(path) == second and ff.test("k")  # nothing written, nothing lost
    ff.close()


def test_add_log_survives_a_torn_record_and_ignores_garbage(tmp_path):
    from ling_bloom.warmup import FileFilter

    path = str(tmp_path / "f.bloom")
    lb.MemoryFilter(1000, 0.01).save(path)
    a = FileFilter(path, check_every=3600)
    b = FileFilter(path, check_every=3600)
    with open(path + ".adds", "ab") as log:
        log.write(b"\n6162")                         # a writer died mid-record
    a.add("next")                                    # the next record still parses
    assert b.test("next")
    with open(path + ".adds", "ab") as log:
        log.write(b"\nzz-not-hex\n")
    a.add(b"\x00\xff\n")                             # any bytes, newlines included
    assert b.test(b"\x00\xff\n") and FileFilter(path).test(b"\x00\xff\n")
    a.close(); b.close()


def test_file_filter_keys_are_the_filters_keys(tmp_path):
    from ling_bloom.warmup import FileFilter

    path = str(tmp_path / "f.bloom")
    lb.MemoryFilter(1000, 0.01).save(path)
    a, b = FileFilter(path), FileFilter(path)
    a.update(["é", b"raw", bytearray(b"buf")])
    assert b.test("é") and b.test("é".encode()) and b.test(b"buf") and b.test("raw")
    with pytest.raises(TypeError):
        a.add(1.5)
    with pytest.raises(TypeError):
        a.add(True)
    assert not hasattr(a, "remove")                  # removes are not shared: none at all
    a.close(); b.close()


def test_file_filter_logs_the_bytes_the_filters_hash(tmp_path):
    # The add log records what the filter hashes: an int subclass by its value (not its
    # __int__), a str subclass by its UTF-8 (not its encode()), numpy's ints as ints.
    from ling_bloom.warmup import FileFilter

    class Lying(int):
        def __int__(self):
            return 0

    class Coded(str):
        def encode(self, *a, **kw):
            return b"other"

    path = str(tmp_path / "f.bloom")
    lb.MemoryFilter(1000, 0.01).save(path)
    a, b = FileFilter(path), FileFilter(path)
    a.update([Lying(7), Coded("word")])
    a.add(8)
    assert b.test(7) and b.test("word") and b.test(8)
    assert not b.test(0) and not b.test("other")
    np = pytest.importorskip("numpy")
    a.add(np.int64(42))
    assert b.test(42) and b.test("42")
    with pytest.raises(TypeError):
        a.add(np.float64(1.0))
    a.close(); b.close()


_WORKER = '''
import os, sys
from ling_bloom.warmup import FileFilter
path, db, me, n, mapped = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
ff = FileFilter(path, check_every=3600, unwarmed="reject", mapped=mapped)
rows = os.open(db, os.O_WRONLY | os.O_APPEND)
done = os.open(db + ".done", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
# at least n keys, and on until the warm-ups have published enough times (the test says so
# with a file), so that the number of publishes raced does not depend on the machine's speed
i = 0
while i < n or (not os.path.exists(db + ".stop") and i < 50 * n):
    key = f"{me}-{i}"
    os.write(rows, (key + "\\n").encode())   # the row is committed ...
    ff.add(key)                                # ... then its key added, as a view does
    assert ff.test(key)
    os.write(done, (key + "\\n").encode())   # add() returned
    i += 1
print("ok")
'''


@pytest.mark.parametrize("mapped", ["0", "1"])
def test_processes_adding_while_warm_ups_publish_lose_nothing(tmp_path, mapped):
    """Four processes create rows and add their keys while this one runs warm-ups: each a
    snapshot of the rows (a file of lines, the database here) published over the file.
    Afterwards every key is present for a fresh reader and for one open all along."""
    import subprocess
    import sys

    from hang_guard import wait_until
    from ling_bloom.warmup import FileFilter, begin, publish

    path, db = str(tmp_path / "f.bloom"), tmp_path / "rows.txt"
    db.write_text("")
    lb.MemoryFilter(100_000, 0.001).save(path)
    reader = FileFilter(path, check_every=3600, mapped=mapped == "1")
    names = ["w0", "w1", "w2", "w3"]
    done = tmp_path / "rows.txt.done"
    done.write_text("")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, path, str(db), w, "300", mapped],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in names]
    publishes, lost = 0, set()
    while any(p.poll() is None for p in procs):
        if publishes == 3:
            (tmp_path / "rows.txt.stop").write_text("")   # the workers may finish now
        since = begin(path)                           # the warm-up starts ...
        snapshot = lb.MemoryFilter(100_000, 0.001)
        rows = db.read_text()
        snapshot.update(k for k in rows.split("\n") if k)   # ... reads the rows
        # a row created now is not in it: one is, before the publish (unless all ended)
        wait_until(lambda: db.stat().st_size > len(rows.encode())
                   or all(p.poll() is not None for p in procs), "a row after the snapshot")
        returned = [k for k in done.read_text().split("\n") if k]
        publish(snapshot, path, since)
        publishes += 1
        after = FileFilter(path, check_every=3600, mapped=mapped == "1")  # a new worker
        lost.update(k for k in returned if not after.test(k))
        after.close()
    assert publishes >= 3 and not lost, f"{len(lost)} added keys absent after a publish"
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    fresh = FileFilter(path, check_every=3600, mapped=mapped == "1")
    added = [k for k in done.read_text().split("\n") if k]
    assert len(added) >= 4 * 300
    missing = [k for k in added if not (fresh.test(k) and reader.test(k))]
    assert missing == [], f"{len(missing)} keys lost over {publishes} publishes"
    reader.close(); fresh.close()


def test_file_filter_in_a_forked_child_shares_with_the_parent(tmp_path):
    import os

    from ling_bloom.warmup import FileFilter

    path = str(tmp_path / "f.bloom")
    lb.MemoryFilter(1000, 0.01).save(path)
    ff = FileFilter(path, check_every=3600)          # made before the fork (a preloaded app)
    pid = os.fork()
    if pid == 0:
        try:
            ff.add("from-child")
            os._exit(0 if ff.test("from-child") else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert ff.test("from-child")                     # the parent reads the child's record
    ff.add("from-parent")
    assert FileFilter(path).test("from-parent")
    ff.close()


def test_warmup_is_a_function_even_after_its_module_is_imported():
    import importlib

    import ling_bloom.warmup  # noqa: F401  (sets the package attribute to the module)

    importlib.import_module("ling_bloom.contrib.flask") if _has("flask") else None
    f = lb.MemoryFilter(100, 0.01)
    summary = lb.warmup(f, ["a", "b"], progress=False)
    assert summary.keys == 2 and "a" in f
    from ling_bloom import warmup as w
    assert w(lb.MemoryFilter(100, 0.01), ["x"], progress=False).keys == 1


def _has(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("mapped", [False, True])
def test_threads_adding_and_testing_while_publishes_reload_see_every_added_key(tmp_path, mapped):
    from ling_bloom.warmup import FileFilter, begin, publish

    path = str(tmp_path / "f.bloom")
    lb.MemoryFilter(50_000, 0.001).save(path)
    writer = FileFilter(path, check_every=3600, mapped=mapped)
    reader = FileFilter(path, check_every=3600, mapped=mapped)   # reloaded under the threads
    missed, stop, rows = [], threading.Event(), []

    def work(me):
        # at least 400 keys, and on until the reader has reloaded twice (publishes under
        # the threads), so that the reloads raced do not depend on the machine's speed
        i = 0
        while i < 400 or (reader.reloads < 2 and i < 50 * 400):
            key = f"{me}-{i}"
            rows.append(key)                                # the row is committed
            writer.add(key)
            if not reader.test(key):
                missed.append(key)
            i += 1

    def publisher():
        while not stop.is_set():
            since = begin(path)
            snapshot = lb.MemoryFilter(50_000, 0.001)
            snapshot.update(list(rows))                     # the rows it reads
            publish(snapshot, path, since)

    pub = threading.Thread(target=publisher)
    pub.start()
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    pub.join()
    assert missed == [] and reader.reloads > 1
    writer.close(); reader.close()
