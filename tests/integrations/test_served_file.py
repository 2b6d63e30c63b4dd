"""The files beside a served filter file (FileFilter): FILE.adds, FILE.lock and
FILE.warmup.lock, and publish() that replaces FILE. What a hostile or unusual directory
does to them (links, FIFOs, another user's files, a full disk), what a worker keeps in
memory, and which bytes it logs for a key."""
from __future__ import annotations

import enum
import errno
import os
import tempfile

import pytest
from hang_guard import returns

import ling_bloom as lb
from ling_bloom._addlog import AddLog, log_key
from ling_bloom.warmup import FileFilter, begin, publish


def saved(path, *keys):
    f = lb.MemoryFilter(10_000, 0.001)
    f.update(keys or ["warm"])
    f.save(str(path))
    return f


# ---- links and other files planted beside FILE ----------------------------------------------

@pytest.mark.parametrize("suffix", [".lock", ".adds", ".warmup.lock"])
def test_a_link_planted_beside_the_file_is_refused_and_nothing_is_created_through_it(
        tmp_path, suffix):
    path = str(tmp_path / "f.bloom")
    saved(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "created"
    os.symlink(target, path + suffix)                # a dangling link: O_CREAT would make it
    with pytest.raises(PermissionError, match="not a regular file") as e:
        if suffix == ".warmup.lock":
            with AddLog(path).warmup_lock():
                pass
        else:
            ff = FileFilter(path, check_every=3600)
            try:
                ff.add("k")
            finally:
                ff.close()
    assert e.value.filename == path + suffix
    assert not target.exists()
    if suffix != ".warmup.lock":
        with pytest.raises(PermissionError, match="not a regular file"):
            publish(lb.MemoryFilter(100, 0.01), path)
        assert not target.exists()


def test_a_link_to_an_existing_file_at_the_add_log_is_never_appended_to(tmp_path):
    path = str(tmp_path / "f.bloom")
    saved(path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"ling_bloom add log v1 0123\nuntouched\n")   # even one that looks like a log
    os.symlink(victim, path + ".adds")
    ff = FileFilter(path, check_every=3600)
    with pytest.raises(PermissionError, match="not a regular file"):
        ff.add("k")
    ff.close()
    assert victim.read_bytes() == b"ling_bloom add log v1 0123\nuntouched\n"


@pytest.mark.parametrize("suffix", ["", ".adds", ".lock"])
def test_a_fifo_beside_or_at_the_file_never_hangs_a_lookup_or_a_publish(tmp_path, suffix, caplog):
    path = str(tmp_path / "f.bloom")
    if suffix:
        saved(path, "warm")
    os.mkfifo(path + suffix)

    def worker():
        ff = FileFilter(path, check_every=3600, unwarmed="reject")
        try:
            return ff.test("warm"), ff.test("absent")
        finally:
            ff.close()

    with caplog.at_level("ERROR", logger="ling_bloom.warmup"):
        answers = returns(worker)
    assert any("not a regular file" in m for m in caplog.messages)
    if suffix == "":                                  # no filter could be read: unwarmed
        assert answers == (False, False)
        assert returns(lambda: publish(saved(tmp_path / "new", "k"), path)) == 0
        assert lb.load(path).test("k")                # the FIFO replaced by the new file
    else:                                             # the file served, without the log
        assert answers == (True, False)
        with pytest.raises(PermissionError, match="not a regular file"):
            returns(lambda: publish(lb.MemoryFilter(100, 0.01), path))


# ---- publish: nothing fails once FILE is replaced --------------------------------------------

def test_publish_that_cannot_seal_the_old_log_fails_before_replacing_anything(tmp_path,
                                                                              monkeypatch):
    import ling_bloom._addlog as addlog

    path = str(tmp_path / "f.bloom")
    old = saved(path, "old")
    a = FileFilter(path, check_every=3600)
    b = FileFilter(path, check_every=3600)
    a.add("before")
    log_ino = os.stat(path + ".adds").st_ino
    real_write = os.write

    def full_disk(fd, data):
        if addlog.SEALED in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(addlog.os, "write", full_disk)
    with pytest.raises(OSError) as e:
        publish(saved(tmp_path / "new", "new"), path)
    monkeypatch.undo()
    assert e.value.errno == errno.ENOSPC
    assert lb.load(path) == old                        # FILE was not replaced
    assert os.stat(path + ".adds").st_ino == log_ino   # nor the log
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]   # no temporary left
    b.add("after")
    assert a.test("after") and a.test("before") and b.test("before")
    assert publish(saved(tmp_path / "new", "new"), path) == 2   # the next one carries both
    assert a.test("after") and a.test("new") and not a.test("old")
    a.close(); b.close()


