"""python -m ling_bloom: every command, --help, exit codes, errors on stderr without tracebacks."""
import json
import os
import struct
import subprocess
import sys

import pytest

import ling_bloom as lb
from ling_bloom.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, check_rc=None):
    """Run the real command in a child process (what a script sees)."""
    env = dict(os.environ, MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, "-m", "ling_bloom", *args], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stdout, p.stderr)
    return p


def test_no_command_prints_help_and_exits_2():
    p = run(check_rc=2)
    for cmd in ("demo", "estimate", "fpr", "inspect", "build", "test"):
        assert cmd in p.stderr


@pytest.mark.parametrize("cmd", [[], ["demo"], ["estimate"], ["fpr"], ["inspect"], ["build"],
                                 ["test"]])
def test_help_of_every_command(cmd):
    p = run(*cmd, "--help", check_rc=0)
    assert p.stdout.startswith("usage: python -m ling_bloom")
    assert p.stderr == ""


@pytest.mark.slow
def test_demo_runs(capsys):
    assert main(["demo", "--n", "2000"]) == 0
    out = capsys.readouterr().out
    assert "MemoryFilter" in out and "ScalableFilter" in out and "false negatives: 0" in out


def test_estimate_prints_ling_base_numbers(capsys):
    assert main(["estimate", "1000000", "0.01"]) == 0
    out = capsys.readouterr().out
    m, k = lb.estimate(1_000_000, 0.01)
    assert f"m = {m:,} bits  k = {k}" in out
    assert "1.1 MiB (bit array)" in out


def test_estimate_accepts_underscores(capsys):
    assert main(["estimate", "1_000", "0.5"]) == 0
    assert f"m = {lb.estimate(1000, 0.5).m:,}" in capsys.readouterr().out


@pytest.mark.parametrize("text, value", [("1e6", 1e6), ("1E6", 1e6), ("1000000.0", 1e6),
                                         ("2.5e3", 2.5e3), ("1_000_000", 1_000_000),
                                         ("1,000,000", 1_000_000)])
def test_estimate_takes_the_numbers_the_api_takes(capsys, text, value):
    # lb.estimate(1e6, 0.01) is the same as lb.estimate(1_000_000, 0.01): so is the command.
    assert main(["estimate", text, "0.01"]) == 0
    m, k = lb.estimate(value, 0.01)
    assert f"m = {m:,} bits  k = {k}" in capsys.readouterr().out


@pytest.mark.parametrize("n, p", [("1.5", "0.01"), ("0", "0.01"), ("-5", "0.01"),
                                  ("inf", "0.01"), ("nan", "0.01"), ("1e30", "0.01"),
                                  ("100", "0"), ("100", "1"), ("100", "1.5"), ("100", "nan")])
def test_estimate_refuses_what_the_api_refuses_in_its_words(capsys, n, p):
    with pytest.raises((ValueError, TypeError)) as ei:
        lb.estimate(float(n), float(p))
    assert main(["estimate", n, p]) == 2
    err = capsys.readouterr().err
    assert f"error: {ei.value}" in err


@pytest.mark.parametrize("n, p, text", [("ten", "0.01", "n must be a number, not 'ten'"),
                                        ("100", "x", "p must be a number, not 'x'")])
def test_estimate_refuses_text_that_is_no_number(n, p, text):
    assert text in run("estimate", n, p, check_rc=2).stderr


