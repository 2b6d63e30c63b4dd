"""RedisFilter and RedisBloomFilter batches from columns (numpy integer arrays, Arrow arrays
and chunked arrays): the same server state and answers as the same keys as Python objects,
chunked by chunk_size; nulls raise before anything is sent unless skipped."""
from __future__ import annotations

import pytest

import ling_bloom as lb

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")


def rf(srv, key, **kw):
    return lb.RedisFilter(key, 20_000, 0.01, host=srv.host, port=srv.port, **kw)


def columns():
    ints = list(range(-700, 700, 3))
    words = [f"user:{i}" if i % 2 else f"a longer key than a view holds {i}" for i in range(600)]
    return [
        (np.array(ints, dtype=np.int32), ints),
        (np.array(ints, dtype=np.int64)[::-1], ints[::-1]),
        (pa.array(words), words),
        (pa.array(words, type=pa.string_view()).slice(5, 500), words[5:505]),
        (pa.chunked_array([words[:100], words[100:]], type=pa.large_string()), words),
        (pa.array([w.encode() for w in words], type=pa.binary()), [w.encode() for w in words]),
    ]


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_redis_filter_columns_write_what_their_keys_write(clean_redis, raw_redis, chunk_size):
    kw = {} if chunk_size is None else {"chunk_size": chunk_size}
    for n, (col, objs) in enumerate(columns()):
        with rf(clean_redis, f"c{n}", **kw) as a, rf(clean_redis, f"o{n}", **kw) as b:
            first = a.add_many(col)
            assert first.tolist() == b.add_many(objs)
            assert raw_redis.command("GET", f"c{n}") == raw_redis.command("GET", f"o{n}")
            assert bool(a.test_many(col).all())
            a.update(col[:3] if isinstance(col, np.ndarray) else col.slice(0, 3))
            assert raw_redis.command("GET", f"c{n}") == raw_redis.command("GET", f"o{n}")
            probe = np.arange(10_000, 10_050, dtype=np.int64)
            assert a.test_many(probe).tolist() == b.test_many(probe.tolist())


class ObjectArrayLike:
    """numpy's __array__ only, of objects (a pandas column of strings before pandas 3)."""

    def __init__(self, values):
        self.values = np.array(values, dtype=object)

    def __array__(self, dtype=None, copy=None):
        return self.values


def test_redis_filter_array_likes(clean_redis, raw_redis):
    words = [f"user:{i}" for i in range(50)]
    with rf(clean_redis, "al", chunk_size=7) as a, rf(clean_redis, "ol", chunk_size=7) as b:
        assert a.add_many(ObjectArrayLike(words)).tolist() == b.add_many(words)
        assert raw_redis.command("GET", "al") == raw_redis.command("GET", "ol")
        assert a.test_many(ObjectArrayLike(["user:1", "nope"])).tolist() == [True, b.test("nope")]
        assert len(a.test_many(ObjectArrayLike([]))) == 0


def test_redis_filter_nulls(clean_redis, raw_redis):
    col = pa.chunked_array([["a", "b"], [None, "c"]])
    with rf(clean_redis, "nulls") as f:
        before = raw_redis.command("GET", "nulls")
        with pytest.raises(ValueError, match="null at position 2"):
            f.update(col)
        assert raw_redis.command("GET", "nulls") == before
        assert f.test_many(["a", "b", "c"]) == [False, False, False]
        assert f.add_many(col, skip_nulls=True).tolist() == [True, True, False, True]
        assert f.test_many(col, skip_nulls=True).tolist() == [True, True, False, True]
        assert f.test_many(pa.nulls(4, pa.string()), skip_nulls=True).tolist() == [False] * 4


def test_redisbloom_filter_columns(bf_server):
    import uuid
    for col, objs in columns():
        a_key, b_key = f"lbtest:{uuid.uuid4().hex}", f"lbtest:{uuid.uuid4().hex}"
        with lb.RedisBloomFilter(a_key, url=bf_server.url, capacity=10_000) as a, \
                lb.RedisBloomFilter(b_key, url=bf_server.url, capacity=10_000) as b:
            try:
                assert a.add_many(col).tolist() == b.add_many(objs)
                assert bool(a.test_many(col).all())
                a.update(col, skip_nulls=True)
                probe = pa.array(["absent", None, "user:1"])
                assert a.test_many(probe, skip_nulls=True).tolist() == [
                    b.test("absent"), False, b.test("user:1")]
                with pytest.raises(ValueError, match="position 1"):
                    a.test_many(probe)
            finally:
                a.reset()
                b.reset()