def test_publish_that_cannot_replace_the_log_still_succeeds_and_loses_no_key(tmp_path,
                                                                            monkeypatch):
    path = str(tmp_path / "f.bloom")
    saved(path, "old")
    a = FileFilter(path, check_every=3600)            # a worker on the old log
    b = FileFilter(path, check_every=3600)
    a.add("before")
    real_replace = os.replace

    def failing(src, dst, *args, **kw):
        if os.fspath(dst).endswith(".adds"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst, *args, **kw)

    monkeypatch.setattr(os, "replace", failing)
    assert publish(saved(tmp_path / "new", "new"), path) == 1   # FILE replaced: success
    monkeypatch.undo()
    assert lb.load(path).test("new") and lb.load(path).test("before")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
    b.add("after")                                    # added after the publish
    for ff in (a, b, FileFilter(path, check_every=3600)):
        assert ff.test("after") and ff.test("before") and ff.test("new")
    a.close(); b.close()


def test_a_seal_left_by_a_publish_that_failed_is_read_past(tmp_path, monkeypatch):
    """The seal goes into the old log before FILE is renamed; when the rename fails the
    log stays in use, sealed: workers read past the seal (once) and see later adds."""
    path = str(tmp_path / "f.bloom")
    old = saved(path, "old")
    a = FileFilter(path, check_every=3600)
    b = FileFilter(path, check_every=3600)
    real_replace = os.replace

    def failing(src, dst, *args, **kw):
        if os.fspath(dst) == path and os.path.basename(src).startswith(".bloom-publish-"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst, *args, **kw)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        publish(saved(tmp_path / "new", "new"), path)
    monkeypatch.undo()
    assert lb.load(path) == old and b"sealed" in open(path + ".adds", "rb").read()
    b.add("after")
    assert a.test("after") and not a.test("new") and a.reloads == 1
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *args: reads.append(1) or real_pread(*args))
    for i in range(50):
        assert not a.test(f"absent-{i}")
    assert reads == []                                # past the seal: nothing more to read
    a.close(); b.close()


def test_a_failed_publishs_seal_starts_one_reload_in_a_worker_that_reloads_in_a_thread(
        tmp_path, monkeypatch):
    """An event loop's worker reloads in a thread and lets lookups pass meanwhile: after a
    publish that sealed the log and then failed, the reload finds the same log and reads on
    past the seal; the seal never starts another reload (each absent lookup started one,
    and passed while it ran)."""
    import time

    path = str(tmp_path / "f.bloom")
    saved(path, "old")
    a = FileFilter(path, check_every=3600)
    a.reload_in_thread = True
    b = FileFilter(path, check_every=3600)
    assert a.test("old")
    real_replace = os.replace

    def failing(src, dst, *args, **kw):
        if os.fspath(dst) == path and os.path.basename(src).startswith(".bloom-publish-"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst, *args, **kw)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        publish(saved(tmp_path / "new", "new"), path)
    monkeypatch.undo()
    b.add("after")
    deadline = time.monotonic() + 30
    while not (a.test("after") and not a._loading and a.test("absent-first") is False):
        assert time.monotonic() < deadline, "the reload never ended"
        time.sleep(0.01)
    reloads = a.reloads
    assert [a.test(f"absent-{i}") for i in range(50)] == [False] * 50
    assert a.reloads == reloads
    a.close(); b.close()


