"""The command line: `python -m ling_bloom` (or `ling-bloom`).

Commands:
  demo                the filters and the guard at work
  estimate N P        m, k and memory for N keys at false-positive rate P (exit 2, with
                      the reason on stderr, when no filter can be that large)
  fpr [options]       a false-positive-rate experiment as a table (and a plot)
  inspect FILE        what a saved filter holds
  inspect URL KEY     what the filter at KEY on a Redis server holds
  build KEYS OUT      a filter of the keys in KEYS (one a line, - for stdin), saved to OUT
  test FILE [KEY...]  test keys (or stdin's lines) against a saved filter: exit 0 when every
                      key tests present, 3 when one or more are absent

Exit codes: 0 success, 1 the command failed (unreadable or invalid file, matplotlib
missing, ...), 2 bad usage (unknown command or option, a value out of range), 3 (test) a
key tested absent.  Errors are
one line on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import ling_bloom as lb

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_ABSENT = 0, 1, 2, 3

HASHES = ("xxh3-mix", "xxh3", "ling-base")


def _number(text: str) -> Union[int, float]:
    """A number as the API takes one: an int ("1000000", "1_000_000", "1,000,000") or a
    float ("1e6", "0.01"); ValueError for anything else."""
    plain = text.strip().replace(",", "")
    try:
        return int(plain)
    except ValueError:
        return float(plain)


def _positive_int(text: str) -> int:
    """A count: a whole number of at least 1, written as an int or as a float that is one
    ("1e6"), as the filters take capacity=1e6."""
    try:
        v = _number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if isinstance(v, float):
        if not (math.isfinite(v) and v == math.floor(v)):
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
        v = int(v)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def _api_number(what: str) -> Callable[[str], Union[int, float]]:
    """estimate's N and P: any number, handed to lb.estimate, which says what it refuses."""
    def parse(text: str) -> Union[int, float]:
        try:
            return _number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
    parse.__name__ = what  # argparse names the type in its messages
    return parse


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {v}")
    return v


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0.0 < v < 1.0):
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), not {text}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return v


