"""RedisBloomFilter against servers whose BF.* commands are not RedisBloom 2.x's.

What the filter relies on (docs/redisbloom.md lists it): BF.INSERT (with NOCREATE),
BF.EXISTS, BF.MEXISTS, BF.INFO (read by field name), BF.RESERVE, BF.CARD (else BF.INFO's
item count), BF.SCANDUMP and BF.LOADCHUNK (dump and restore).  FakeBFServer
(support/bf_server.py) plays the others: valkey-bloom (no BF.SCANDUMP nor BF.LOADCHUNK, a
BF.INFO with more fields), an implementation that names BF.INFO's fields otherwise or
leaves some out, one whose BF.INSERT takes no NOCREATE, one with a few BF.* commands only.
A command the server lacks is a ModuleMissingError (a NotSupportedError) that names the
command and the server, never a protocol error; the real module's normal path is
test_redisbloom_filter.py's.
"""
from __future__ import annotations

import pytest

import ling_bloom as lb
from ling_bloom.redisbloom import RedisBloomInfo

from bf_server import FakeBFServer, FakeBloom, redisbloom_info, valkey_bloom_info

VALKEY_BLOOM = dict(missing=("BF.SCANDUMP", "BF.LOADCHUNK"), info=valkey_bloom_info,
                    type_name="bloomfltr")


def assert_missing(ei, command: str, server) -> str:
    """The error of a command the server lacks: the right classes, the command and the
    server named, the server's own text kept."""
    e = ei.value
    assert isinstance(e, lb.ModuleMissingError)
    assert isinstance(e, lb.NotSupportedError) and isinstance(e, lb.RedisResponseError)
    assert not isinstance(e, lb.RedisProtocolError)
    msg = str(e)
    assert command in msg, msg
    assert f"127.0.0.1:{server.port}" in msg, msg
    return msg


def test_valkey_bloom_adds_tests_and_reads_info():
    with FakeBFServer(**VALKEY_BLOOM) as s:
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as f:
            assert f.add_many(["a", "b", "a"]) == [True, True, False]
            assert f.test_many(["a", "b", "c"]) == [True, True, False]
            assert f.add("c") is True and "c" in f
            assert f.card() == 3
            assert f.info() == RedisBloomInfo(capacity=100, size=400, filters=1, items=3,
                                              expansion=2)
        # a second filter finds it there: valkey-bloom's extra BF.INFO fields are ignored,
        # its five are compared
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as g:
            assert g.add("d") is True
        with lb.RedisBloomFilter("k", capacity=100, expansion=4, url=s.url) as h:
            with pytest.raises(lb.GeometryMismatchError):
                h.add("e")


def test_valkey_bloom_has_no_dump_nor_restore():
    with FakeBFServer(**VALKEY_BLOOM) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            f.update(["a", "b"])
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.dump()
            msg = assert_missing(ei, "BF.SCANDUMP", s)
            assert "dump()" in msg and "has BF.* commands" in msg
            assert "unknown command" in ei.value.reply.lower()
            # the connection is not dropped as after a reply out of step: it goes on
            assert f.test("a") is True
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.restore([(1, b"a\nb")], replace=True)
            assert "restore()" in assert_missing(ei, "BF.LOADCHUNK", s)
            assert f.test_many(["a", "b"]) == [True, True]  # the key is as it was
            assert not [k for k in s.filters if b"restore" in k]


def test_restore_as_the_first_call_names_the_command_and_the_module():
    with FakeBFServer(**VALKEY_BLOOM) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.restore([(1, b"x")])
            msg = assert_missing(ei, "BF.LOADCHUNK", s)
            assert "RedisBloom" in msg and "valkey-bloom" in msg


def test_info_fields_named_otherwise_are_a_clear_error_not_a_protocol_error():
    def other_names(f: FakeBloom) -> list:
        return [("+", "capacity_total"), f.capacity_total(), ("+", "bytes"), f.size(),
                ("+", "items"), len(f.items)]

    with FakeBFServer(info=other_names) as s:
        s.filters[b"k"] = FakeBloom(100, 0.01, 2)
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as f:
            for call in (lambda: f.add("a"), f.info, f.dump):
                with pytest.raises(lb.ModuleMissingError) as ei:
                    call()
                msg = assert_missing(ei, "BF.INFO", s)
                assert "Capacity" in msg and "Number of items inserted" in msg
            assert f.test("a") is False  # tests need no BF.INFO
            assert f.card() == 0         # nor does BF.CARD


def test_info_without_expansion_rate_compares_what_it_reports():
    def no_expansion(f: FakeBloom) -> list:
        return redisbloom_info(f)[:-2]

    with FakeBFServer(info=no_expansion) as s:
        s.filters[b"k"] = FakeBloom(100, 0.01, 2)
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as f:
            assert f.add("a") is True  # not a mismatch: the expansion is not reported
            assert f.info().expansion is None and f.info().capacity == 100
            assert len(f.dump()) == 1
        with lb.RedisBloomFilter("k", capacity=500, url=s.url) as g:
            with pytest.raises(lb.GeometryMismatchError) as ei:
                g.add("b")  # the capacity still is
            assert "capacity 100" in str(ei.value)
        with lb.RedisBloomFilter("k", capacity=100, non_scaling=True, url=s.url) as h:
            assert h.add("b") is True