# ---- another user's files --------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="acts as another user: needs root (as in CI)")
def test_a_worker_of_another_user_reads_the_log_it_cannot_write(monkeypatch):
    """The warm-up runs as root with umask 022: FILE, FILE.adds and FILE.lock are 0644. A
    worker running as nobody can lock (flock needs no write access) and read the log, so it
    sees every key root adds; its own add is refused with a PermissionError."""
    d = tempfile.mkdtemp()
    old_mask = os.umask(0o022)
    try:
        os.chmod(d, 0o755)
        path = os.path.join(d, "f.bloom")
        saved(path, "warm")
        root = FileFilter(path, check_every=3600)
        root.add("before")                            # creates FILE.adds and FILE.lock, 0644
        assert os.stat(path + ".lock").st_mode & 0o777 == 0o644
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:                                  # the worker, as nobody
            code = 9
            try:
                os.setgid(65534)
                os.setuid(65534)
                ff = FileFilter(path, check_every=3600)
                ok = ff.test("before") and ff.test("warm") and not ff.test("after")
                os.write(ready_w, b"1")
                os.read(go_r, 1)                      # root adds "after" meanwhile
                ok = ok and ff.test("after")
                try:
                    ff.add("mine")
                    ok = False
                except PermissionError as e:
                    ok = ok and path + ".adds" in str(e)
                code = 0 if ok else 1
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 2
            finally:
                os._exit(code)
        os.read(ready_r, 1)
        root.add("after")
        os.write(go_w, b"1")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        root.close()
    finally:
        os.umask(old_mask)
        import shutil
        shutil.rmtree(d)


# ---- a torn record at the log's end ------------------------------------------------------------

def test_a_torn_tail_is_read_once_not_at_every_absent_lookup(tmp_path, monkeypatch):
    path = str(tmp_path / "f.bloom")
    saved(path)
    a = FileFilter(path, check_every=3600)
    b = FileFilter(path, check_every=3600)
    a.add("x")
    with open(path + ".adds", "ab") as log:
        log.write(b"\n" + b"61" * 100_000)            # a writer died mid-record
    reads = []
    real_pread = os.pread

    def counting(fd, n, offset):
        if n >= 100_000:  # a read of the torn tail (not the header's check, a few bytes)
            reads.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    for i in range(200):
        assert not b.test(f"absent-{i}")
    assert len(reads) <= 1, f"{len(reads)} reads of the log for 200 absent lookups"
    a.add("next")                                     # the log grew: read again
    assert b.test("next") and b.test("x")
    assert len(reads) <= 2
    a.close(); b.close()


# ---- what a worker keeps of the log ------------------------------------------------------------

@pytest.mark.parametrize("where", ["loaded", "mapped", "unwarmed"])
def test_a_worker_keeps_the_logged_keys_in_a_filter_not_a_set(tmp_path, where):
    """Loaded: the keys go into the worker's own copy of the file's filter; mapped: into
    the shared pages; before the first warm-up (no file: nothing to add them to) into a
    filter of their own."""
    import tracemalloc

    path = str(tmp_path / "f.bloom")
    if where != "unwarmed":
        saved(path)
    writer = FileFilter(path, check_every=3600)
    keys = [f"user-{i:08d}" for i in range(50_000)]
    writer.update(keys)
    tracemalloc.start()
    try:
        reader = FileFilter(path, check_every=3600, mapped=where == "mapped",
                            unwarmed="reject")
        writer.update([f"late-{i:08d}" for i in range(20_000)])
        assert reader.test("late-00019999")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(reader.test(k) for k in keys[::97])
    # A set of 70,000 keys alone is more than 4 MB.
    assert held < 1_000_000, f"{held} bytes held for 70,000 logged keys"
    writer.close(); reader.close()


# ---- close ----------------------------------------------------------------------------------

def test_a_closed_file_filter_raises_closed_error_on_every_call(tmp_path):
    path = str(tmp_path / "f.bloom")
    saved(path)
    ff = FileFilter(path, check_every=0)
    ff.add("k")
    assert not ff.closed
    ff.close()
    ff.close()                                        # idempotent
    assert ff.closed
    for call in (lambda: ff.test("k"), lambda: "k" in ff, lambda: ff.add("k"),
                 lambda: ff.update(["k"]), lambda: ff.update([]), lambda: ff.update(iter(())),
                 lambda: ff.ensure("k"), lambda: ff.refresh(True),
                 lambda: ff.filter, lambda: ff.warmed, lambda: ff.swap(),
                 lambda: ff.error_rate):
        with pytest.raises(lb.ClosedError):
            call()
    assert not os.path.exists(path + ".new")


# ---- the bytes logged for a key ----------------------------------------------------------------

class Color(enum.IntEnum):
    RED = 7


class Twisted(int):
    def __int__(self):
        return 99

    def __index__(self):
        return 98

    def __str__(self):
        return "twisted"

    __repr__ = __str__


class Coded(str):
    def encode(self, *args, **kwargs):
        return b"something else"