def _checkpoints(text: str) -> Union[int, List[int]]:
    """"10" (ten checkpoints) or "1000,5000,20000" (the key counts to measure at)."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("empty checkpoint list")
    try:
        values = [_positive_int(p.strip()) for p in parts]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"checkpoints: {exc}") from None
    if len(text.split(",")) == 1:
        return values[0]
    return values


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(n=args.n, error_rate=args.error_rate)


def cmd_estimate(args: argparse.Namespace) -> int:
    try:  # the API's rules and words: 1e6 is 1,000,000; 1.5, 0 or p = 1 are refused
        p = lb.estimate(args.n, args.p)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    n = int(args.n)  # a whole number: estimate took it
    print(f"n = {n:,}  p = {args.p}")
    print(f"m = {p.m:,} bits  k = {p.k}")
    print(f"memory: {_human_bytes(p.nbytes)} (bit array), {_human_bytes((p.m + 1) // 2)} "
          f"(counting filter)")
    print(f"theoretical rate at n: {lb.false_positive_rate(p.m, p.k, n):.6g}")
    # estimate() is the bare arithmetic; the filters refuse what they cannot have.
    if p.m > lb.MAX_BITS:
        print(f"error: m = {p.m:,} bits exceeds the limit of every filter type "
              f"(2**48 = {lb.MAX_BITS:,} bits, {_human_bytes(lb.MAX_BITS // 8)} of bits): "
              f"no filter can be built for these N and P", file=sys.stderr)
        return EXIT_USAGE
    if p.k > lb.MAX_K:
        print(f"error: k = {p.k} hash functions exceeds the limit of {lb.MAX_K}: "
              f"no filter can be built for this P", file=sys.stderr)
        return EXIT_USAGE
    return 0


REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://",
                 "redis+cluster://", "rediss+cluster://")


def _ttl_text(seconds: Optional[float]) -> str:
    return "none (the key does not expire)" if seconds is None else f"{seconds:.3f} s left"


def _inspect_redis(url: str, key: str) -> int:
    """Which filter is at key, and what it holds (each figure a round trip)."""
    try:
        rf = lb.RedisFilter.open(url, key)
    except lb.FilterNotFoundError:
        rf = None  # no RedisFilter meta key: a RedisBloom filter, or nothing
    if rf is not None:
        with rf:
            bits = rf.bits_set()
            if rf.shards > 1:
                blocked = " (blocked layout)" if rf.layout == "blocked" else ""
                print(f"{key} at {url}: RedisFilter in {rf.shards} shards{blocked}, "
                      f"hash={rf.hash}")
                print(f"  m={rf.m:,} in all, k={rf.k}, {rf.nparts} Redis string(s), "
                      f"{_human_bytes(rf.nbytes)}")
            else:
                blocked = " (blocked layout: BlockedFilter's bytes)" if rf.layout == "blocked" \
                    else ""
                print(f"{key} at {url}: RedisFilter (a bitmap){blocked}, hash={rf.hash}")
                print(f"  m={rf.m:,} k={rf.k} in {rf.nparts} part(s), "
                      f"{_human_bytes(rf.nbytes)}")
            count = rf.approximate_count()
            if rf.layout == "blocked":  # its rate depends on each block, not on the bit count
                rate = (f"expected rate at that count "
                        f"{lb.BlockedFilter.ideal_false_positive_rate(rf.m, rf.k, count):.6g}")
            else:
                rate = f"current rate {rf.current_error_rate():.6g}"
            print(f"  {bits:,} bits set, fill {bits / rf.m:.4f}, about {count:,} keys, {rate}")
            if rf.shards == 1:
                print(f"  ttl: {_ttl_text(rf.remaining_ttl())}")
        return EXIT_OK
    with lb.RedisBloomFilter(key, no_create=True, url=url) as bf:
        missing = (f"error: no filter at key {key!r} on {url} (neither a RedisFilter nor a "
                   f"RedisBloom filter; the key does not exist)")
        try:
            info = bf.info()
        except lb.FilterNotFoundError:
            print(missing, file=sys.stderr)
            return EXIT_FAILURE
        except lb.ModuleMissingError as e:
            # No BF.* here, or not the command or BF.INFO field this needs: the key is
            # missing, or holds something else, or the server's BF.* is not RedisBloom's.
            if not bf._exists():
                print(missing, file=sys.stderr)
            else:
                print(f"error: the key {key!r} on {url} holds no RedisFilter, and it cannot "
                      f"be read as a RedisBloom filter: {e}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"{key} at {url}: RedisBloomFilter (the RedisBloom module's BF.*)")
        expansion = ("non-scaling" if info.expansion is None
                     else f"expansion {info.expansion}")
        print(f"  capacity={_count_text(info.capacity)} in {_count_text(info.filters)} "
              f"sub-filter(s), {expansion}, "
              f"{'size not reported' if info.size is None else _human_bytes(info.size)}")
        print(f"  {_count_text(info.items)} items added (BF.CARD)")
        print(f"  ttl: {_ttl_text(bf.remaining_ttl())}")
    return EXIT_OK


def _count_text(n: Optional[int]) -> str:
    """A count of BF.INFO's, or what a server that does not report it gets."""
    return "unknown" if n is None else f"{n:,}"


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.file.startswith(REDIS_SCHEMES):
        if args.key is None:
            raise UsageError("inspect URL KEY: give the key of the filter")
        return _inspect_redis(args.file, args.key)
    if args.key is not None:
        raise UsageError("inspect FILE takes no KEY (a KEY goes with a redis:// URL)")
    f = lb.load(args.file)
    name = type(f).__name__
    print(f"{args.file}: {name}, hash={f.hash}")
    if isinstance(f, lb.ScalableFilter):
        print(f"  error_rate={f.error_rate} initial_capacity={f.initial_capacity:,} "
              f"growth_ratio={f.growth_ratio} fpr_ratio={f.fpr_ratio}")
        print(f"  {f.num_sub_filters} stages, {f.approximate_count():,} keys, "
              f"{_human_bytes(f.nbytes)}, current rate {f.current_error_rate():.6g}")
        for i, s in enumerate(f.stages()):
            print(f"  stage {i}: capacity {s['capacity']:,} count {s['count']:,} "
                  f"m {s['m']:,} k {s['k']} rate {s['error_rate']:.3g}")
    else:
        print(f"  m={f.m:,} k={f.k} capacity={f.capacity} error_rate={f.error_rate}")
        print(f"  {_human_bytes(f.nbytes)}, fill {f.fill_ratio():.4f}, about "
              f"{f.approximate_count():,} keys, current rate {f.current_error_rate():.6g}")
    _inspect_add_log(args.file, f)
    return 0