def test_inspect_a_saved_filter(tmp_path, capsys):
    f = lb.CountingFilter(1000, 0.01)
    f.update(["a", "b", "c"])
    path = tmp_path / "f.bloom"
    f.save(str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "CountingFilter" in out and f"m={f.m:,} k={f.k}" in out and "about 3 keys" in out
    s = lb.ScalableFilter(10, 0.01)
    s.update([str(i) for i in range(100)])
    s.save(str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{s.num_sub_filters} stages" in out and "stage 0:" in out


def test_fpr_markdown_table(capsys):
    assert main(["fpr", "-n", "20000", "-p", "0.01", "--keys", "uuid", "--checkpoints", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MemoryFilter n=20,000 p=0.01")
    assert out[2].startswith("| keys added |")
    rows = [ln for ln in out if ln.startswith("| ") and ln[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 5,000", "| 10,000", "| 15,000", "| 20,000"]


def test_fpr_json_is_the_experiment(capsys):
    from ling_bloom import analysis

    assert main(["fpr", "-n", "5000", "--checkpoints", "2", "--format", "json",
                 "--hash", "ling-base", "--seed", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    exp = analysis.run_experiment("memory", 5000, 0.01, hash="ling-base", checkpoints=2, seed=3)
    assert [r["false_positives"] for r in data["rows"]] == [r.false_positives for r in exp]
    assert "hash=ling-base" in data["experiment"]


def test_fpr_csv_and_fixed_geometry(capsys):
    assert main(["fpr", "--type", "counting", "--m", "50000", "--k", "3", "-n", "5000",
                 "--checkpoints", "1000,5000", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(",")[:3] == ["keys_added", "load", "fill"]
    assert [ln.split(",")[0] for ln in lines[1:]] == ["1000", "5000"]


def test_fpr_scalable_with_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "growth.png"
    p = run("fpr", "--type", "scalable", "-n", "200", "--load", "50", "--checkpoints", "8",
            "--plot", str(png), check_rc=0)
    assert "| stages |" in p.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "plot written" in p.stderr


def test_fpr_memory_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "fpr.png"
    run("fpr", "-n", "3000", "--checkpoints", "5", "--load", "2", "--plot", str(png), check_rc=0)
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("args,needle", [
    (["nosuch"], "invalid choice"),
    (["estimate", "100"], "required"),
    (["estimate", "100", "2"], "false-positive rate must be in (0, 1)"),
    (["estimate", "0", "0.1"], "greater than zero"),
    (["estimate", "ten", "0.1"], "n must be a number"),
    (["demo", "--error-rate", "0"], "between 0 and 1"),
    (["fpr", "--type", "bitset"], "invalid choice"),
    (["fpr", "--keys", "guid"], "invalid choice"),
    (["fpr", "--hash", "md5"], "invalid choice"),
    (["fpr", "-p", "1.5"], "between 0 and 1"),
    (["fpr", "--m", "1000"], "both --m and --k"),
    (["fpr", "--m", "1000", "--k", "3", "-p", "0.1"], "-p or --m/--k"),
    (["fpr", "--type", "scalable", "--m", "1000", "--k", "3"], "scalable"),
    (["fpr", "--checkpoints", "10,x"], "checkpoints"),
    (["fpr", "--load", "-1"], "positive"),
    (["fpr", "--plot", "out.txt"], ".png"),
    (["inspect"], "required"),
])
def test_usage_errors_exit_2(args, needle):
    p = run(*args, check_rc=2)
    assert needle in p.stderr
    assert p.stdout == ""


def test_failures_exit_1(tmp_path):
    p = run("inspect", str(tmp_path / "missing.bloom"), check_rc=1)
    assert p.stderr.startswith("error:") and "missing.bloom" in p.stderr
    bad = tmp_path / "bad.bloom"
    bad.write_bytes(b"not a filter at all")
    p = run("inspect", str(bad), check_rc=1)
    assert "not a valid saved filter" in p.stderr
    trunc = tmp_path / "trunc.bloom"
    f = lb.MemoryFilter(1000, 0.01)
    trunc.write_bytes(f.to_bytes()[:40])
    p = run("inspect", str(trunc), check_rc=1)
    assert p.stderr.startswith("error:")
    # a geometry the library refuses is a failure of the command, not usage
    p = run("fpr", "--m", str(2**62), "--k", "3", "-n", "10", check_rc=1)
    assert p.stderr.startswith("error:")


def _sealed(body: bytes) -> bytes:
    xxhash = pytest.importorskip("xxhash")  # to forge the format's checksum
    return body + xxhash.xxh3_64_intdigest(body).to_bytes(8, "little")


@pytest.mark.parametrize("kind, m, k", [(1, 2**40, 3), (2, 2**48, 3), (4, 2**48, 8)])
def test_inspect_of_a_header_claiming_terabytes_is_one_line(tmp_path, kind, m, k):
    # 104 bytes whose header claims m bits (or cells): a one-line error, exit 1, never
    # an attempt to allocate what it claims (MemoryError and a traceback, before).
    path = tmp_path / "claims.bloom"
    header = b"LBLM" + struct.pack("<HBBQIIQd", 1, kind, 2, m, k, 0, 0, 0.0)
    path.write_bytes(_sealed(header + bytes(56)))
    p = run("inspect", str(path), check_rc=1)
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: not a valid saved filter")
    assert "header claims" in p.stderr


def test_fpr_plot_without_matplotlib_exits_1(tmp_path):
    # a child whose import of matplotlib fails
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "matplotlib.py").write_text("raise ImportError('no matplotlib here')\n")
    env = dict(os.environ, PYTHONPATH=f"{shim}{os.pathsep}{ROOT}")
    p = subprocess.run([sys.executable, "-m", "ling_bloom", "fpr", "-n", "100",
                        "--plot", str(tmp_path / "x.png")], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "ling_bloom[plot]" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "x.png").exists()


def test_output_into_a_closed_pipe_is_not_an_error():
    p = subprocess.run(
        f"{sys.executable} -m ling_bloom fpr -n 2000 --checkpoints 2000 --probes 100 | head -1",
        shell=True, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.stdout.startswith("MemoryFilter")
    assert "Traceback" not in p.stderr


# ---- build and test ---------------------------------------------------------------------

def test_build_then_test(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"".join(b"user-%d\n" % i for i in range(5000)) + b"\n\r\nlast\r\n")
    out = tmp_path / "users.bloom"
    p = run("build", str(keys), str(out), "--error-rate", "0.001", check_rc=0)
    assert "MemoryFilter" in p.stdout
    f = lb.load(str(out))
    assert isinstance(f, lb.MemoryFilter) and f.capacity == 5001 and f.error_rate == 0.001
    assert f.test_many(["user-0", "user-4999", "last"]) == [True, True, True]
    p = run("test", str(out), "user-1", "last", check_rc=0)
    assert p.stdout == "present\tuser-1\npresent\tlast\n"
    p = run("test", str(out), "user-1", "never-added-1", check_rc=3)
    assert "absent\tnever-added-1" in p.stdout
    assert run("test", "-q", str(out), "never-added-1", check_rc=3).stdout == ""
    # keys from stdin
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "ling_bloom", "test", str(out)],
                       input=b"user-7\nuser-8\n", capture_output=True, cwd=ROOT, env=env,
                       timeout=300)
    assert p.returncode == 0 and p.stdout == b"present\tuser-7\npresent\tuser-8\n"


def test_build_from_stdin_with_options(tmp_path):
    out = tmp_path / "c.bloom"
    p = subprocess.run([sys.executable, "-m", "ling_bloom", "build", "-", str(out), "--type",
                        "counting", "--capacity", "100", "--hash", "ling-base"],
                       input=b"a\nb\n", capture_output=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    f = lb.load(str(out))
    assert isinstance(f, lb.CountingFilter) and f.hash == "ling-base" and f.capacity == 100
    assert "a" in f and "b" in f
    keys = tmp_path / "k"
    keys.write_text("".join(f"{i}\n" for i in range(1000)))
    assert main(["build", str(keys), str(out), "--type", "scalable", "--capacity", "10"]) == 0
    s = lb.load(str(out))
    assert isinstance(s, lb.ScalableFilter) and s.num_sub_filters > 1
    assert all(s.test_many([str(i) for i in range(1000)]))


def test_build_warns_when_overfilled(tmp_path, capsys):
    keys = tmp_path / "k"
    keys.write_text("".join(f"{i}\n" for i in range(1000)))
    assert main(["build", str(keys), str(tmp_path / "o"), "--capacity", "10"]) == 0
    assert "sized for 10" in capsys.readouterr().err


def test_build_over_capacity_gives_the_distinct_keys_as_a_lower_bound(tmp_path, capsys):
    # 100,000 distinct keys into a filter sized for 1,000: it saturates, and most keys find
    # their bits already set.  The keys counted as new are a lower bound, said as one.
    keys = tmp_path / "k"
    keys.write_text("".join(f"{i}\n" for i in range(100_000)))
    assert main(["build", str(keys), str(tmp_path / "o"), "--capacity", "1000"]) == 0
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("warning: at least ") and "(of 100,000 read)" in err, err
    counted = int(err[len("warning: at least "):].split()[0].replace(",", ""))
    assert 1000 < counted <= 100_000
    assert "sized for 1,000" in err and "saturated" in err and "lower bound" in err
    assert f"(at least {counted:,} distinct)" in cap.out  # not an estimate from the fill
    # Over capacity but not saturated: the rate it has now, no "saturated".
    assert main(["build", str(keys), str(tmp_path / "o"), "--capacity", "50000"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: at least ") and "saturated" not in err
    assert "false-positive rate is about" in err


def test_build_over_capacity_within_the_rate_does_not_say_it_is_above(tmp_path, capsys):
    # 3 keys into a blocked filter sized for 2: one 64-byte block, a rate about 1e-11.  The
    # warning said "about 1.55e-11, above 0.01".
    keys = tmp_path / "k"
    keys.write_text("a\nb\nc\n")
    out = tmp_path / "o"
    assert main(["build", str(keys), str(out), "--type", "blocked", "--capacity", "2"]) == 0
    err = capsys.readouterr().err
    rate = lb.load(str(out)).current_error_rate()
    assert rate < 0.01
    assert "sized for 2" in err and "above" not in err and "still within 0.01" in err, err


def test_build_fpr_and_inspect_a_blocked_filter(tmp_path, capsys):
    keys = tmp_path / "ids.txt"
    keys.write_text("".join(f"id:{i}\n" for i in range(3000)))
    out = tmp_path / "ids.bloom"
    assert main(["build", str(keys), str(out), "--type", "blocked", "--error-rate",
                 "0.001"]) == 0
    assert "BlockedFilter of 3,000 keys read" in capsys.readouterr().out
    f = lb.load(str(out))
    assert isinstance(f, lb.BlockedFilter) and f.capacity == 3000 and f.error_rate == 0.001
    assert all(f.test_many([f"id:{i}" for i in range(3000)]))
    p = run("test", str(out), "id:0", "id:2999", check_rc=0)
    assert p.stdout == "present\tid:0\npresent\tid:2999\n"
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "BlockedFilter, hash=xxh3-block" in text and f"m={f.m:,} k={f.k}" in text
    assert main(["build", str(keys), str(out), "--type", "blocked", "--capacity", "100"]) == 0
    assert "sized for 100" in capsys.readouterr().err
    assert main(["fpr", "--type", "blocked", "-n", "5000", "--checkpoints", "2",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "BlockedFilter" in data["experiment"] and len(data["rows"]) == 2
    for cmd in (["build", str(keys), str(out)], ["fpr"]):
        p = run(*cmd, "--type", "blocked", "--hash", "ling-base", check_rc=2)
        assert "--hash does not apply to --type blocked" in p.stderr


@pytest.mark.parametrize("n", [1, 2, 10, 100, 1000, 5000, 12345])
@pytest.mark.parametrize("rate", ["0.001", "0.01", "0.1"])
def test_build_sized_for_the_keys_it_read_never_warns(tmp_path, capsys, n, rate):
    # The filter it sizes itself holds every key it read: no "over capacity" warning from
    # the estimated count (which lands above n about half the time).
    keys = tmp_path / "ids.txt"
    keys.write_text("".join(f"{i}\n" for i in range(n)) + "0\n1\n")  # and two repeats
    out = tmp_path / "out.bloom"
    assert main(["build", str(keys), str(out), "--error-rate", rate]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    assert f"{n + 2:,} keys read" in cap.out
    f = lb.load(str(out))
    assert f.capacity == n + 2 and all(f.test_many([str(i) for i in range(n)]))
    # Sized by hand for exactly the distinct keys there are: no warning either.
    distinct = max(n, 2)
    assert main(["build", str(keys), str(out), "--error-rate", rate,
                 "--capacity", str(distinct)]) == 0
    assert capsys.readouterr().err == ""
    if n >= 10:  # and a capacity really too small still warns
        assert main(["build", str(keys), str(out), "--capacity", str(n // 2)]) == 0
        assert f"sized for {n // 2:,}" in capsys.readouterr().err


def test_test_failures(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 100)
    p = run("test", str(junk), "a", check_rc=1)
    assert "not a valid saved filter" in p.stderr
    p = run("test", str(tmp_path / "missing"), "a", check_rc=1)
    assert "missing" in p.stderr
    run("build", str(tmp_path / "missing"), str(tmp_path / "o"), check_rc=1)
    run("build", str(junk), str(tmp_path / "o"), "--error-rate", "2", check_rc=2)


# ---- inspect a Redis filter -------------------------------------------------------------

def test_inspect_redis_filters(bf_server):
    url = bf_server.url
    with bf_server.client() as c:
        c.command("DEL", "cli:users", "cli:items", "cli:plain")
        c.command("SET", "cli:plain", "x")
    with lb.RedisFilter.from_url(url, "cli:users", 1000, 0.01) as f:
        f.update(["a", "b", "c"])
    with lb.RedisBloomFilter.from_url(url, "cli:items", 500, 0.01, ttl=600) as b:
        b.update(["x", "y"])
    p = run("inspect", url, "cli:users", check_rc=0)
    assert "RedisFilter" in p.stdout and f"m={f.m:,} k={f.k}" in p.stdout
    assert "about 3 keys" in p.stdout and " bits set" in p.stdout
    assert "ttl: none" in p.stdout
    p = run("inspect", url, "cli:items", check_rc=0)
    assert "RedisBloomFilter" in p.stdout and "capacity=500" in p.stdout
    assert "2 items added" in p.stdout
    assert " s left" in p.stdout
    p = run("inspect", url, "cli:nothing", check_rc=1)
    assert "no filter at key 'cli:nothing'" in p.stderr
    p = run("inspect", url, "cli:plain", check_rc=1)
    assert "WRONGTYPE" in p.stderr or "holds" in p.stderr
    run("inspect", url, check_rc=2)


@pytest.mark.parametrize("with_module", [False, True])
def test_inspect_a_missing_key_says_so(clean_redis, bf_server, with_module):
    srv = bf_server if with_module else clean_redis
    with srv.client() as c:
        c.command("DEL", "cli:gone", "cli:str")
        c.command("SET", "cli:str", "x")
    p = run("inspect", srv.url, "cli:gone", check_rc=1)
    assert "no filter at key 'cli:gone'" in p.stderr and "does not exist" in p.stderr
    assert "has no RedisBloom module" not in p.stderr
    p = run("inspect", srv.url, "cli:str", check_rc=1)
    assert "'cli:str'" in p.stderr and "does not exist" not in p.stderr
    if not with_module:  # a key the module would have to read: say what is missing
        assert "holds" in p.stderr and "no RedisBloom module" in p.stderr
    with srv.client() as c:
        assert c.command("EXISTS", "cli:gone") == 0  # inspect wrote nothing
        assert c.command("KEYS", "*cli:gone*") == [] and c.command("KEYS", "*cli:str?*") == []


def test_inspect_a_blocked_redis_filter(clean_redis, capsys):
    with lb.RedisFilter.from_url(clean_redis.url, "cli:blk", 1000, 0.01, layout="blocked") as f:
        f.update(["a", "b", "c"])
        assert main(["inspect", clean_redis.url, "cli:blk"]) == 0
        expect = lb.BlockedFilter.ideal_false_positive_rate(f.m, f.k, 3)
    out = capsys.readouterr().out
    assert "(blocked layout: BlockedFilter's bytes), hash=xxh3-block" in out
    assert f"m={f.m:,} k={f.k}" in out and "about 3 keys" in out
    assert f"expected rate at that count {expect:.6g}" in out


def test_inspect_a_file_takes_no_key(tmp_path):
    path = tmp_path / "f.bloom"
    lb.MemoryFilter(10).save(str(path))
    run("inspect", str(path), "k", check_rc=2)


def test_inspect_of_a_served_file_counts_its_add_log(tmp_path, capsys):
    # A file the workers serve (FileFilter) holds what the warm-up published; the keys
    # added since are in FILE.adds.  inspect showed the file alone.
    from ling_bloom.warmup import FileFilter, publish

    path = tmp_path / "products.bloom"
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["1", "2", "3"])
    publish(f, str(path))
    served = FileFilter(path, check_every=0)
    served.update(["4", "5", "3"])            # "3" is in the file already
    served.close()
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "about 3 keys" in out                              # the file itself
    assert "3 keys logged" in out and "(2 not in the file)" in out
    assert "with them: " in out and "about 5 keys" in out     # the filter the workers serve