class Bytesy(bytes):
    def __bytes__(self):
        return b"something else"


TRICKY = [Color.RED, Twisted(5), 2**70, -(2**63), Coded("text"), "é", Bytesy(b"raw"),
          bytearray(b"buf"), memoryview(b"view")]


@pytest.mark.parametrize("key", TRICKY, ids=lambda k: type(k).__name__)
def test_the_bytes_logged_for_a_key_are_the_bytes_the_filters_hash(tmp_path, key):
    assert lb.hash_pair(log_key(key)) == lb.hash_pair(key)
    path = str(tmp_path / "f.bloom")
    saved(path)
    a = FileFilter(path, check_every=3600)
    b = FileFilter(path, check_every=3600)
    a.add(key)
    assert b.test(key) and FileFilter(path, check_every=3600).test(key)
    a.close(); b.close()


def test_a_key_the_filters_refuse_is_refused_before_anything_is_logged(tmp_path):
    import array

    path = str(tmp_path / "f.bloom")
    saved(path)
    ff = FileFilter(path, check_every=3600)
    size = os.path.getsize(path + ".adds")
    for bad, error in ((True, TypeError), (1.5, TypeError), ("", lb.EmptyKeyError),
                       (b"", lb.EmptyKeyError), (memoryview(b"abcd")[::2], TypeError),
                       ("\ud800", UnicodeEncodeError), (array.array("b"), lb.EmptyKeyError)):
        with pytest.raises(error):
            lb.MemoryFilter(10, 0.1).add(bad)         # what the C core says ...
        with pytest.raises(error):
            ff.add(bad)                               # ... the log says first
        with pytest.raises(error):
            ff.update(["fine", bad])
    assert os.path.getsize(path + ".adds") == size
    ff.close()


def test_update_refuses_a_single_str_and_a_bad_column_before_anything_is_logged(tmp_path):
    path = str(tmp_path / "f.bloom")
    saved(path)
    ff = FileFilter(path, check_every=3600)
    size = os.path.getsize(path + ".adds")
    with pytest.raises(TypeError, match="single str"):
        ff.update("abc")                  # one key, not the keys "a", "b", "c"
    assert not ff.test("a")
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError):
        ff.update(np.array([1.5, 2.5]))   # a float column is no column of keys
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(ValueError, match="null at position 1"):
        ff.update(pa.array(["a", None, "b"]))
    with pytest.raises(lb.EmptyKeyError, match="position 1"):
        ff.update(pa.array(["a", ""]))
    assert os.path.getsize(path + ".adds") == size
    assert ff.update(pa.array(["a", None, "b"]), skip_nulls=True) is None
    assert ff.test("a") and ff.test("b")
    ff.close()


def test_update_reads_a_column_in_place_and_logs_each_key_as_the_filters_hash_it(tmp_path):
    np = pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    path = str(tmp_path / "f.bloom")
    saved(path)
    writer = FileFilter(path, check_every=3600)
    reader = FileFilter(path, check_every=3600)       # another worker, open all along
    ints = np.arange(-500, 1500, dtype=np.int64)[::3]  # strided: no contiguous buffer
    texts = pa.chunked_array([["é", "b"], ["c" * 300]]).slice(1)
    writer.update(ints)
    writer.update(texts)
    keys = [int(i) for i in ints] + ["b", "c" * 300]
    assert lb._core.key_bytes_many(ints) == [log_key(int(i)) for i in ints]
    assert lb._core.key_bytes_many(texts) == [b"b", b"c" * 300]
    for ff in (reader, FileFilter(path, check_every=3600)):
        assert all(ff.test(k) for k in keys)
        assert all(ff.test(str(k)) for k in keys[:5])     # 42 and "42" are one key
        assert not ff.test("\u00e9")                     # sliced off: never added
    writer.close(); reader.close()


def test_key_bytes_many_is_key_bytes_of_each_key_for_every_key_form(tmp_path):
    keys = TRICKY + ["plain", b"bytes", 7, -(2**63)]
    assert lb._core.key_bytes_many(keys) == [log_key(k) for k in keys]
    assert lb._core.key_bytes_many(iter(keys)) == [log_key(k) for k in keys]
    assert lb._core.key_bytes_many([]) == []
    for bad in ([True], [1.5], [""]):
        with pytest.raises((TypeError, lb.EmptyKeyError)):
            lb._core.key_bytes_many(bad)
    with pytest.raises(TypeError, match="unexpected keyword argument 'skipnulls'"):
        lb._core.key_bytes_many([], skipnulls=True)