def _inspect_add_log(path: str, f: Any) -> None:
    """A file the workers serve (FileFilter) is the file plus its add log, FILE.adds: the
    keys added since the file was published.  Says how many, and the numbers of the
    filter with them (what the workers answer from)."""
    from ._addlog import HEADER, parse

    log_path = path + ".adds"
    try:
        with open(log_path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return
    except OSError as e:
        print(f"  add log {log_path}: cannot be read ({e.strerror or e})")
        return
    nl = data.find(b"\n")
    if not data.startswith(HEADER) or nl < 0:
        print(f"  add log {log_path}: not a ling_bloom add log")
        return
    keys, _, sealed = parse(data[nl + 1:])
    keys = list(dict.fromkeys(keys))
    if sealed:  # a publish replaced it: its keys are in the file already
        print(f"  add log {log_path}: sealed ({len(keys):,} keys, all in the file)")
        return
    new = [k for k in keys if not f.test(k)] if keys else []
    print(f"  add log {log_path}: {len(keys):,} keys logged since the file was published "
          f"({len(new):,} not in the file)")
    if not new:
        return
    f.update(new)
    if isinstance(f, lb.ScalableFilter):
        print(f"  with them: {f.num_sub_filters} stages, {f.approximate_count():,} keys, "
              f"current rate {f.current_error_rate():.6g}")
    else:
        print(f"  with them: fill {f.fill_ratio():.4f}, about {f.approximate_count():,} keys, "
              f"current rate {f.current_error_rate():.6g}")


class UsageError(Exception):
    """Arguments that parse but do not go together: exit 2."""


def _lines(path: str) -> "Iterator[bytes]":
    """The lines of path (- for stdin) as bytes keys, without their line ending; empty
    lines are skipped (an empty key is not a key).  Bytes, so a key is hashed as the
    bytes in the file: the same as the str key for UTF-8 text."""
    f = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for line in f:
            key = line.rstrip(b"\r\n")
            if key:
                yield key
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def cmd_build(args: argparse.Namespace) -> int:
    _no_hash_for_blocked(args)
    capacity = args.capacity
    sized_here = capacity is None
    if sized_here:
        # Size for the keys there are: read them first (stdin is kept in memory).  Every
        # key read fits, so no warning: len(f) is an estimate, above the count about half
        # the time.
        keys = list(_lines(args.keys))
        capacity = max(1, len(keys))
        chunks: "Iterable[List[bytes]]" = [keys]
    else:
        chunks = _chunks(_lines(args.keys), 65536)
    f: "lb.MemoryFilter | lb.BlockedFilter | lb.CountingFilter | lb.ScalableFilter"
    if args.type == "blocked":
        f = lb.BlockedFilter(capacity, args.error_rate)
    elif args.type == "scalable":
        f = lb.ScalableFilter(capacity, args.error_rate, hash=args.hash or "xxh3-mix")
    else:
        cls = lb.CountingFilter if args.type == "counting" else lb.MemoryFilter
        f = cls(capacity, args.error_rate, hash=args.hash or "xxh3-mix")
    read = new = 0
    for chunk in chunks:
        read += len(chunk)
        if sized_here or args.type == "scalable":
            f.update(chunk)
        else:
            # The keys that found a bit clear: each is distinct from every key before it,
            # so this is a lower bound of the distinct keys (not the count: a key whose
            # bits were all set already is not in it; past capacity, more and more are).
            new += sum(f.add_many(chunk))
    f.save(args.out)
    over = not sized_here and args.type != "scalable" and new > capacity
    rate = f.current_error_rate()
    # Over capacity, the estimate from the fill says little (a saturated filter's is
    # about its number of bits); the lower bound is what is known.
    distinct = f"at least {new:,} distinct" if over else f"about {len(f):,} distinct"
    print(f"{args.out}: {type(f).__name__} of {read:,} keys read ({distinct}), "
          f"{_human_bytes(f.nbytes)}, current rate {rate:.6g}")
    if over:
        why = (f"the filter is saturated (current rate {rate:.3g}, not {args.error_rate}: "
               f"most keys never added test present), so the keys it counted as new are a "
               f"lower bound" if rate >= 0.5 else
               f"its false-positive rate is about {rate:.3g}, above {args.error_rate}"
               if rate > args.error_rate else
               # a small filter's size rounds up (a blocked filter's to whole 64-byte
               # blocks): past its capacity its rate can still be within the promise
               f"its false-positive rate, about {rate:.3g}, is still within "
               f"{args.error_rate} (its size rounds up) but rises past it as keys are added")
        print(f"warning: at least {new:,} distinct keys (of {read:,} read) in a filter sized "
              f"for {capacity:,}: {why}; build without --capacity to size it for the keys "
              f"read", file=sys.stderr)
    return EXIT_OK


def _chunks(items: "Iterable[bytes]", size: int) -> "Iterator[List[bytes]]":
    chunk: List[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def cmd_test(args: argparse.Namespace) -> int:
    f = lb.load(args.file)
    keys = [os.fsencode(k) for k in args.key] \
        if args.key else _lines("-")
    absent = 0
    out = []
    for key, present in zip_results(f, keys):
        absent += not present
        if not args.quiet:
            out.append(("present\t" if present else "absent\t").encode() + key + b"\n")
            if len(out) >= 4096:
                sys.stdout.buffer.write(b"".join(out))
                out.clear()
    if out:
        sys.stdout.buffer.write(b"".join(out))
        sys.stdout.flush()
    return EXIT_ABSENT if absent else EXIT_OK


def zip_results(f: "lb.MemoryFilter | lb.BlockedFilter | lb.CountingFilter | lb.ScalableFilter",
                keys: "Iterable[bytes]") -> "Iterator[Tuple[bytes, bool]]":
    """(key, present) for each key, tested in batches of 65,536 (test_many)."""
    batch: List[bytes] = []
    for key in keys:
        batch.append(key)
        if len(batch) == 65536:
            yield from zip(batch, f.test_many(batch))
            batch = []
    if batch:
        yield from zip(batch, f.test_many(batch))


def _no_hash_for_blocked(args: argparse.Namespace) -> None:
    if args.type == "blocked" and args.hash is not None:
        raise UsageError("--hash does not apply to --type blocked: a BlockedFilter has one "
                         "hashing scheme (xxh3-block)")


def cmd_fpr(args: argparse.Namespace) -> int:
    from . import analysis

    kind = args.type
    _no_hash_for_blocked(args)
    if kind == "scalable" and (args.m is not None or args.k is not None):
        raise UsageError("--m/--k size a fixed filter; a scalable filter takes -n and -p")
    if (args.m is None) != (args.k is None):
        raise UsageError("give both --m and --k, or neither")
    if args.m is not None and args.p_given:
        raise UsageError("give -p or --m/--k, not both")
    if args.plot:
        if not args.plot.lower().endswith((".png", ".svg", ".pdf")):
            raise UsageError("--plot FILE must end in .png, .svg or .pdf")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("error: --plot needs matplotlib (pip install 'ling_bloom[plot]')",
                  file=sys.stderr)
            return EXIT_FAILURE
    load = args.load if args.load is not None else (100.0 if kind == "scalable" else 1.0)
    spacing = args.spacing or ("log" if kind == "scalable" else "linear")
    kwargs = {}
    if kind == "scalable":
        kwargs = {"growth_ratio": args.growth_ratio, "fpr_ratio": args.fpr_ratio}
    exp = analysis.run_experiment(
        kind, args.n, None if args.m is not None else args.p,
        keys=args.keys, probe_keys=args.probe_keys, hash=args.hash or "xxh3-mix", m=args.m,
        k=args.k,
        checkpoints=args.checkpoints, spacing=spacing, load=load, probes=args.probes,
        seed=args.seed, **kwargs,
    )
    if args.format == "markdown":
        sys.stdout.write(exp.to_markdown())
    elif args.format == "json":
        json.dump({"experiment": exp.title, "rows": exp.to_dicts()}, sys.stdout, indent=1,
                  default=lambda v: None)
        sys.stdout.write("\n")
    else:
        rows = exp.to_dicts()
        cols = list(rows[0])
        print(",".join(cols))
        for r in rows:
            print(",".join("" if r[c] is None else repr(r[c]) if isinstance(r[c], float)
                           else str(r[c]) for c in cols))
    if args.plot:
        if kind == "scalable":
            ax = analysis.plot_scalable_growth(exp)
        else:
            ax = analysis.plot_fpr(exp, x="load")
        ax.figure.savefig(args.plot, dpi=110)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"error: {message}\n(try: {self.prog} --help)\n")


class _RecordP(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        setattr(namespace, self.dest, values)
        namespace.p_given = True


def _add_demo_command(sub: Any) -> None:
    d = sub.add_parser("demo", help="show the filters at work (start here)",
                       description="Each filter at work, its measured false-positive rate "
                                   "beside the one it promises.")
    d.add_argument("--n", type=_positive_int, default=200_000,
                   help="keys to add (default 200000)")
    d.add_argument("--error-rate", type=_rate, default=0.01,
                   help="target rate (default 0.01)")
    d.set_defaults(func=cmd_demo)


def _add_estimate_command(sub: Any) -> None:
    e = sub.add_parser("estimate", help="m, k and memory for N keys at rate P",
                       description="the ling-base Go library's Estimate: m = ceil(n*-ln p / ln^2 2), "
                                   "k = max(1, ceil(ln 2 * m / n)), and the memory it takes.  "
                                   "Exit 2 when m exceeds 2**48 bits or k exceeds 64, which "
                                   "no filter can have.",
                       epilog="example: python -m ling_bloom estimate 1000000 0.01")
    e.add_argument("n", type=_api_number("n"), metavar="N",
                   help="expected number of keys (1000000, 1_000_000 or 1e6)")
    e.add_argument("p", type=_api_number("p"), metavar="P",
                   help="false-positive rate, in (0, 1)")
    e.set_defaults(func=cmd_estimate)


def _add_fpr_command(sub: Any) -> None:
    f = sub.add_parser(
        "fpr", help="measure a filter's false-positive rate as it fills",
        description="Fill a filter in steps with keys of one shape and test keys that were "
                    "never added at each step: the measured false-positive rate beside the "
                    "theoretical (1 - e^(-kn/m))^k, the fill and the memory.",
        epilog="examples:\n"
               "  python -m ling_bloom fpr -n 1000000 -p 0.001 --keys uuid\n"
               "  python -m ling_bloom fpr --hash ling-base --keys sequential --load 1.5\n"
               "  python -m ling_bloom fpr --type scalable -n 1000 --load 1000 "
               "--plot growth.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--type", choices=("memory", "blocked", "counting", "scalable"),
                   default="memory", help="filter type (default memory; blocked: "
                                          "BlockedFilter, sized by its own rate)")
    f.add_argument("-n", "--n", type=_positive_int, default=100_000,
                   help="capacity the filter is sized for; the initial capacity of a "
                        "scalable filter (default 100000)")
    f.add_argument("-p", "--p", type=_rate, default=0.01, action=_RecordP,
                   help="target false-positive rate (default 0.01)")
    f.add_argument("--m", type=_positive_int, help="bits, with --k: a fixed geometry instead "
                                                   "of -p")
    f.add_argument("--k", type=_positive_int, help="hash functions, with --m")
    f.add_argument("--hash", choices=HASHES,
                   help="hashing scheme (default xxh3-mix; xxh3: the unmixed walk; ling-base: "
                        "the Go library's FNV-1a; not with --type blocked)")
    f.add_argument("--keys", choices=("sequential", "uuid", "url", "random"),
                   default="sequential", help="shape of the added keys (default sequential)")
    f.add_argument("--probe-keys", choices=("sequential", "uuid", "url", "random"),
                   help="shape of the never-added keys tested (default: as --keys)")
    f.add_argument("--load", type=_positive_float,
                   help="how far to fill, as a multiple of n (default 1; 100 for scalable)")
    f.add_argument("--checkpoints", type=_checkpoints, default=10, metavar="N|A,B,...",
                   help="number of measurements, or the key counts to measure at "
                        "(default 10)")
    f.add_argument("--spacing", choices=("linear", "log"),
                   help="how checkpoints are spread (default linear; log for scalable)")
    f.add_argument("--probes", type=_positive_int,
                   help="never-added keys tested at each checkpoint (default: enough for "
                        "about 200 false positives at -p, 20000..1000000)")
    f.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the keys (default 0)")
    f.add_argument("--growth-ratio", type=_positive_float, default=2.0,
                   help="scalable: capacity ratio of successive stages (default 2)")
    f.add_argument("--fpr-ratio", type=_rate, default=0.9,
                   help="scalable: rate ratio of successive stages (default 0.9)")
    f.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown",
                   help="table format on stdout (default markdown)")
    f.add_argument("--plot", metavar="FILE.png",
                   help="also save a plot (needs matplotlib): measured vs theory, or the "
                        "scalable filter's growth")
    f.set_defaults(func=cmd_fpr, p_given=False)


def _add_inspect_command(sub: Any) -> None:
    i = sub.add_parser("inspect", help="what a saved filter (or a Redis filter) holds",
                       description="Type, geometry, fill and current rate of a filter saved "
                                   "with save(), or of the filter at KEY on a Redis server "
                                   "(redis://, rediss:// or unix:// URL): a RedisFilter's "
                                   "geometry, bits set and estimated count, a RedisBloom "
                                   "filter's BF.INFO.",
                       epilog="examples:\n  python -m ling_bloom inspect users.bloom\n"
                              "  python -m ling_bloom inspect redis://localhost:6379/0 users",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("file", metavar="FILE|URL")
    i.add_argument("key", metavar="KEY", nargs="?", help="with a URL: the filter's key")
    i.set_defaults(func=cmd_inspect)


def _add_build_command(sub: Any) -> None:
    b = sub.add_parser(
        "build", help="build a filter from a file of keys and save it",
        description="Read KEYS (one key a line, as bytes without the line ending; empty "
                    "lines skipped; - for stdin), add them to a new filter and save it to "
                    "OUT (atomically).",
        epilog="example: python -m ling_bloom build ids.txt ids.bloom --error-rate 0.001")
    b.add_argument("keys", metavar="KEYS", help="file of keys, one a line (- for stdin)")
    b.add_argument("out", metavar="OUT", help="where to save the filter")
    b.add_argument("--capacity", type=_positive_int,
                   help="keys the filter is sized for (default: the number of keys read; "
                        "the initial capacity of a scalable filter)")
    b.add_argument("--error-rate", type=_rate, default=0.01,
                   help="false-positive rate (default 0.01)")
    b.add_argument("--type", choices=("memory", "blocked", "counting", "scalable"),
                   default="memory",
                   help="filter type (default memory, which RedisFilter.load uploads; "
                        "blocked: BlockedFilter, the fastest)")
    b.add_argument("--hash", choices=HASHES,
                   help="hashing scheme (default xxh3-mix; not with --type blocked)")
    b.set_defaults(func=cmd_build)


def _add_test_command(sub: Any) -> None:
    t = sub.add_parser(
        "test", help="test keys against a saved filter",
        description="Test each KEY (or, without any, each line of stdin) against the filter "
                    "saved in FILE; print 'present' or 'absent', a tab and the key.  Exit 0 "
                    "when every key tests present, 3 when any is absent (never added), 1 "
                    "when the file cannot be read.",
        epilog="example: python -m ling_bloom test ids.bloom 42 43 || echo 'some never added'")
    t.add_argument("file", metavar="FILE")
    t.add_argument("key", metavar="KEY", nargs="*", help="keys to test (default: stdin's lines)")
    t.add_argument("-q", "--quiet", action="store_true", help="print nothing: the exit status")
    t.set_defaults(func=cmd_test)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m ling_bloom",
        description="Bloom filters with a C core: demo, capacity planning, false-positive-rate "
                    "experiments, saved filters.",
        epilog="exit codes: 0 ok, 1 the command failed, 2 bad usage, 3 (test) a key is absent.  "
               "'python -m ling_bloom COMMAND --help' for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_demo_command(sub)
    _add_estimate_command(sub)
    _add_fpr_command(sub)
    _add_inspect_command(sub)
    _add_build_command(sub)
    _add_test_command(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (| head): not an error of ours; silence the final flush.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except (ValueError, TypeError, OSError, ImportError, lb.BloomError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except MemoryError:
        print("error: out of memory", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