def test_card_without_bf_card_nor_the_item_count():
    def no_items(f: FakeBloom) -> list:
        return redisbloom_info(f)[:6] + redisbloom_info(f)[8:]

    with FakeBFServer(missing=("BF.CARD",), info=no_items) as s:
        s.filters[b"k"] = FakeBloom(100, 0.01, 2)
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.card()
            msg = assert_missing(ei, "BF.INFO", s)
            assert "Number of items inserted" in msg and "card()" in msg
    with FakeBFServer(missing=("BF.CARD",)) as s:  # an old module: the count from BF.INFO
        with lb.RedisBloomFilter("k", url=s.url) as f:
            f.update(["a", "b"])
            assert f.card() == 2


@pytest.mark.parametrize("refusal", ["ERR syntax error", "ERR unknown argument received",
                                     "ERR Unknown option NOCREATE"])
def test_insert_without_nocreate(refusal):
    with FakeBFServer(nocreate=False, nocreate_error=refusal) as s:
        with lb.RedisBloomFilter("n", no_create=True, url=s.url) as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.add("a")
            msg = assert_missing(ei, "NOCREATE", s)
            assert "no_create=True" in msg and refusal in msg
        # without a ttl, the first add creates the filter; the next ones send NOCREATE
        with lb.RedisBloomFilter("k", url=s.url) as g:
            assert g.add("a") is True
            with pytest.raises(lb.ModuleMissingError) as ei:
                g.add("b")
            assert "ttl" in assert_missing(ei, "NOCREATE", s)
            assert g.test("a") is True
        # a filter with a ttl never sends it
        with lb.RedisBloomFilter("t", ttl=60, url=s.url) as h:
            assert h.add_many(["a", "b"]) == [True, True]
            assert h.add("c") is True


def test_a_server_with_a_few_bf_commands():
    # BF.EXISTS and BF.MEXISTS, nothing else of what the filter writes with
    with FakeBFServer(missing=("BF.INFO", "BF.INSERT", "BF.RESERVE", "BF.CARD",
                               "BF.SCANDUMP", "BF.LOADCHUNK")) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.add("a")  # nothing BF.* answered yet: the module may be missing
            msg = assert_missing(ei, "BF.INFO", s)
            assert "no RedisBloom module" in msg
            assert f.test_many(["a", "b"]) == [False, False]
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.add("a")  # BF.MEXISTS answered: the module lacks the command
            assert "has BF.* commands but no BF.INFO" in assert_missing(ei, "BF.INFO", s)
        with lb.RedisBloomFilter("k", no_create=True, url=s.url) as g:
            with pytest.raises(lb.ModuleMissingError) as ei:
                g.add("a")
            assert "every add" in assert_missing(ei, "BF.INSERT", s)


def test_the_async_filter_says_the_same(flavor):
    with FakeBFServer(nocreate=False) as s:
        with flavor.RedisBloomFilter.from_url(s.url, "n", no_create=True) as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.add("a")
            assert_missing(ei, "NOCREATE", s)
    with FakeBFServer(info=lambda f: [("+", "cap"), 1]) as s:
        s.filters[b"k"] = FakeBloom(100, 0.01, 2)
        with flavor.RedisBloomFilter.from_url(s.url, "k") as f:
            with pytest.raises(lb.ModuleMissingError) as ei:
                f.add_many(["a", "b"])
            assert_missing(ei, "BF.INFO", s)


def _info_without_counts(f: FakeBloom) -> list:
    """BF.INFO with Capacity and Expansion rate only: no size, filters nor item count."""
    return [("+", "Capacity"), f.capacity_total(), ("+", "Expansion rate"), f.expansion or None]


def test_cli_inspect_says_unknown_for_counts_the_server_does_not_report(capsys):
    from ling_bloom.__main__ import main

    with FakeBFServer(missing=("BF.CARD",), info=_info_without_counts) as s:
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as f:
            f.update(["a", "b"])
        capsys.readouterr()
        assert main(["inspect", s.url, "k"]) == 0
        out = capsys.readouterr().out
        assert "capacity=100 in unknown sub-filter(s)" in out, out
        assert "size not reported" in out and "unknown items added" in out, out


def test_cli_inspect_gives_the_reason_a_bf_server_cannot_read_the_key(capsys):
    from ling_bloom.__main__ import main

    def no_known_field(f: FakeBloom) -> list:
        return [("+", "Volume"), 7]

    with FakeBFServer(info=no_known_field) as s:
        with lb.RedisBloomFilter("k", capacity=100, url=s.url) as f:
            f.add("a")
        capsys.readouterr()
        assert main(["inspect", s.url, "k"]) == 1
        err = capsys.readouterr().err
        # the server's BF.* is there: the message says what it lacks, not "no RedisBloom module"
        assert "no RedisBloom module" not in err, err
        assert "BF.INFO" in err, err


@pytest.mark.parametrize("field,value", [("Capacity", 5), ("Number of items inserted", 0)])
def test_info_naming_a_field_twice_is_a_protocol_error_not_its_last_value(flavor, field, value):
    # A BF.INFO that gives a field twice (no module does) is not read as either value: the
    # last one was taken, and reserve() raised GeometryMismatchError on a filter that
    # matches, info() and the CLI showed a capacity the filter does not have.
    twice = lambda f: redisbloom_info(f) + [("+", field), value]  # noqa: E731
    with FakeBFServer(info=twice) as s:
        with flavor.RedisBloomFilter.from_url(s.url, "k", capacity=100) as f:
            f.add("a")
            for call in (f.info, f.reserve):
                with pytest.raises(lb.RedisProtocolError, match="BF.INFO"):
                    call()
            assert f.test("a") is True  # the connection dropped, the next call works