def test_key_bytes_many_survives_a_key_that_empties_its_list(tmp_path):
    # A key's __index__ clearing the list being read freed the keys after it under the
    # loop, which then read past the list's new end (a crash): the keys are read from a
    # copy taken first, as the filters' batches do.
    class Clears:
        def __init__(self, keys):
            self.keys = keys

        def __index__(self):
            self.keys.clear()
            return 3

    keys = []
    keys.extend([Clears(keys), "b", b"c"])
    assert lb._core.key_bytes_many(keys) == [b"3", b"b", b"c"]
    assert keys == []


# ---- a log truncated under the workers ---------------------------------------------------------

@pytest.mark.parametrize("how", ["emptied", "emptied and written again", "cut short"])
def test_a_truncated_add_log_loses_no_key_added_after_it_and_is_replaced(tmp_path, how, caplog):
    # logrotate's copytruncate, or `: > FILE.adds`: the log shrank under the workers.  A
    # worker that had read past the new end never read what was appended after it (a
    # key added in one worker answered absent in the others), a worker started later
    # refused the log ("not a ling_bloom add log": no add at all), and so did publish().
    path = str(tmp_path / "f.bloom")
    publish(lb.MemoryFilter(10_000, 0.001), path)
    w1, w2 = FileFilter(path, check_every=3600), FileFilter(path, check_every=3600)
    w1.update([f"before{i}" for i in range(200)])
    assert w2.test("before7")
    header = open(path + ".adds", "rb").readline()
    # cut short: the header and a few records kept, what w2 had read past them gone
    os.truncate(path + ".adds", len(header) + 50 if how == "cut short" else 0)
    if how == "emptied and written again":
        w1.update([f"after{i}" for i in range(400)])  # past where w2 had read
    w1.add("new1")
    assert w2.test("new1")
    w3 = FileFilter(path, check_every=3600)
    assert w3.test("new1")
    w3.add("new2")
    assert w1.test("new2") and w2.test("new2")
    if how == "emptied and written again":
        assert all(w.test("after399") for w in (w1, w2, w3))
    assert "add log" in caplog.text  # logged
    m = lb.MemoryFilter(10_000, 0.001)
    publish(m, path)  # the warm-up publishes over it, carrying its keys
    assert "new1" in m and "new2" in m
    for w in (w1, w2, w3):
        w.close()


# ---- a warm-up killed while it publishes ----------------------------------------------------------

_KILLED_PUBLISH = r'''
import sys, time
import ling_bloom as lb
from ling_bloom.warmup import publish

class Slow:
    """A filter whose save is cut short (the warm-up is killed while writing it)."""
    def __init__(self):
        self.inner = lb.MemoryFilter(10_000, 0.001)
    def update(self, keys):
        self.inner.update(keys)
    def save(self, target):
        data = self.inner.to_bytes()
        if hasattr(target, "write"):
            target.write(data[:100])
            target.flush()
        else:
            lb.MemoryFilter(10_000, 0.001).save(target)
        print("saving", flush=True)
        time.sleep(120)  # never ends on its own: the test kills the process mid-save

publish(Slow(), sys.argv[1])
'''


def test_a_publish_killed_midway_leaves_no_temporary_file_for_ever(tmp_path):
    # kill -9 of a warm-up while it wrote the new file left a temporary file of the
    # filter's size beside FILE; every killed warm-up (an OOM killer, a deploy) one more,
    # never removed, until the disk was full.  The next publish removes them.
    import subprocess
    import sys

    path = str(tmp_path / "f.bloom")
    publish(lb.MemoryFilter(10_000, 0.001), path)
    w = FileFilter(path, check_every=0)
    w.add("logged")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", _KILLED_PUBLISH, path], env=env,
                             stdout=subprocess.PIPE)
        try:
            assert p.stdout.readline() == b"saving\n"
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
    assert w.test("logged")  # the served file and its log are as they were
    m = lb.MemoryFilter(10_000, 0.001)
    publish(m, path)
    assert "logged" in m
    assert sorted(os.listdir(tmp_path)) == ["f.bloom", "f.bloom.adds", "f.bloom.lock"]
    w.close()
