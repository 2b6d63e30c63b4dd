"""The stress workload of tests/filters/test_stress.py, run in a process of its own:

    python tests/support/stress.py KIND SECONDS [URL]

KIND is blocked, memory, counting, scalable (in memory), redis, redis-blocked (RedisFilter,
layout="blocked") or redisbloom (URL: the server of the last three).
For SECONDS, threads share the filters of that type the way a busy, forking web server
does:

  stable   one filter that is never reset or closed.  Adders put batches of new keys in
           (add_many, update, add) and then test them: every key acknowledged must test
           True, here, in copies, and in forked children (no false negative).
  churn    a filter in a box that a closer thread closes and replaces every few
           milliseconds while other threads add big batches to it, test, reset, copy,
           compare it and combine it with the stable one (|=, union, &, ==), read its
           repr and sizes: each call must either work or raise ClosedError.
  forks    a thread forks every few tens of milliseconds, while batches run; the child
           runs a batch of its own on the stable filter and tests keys acknowledged before
           the fork, then exits; a child that has not exited after CHILD_TIMEOUT seconds
           has hung (it is killed and counted).

LING_BLOOM_STRESS_ROLES=adder,churner,closer (say) runs only those threads, to look at one
kind of race at a time.  It prints one JSON line of counts and exits 0 when nothing went wrong: no crash (the
process would die), no hang (faulthandler ends the process with a traceback of every
thread after SECONDS + WATCHDOG seconds), no false negative, no unexpected exception, no
failed or hung child.
"""
from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
import warnings

import ling_bloom as lb

WATCHDOG = 90        # seconds past the run's length: then it hung
CHILD_TIMEOUT = 30   # seconds a forked child may take
REDIS_KINDS = ("redis", "redis-blocked", "redisbloom")
# the kinds whose filters have union/intersection, in memory
SET_KINDS = ("memory", "blocked")


class Run:
    def __init__(self, kind: str, seconds: float, url: str | None) -> None:
        self.kind = kind
        self.layout = "blocked" if kind == "redis-blocked" else None  # RedisFilter's layout=
        self.url = url
        self.deadline = time.monotonic() + seconds
        self.counts = {"operations": 0, "keys": 0, "forks": 0, "closes": 0,
                       "closed_errors": 0, "full_errors": 0}
        self.problems: list[str] = []
        self.acked: list[str] = []  # a sample of keys whose add has returned
        self.seq = 0
        self.stable = self.make_stable()
        self.box = [self.make_churn()]

    # ---- filters -------------------------------------------------------------------

    def key_name(self, what: str) -> str:
        self.seq += 1
        return f"stress:{what}:{os.getpid()}:{self.seq}:{random.getrandbits(32)}"

    def make_stable(self):
        k = self.kind
        if k == "memory":
            return lb.MemoryFilter(4_000_000, 0.01)
        if k == "blocked":
            return lb.BlockedFilter(4_000_000, 0.01)
        if k == "counting":
            return lb.CountingFilter(4_000_000, 0.01)
        if k == "scalable":
            return lb.ScalableFilter(1000, 0.01)
        if k in ("redis", "redis-blocked"):
            return lb.RedisFilter(self.key_name("stable"), 1_000_000, 0.01, url=self.url,
                                  chunk_size=300, layout=self.layout)
        return lb.RedisBloomFilter(self.key_name("stable"), 1_000_000, 0.01, url=self.url,
                                   chunk_size=300)

    def make_churn(self):
        k = self.kind
        if k == "memory":
            return lb.MemoryFilter(m=self.stable.m, k=self.stable.k)
        if k == "blocked":
            return lb.BlockedFilter(m=self.stable.m, k=self.stable.k)
        if k == "counting":
            return lb.CountingFilter(m=self.stable.m, k=self.stable.k)
        if k == "scalable":
            # grows by many small stages: the stage array moves often
            return lb.ScalableFilter(1, 0.01, growth_ratio=1.1)
        if k in ("redis", "redis-blocked"):
            return lb.RedisFilter(self.key_name("churn"), 20_000, 0.01, url=self.url,
                                  chunk_size=200, layout=self.layout)
        # a small non-scaling filter: adds soon raise FilterFullError
        return lb.RedisBloomFilter(self.key_name("churn"), 500, 0.01, non_scaling=True,
                                   url=self.url, chunk_size=200)

    # ---- helpers -------------------------------------------------------------------

    def running(self) -> bool:
        return time.monotonic() < self.deadline and len(self.problems) < 20

    def rounds(self):
        """A thread's rounds: at least one, then while the run lasts.  On a loaded machine
        a thread may first be scheduled after the deadline; it still does its thing once,
        so that operations, forks and closes all happened whatever the machine's speed."""
        yield
        while self.running():
            yield

    def problem(self, what: str) -> None:
        self.problems.append(what)

    def batch_size(self) -> int:
        return 600 if self.kind in REDIS_KINDS else 5000

    def fresh_keys(self, n: int) -> list[str]:
        base = random.getrandbits(60)
        return [f"k{base}:{i}" for i in range(n)]

    def expect_true(self, f, keys, where: str) -> None:
        got = f.test_many(keys)
        if not all(got):
            missing = [k for k, g in zip(keys, got) if not g]
            self.problem(f"false negative in {where}: {len(missing)} keys, e.g. {missing[0]!r}")

    def sample(self, n: int = 64) -> list[str]:
        acked = self.acked
        if not acked:
            return []
        return [acked[random.randrange(len(acked))] for _ in range(n)]

    # ---- the threads -----------------------------------------------------------------

    def adder(self) -> None:
        f = self.stable
        turn = 0
        for _ in self.rounds():
            keys = self.fresh_keys(self.batch_size())
            turn += 1
            if turn % 3 == 0:
                f.update(keys)
            elif turn % 3 == 1:
                f.add_many(keys)
            else:
                f.update(keys[20:])
                for key in keys[:20]:
                    f.add(key)
            self.expect_true(f, keys, "the stable filter")
            for key in keys[:4]:
                if not f.test(key) or key not in f:
                    self.problem(f"false negative (test) in the stable filter: {key!r}")
            self.acked.extend(keys[::max(1, len(keys) // 16)])
            self.counts["operations"] += 3
            self.counts["keys"] += len(keys)

    def reader(self) -> None:
        f = self.stable
        for _ in self.rounds():
            keys = self.sample()
            if keys:
                self.expect_true(f, keys, "the stable filter (reader)")
                for key in keys[:8]:
                    if key not in f:
                        self.problem(f"false negative (in) in the stable filter: {key!r}")
            else:
                time.sleep(0.001)  # pacing: no key written yet, nothing to check
            repr(f)
            if self.kind == "scalable":
                f.capacity, f.nbytes, f.num_sub_filters, f.stages()
            if self.kind == "redisbloom":
                f.card()
            else:
                f.approximate_count()
            self.counts["operations"] += 12 if keys else 3

    def copier(self) -> None:
        f = self.stable
        for _ in self.rounds():
            keys = self.sample()
            if self.kind in ("redis", "redis-blocked"):
                c = f.snapshot()
            elif self.kind == "redisbloom":
                f.card()
                self.counts["operations"] += 1
                time.sleep(0.005)  # pacing: a load generator, the reads are not its subject
                continue
            else:
                c = f.copy()
            if keys:
                self.expect_true(c, keys, "a copy")
            c2 = type(c).from_bytes(c.to_bytes())
            if c2 != c or not (c2 == c):
                self.problem("a copy differs from its own bytes")
            _ = c == f  # f changes meanwhile: any answer, but an answer
            if self.kind in SET_KINDS:
                c |= f
                u = c.union(f)
                i = c & f
                if keys:
                    self.expect_true(c, keys, "a union")
                    self.expect_true(u, keys, "a union")
                    self.expect_true(i, keys, "an intersection")
                u.close()
                i.close()
            c.close()
            c2.close()
            self.counts["operations"] += 8

    def churner(self) -> None:
        for _ in self.rounds():
            b = self.box[0]
            try:
                self.churn_once(b)
            except lb.ClosedError:
                self.counts["closed_errors"] += 1
            except lb.FilterFullError:
                self.counts["full_errors"] += 1
            self.counts["operations"] += 1

    def churn_once(self, b) -> None:
        k = self.kind
        choice = random.randrange(8)
        keys = self.fresh_keys(self.batch_size())
        if choice == 0:
            b.add_many(keys)
        elif choice == 1:
            b.update(keys)
            b.test_many(keys[:50])
        elif choice == 2:
            b.add(keys[0])
            b.test(keys[0])
            _ = keys[1] in b
        elif choice == 3:
            b.reset()
        elif choice == 4:
            repr(b)
            if k == "scalable":
                b.capacity, b.nbytes, b.stages(), b.approximate_count()
            elif k == "redisbloom":
                b.card()
                b.is_reserved
            elif k == "counting":
                b.count(keys[0])
                b.discard(keys[0])
            else:
                b.approximate_count()
        elif choice == 5:
            if k in ("redis", "redis-blocked"):
                b.snapshot().close()
            elif k != "redisbloom":
                c = b.copy()
                _ = c == b
                c.close()
        elif choice == 6:
            if k in SET_KINDS:
                b |= self.stable
                b.union(self.stable).close()
                (b & self.stable).close()
            if k in ("memory", "blocked", "counting", "scalable"):
                _ = b == self.stable
                _ = self.stable == b
        else:
            for key in keys[:30]:
                b.add(key)

    def closer(self) -> None:
        for _ in self.rounds():
            # pacing: a close at a random moment of the other threads' calls
            time.sleep(random.uniform(0.0005, 0.004))
            old = self.box[0]
            self.box[0] = self.make_churn()
            if self.kind in REDIS_KINDS:
                try:
                    old.reset()  # leave no keys behind
                except lb.ClosedError:
                    pass
            old.close()
            self.counts["closes"] += 1

    def forker(self) -> None:
        with warnings.catch_warnings():
            # Python 3.12+: fork() of a process with threads warns; forking such a
            # process is what this test is about.
            warnings.simplefilter("ignore", DeprecationWarning)
            for _ in self.rounds():
                # pacing: a fork at a random moment of the other threads' calls
                time.sleep(random.uniform(0.01, 0.04))
                before = self.sample(128)
                pid = os.fork()
                if pid == 0:
                    os._exit(self.child(before))
                self.counts["forks"] += 1
                self.reap(pid)

    def child(self, before: list[str]) -> int:
        """In the forked child: only this thread exists.  Returns the exit code."""
        try:
            signal.alarm(CHILD_TIMEOUT + 5)  # a last resort if the parent is gone
            f = self.stable
            keys = self.fresh_keys(3000 if self.kind not in REDIS_KINDS else 400)
            f.add_many(keys)  # a batch big enough to release the GIL
            if not all(f.test_many(keys)):
                return 3
            if before and not all(f.test_many(before)):
                return 4
            b = self.box[0]
            try:
                b.add_many(keys)
                b.test(keys[0])
                b.close()
            except (lb.ClosedError, lb.FilterFullError):
                pass
            return 0
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            return 2

    def reap(self, pid: int) -> None:
        end = time.monotonic() + CHILD_TIMEOUT
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.problem(f"a forked child hung for {CHILD_TIMEOUT} s")
                return
            time.sleep(0.005)  # a poll with a deadline (CHILD_TIMEOUT)
        if os.WIFSIGNALED(status):
            self.problem(f"a forked child died of signal {os.WTERMSIG(status)}")
        elif os.WEXITSTATUS(status) != 0:
            self.problem(f"a forked child failed (exit {os.WEXITSTATUS(status)})")

    # ---- all of it -----------------------------------------------------------------

    def run(self) -> int:
        roles = [self.adder, self.adder, self.reader, self.copier, self.churner,
                 self.churner, self.closer, self.forker]
        only = os.environ.get("LING_BLOOM_STRESS_ROLES")  # e.g. "adder,reader": one bug at a time
        if only:
            roles = [r for r in roles if r.__name__ in only.split(",")]
        threads = [threading.Thread(target=self.guard(r), name=r.__name__) for r in roles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            if self.kind in REDIS_KINDS:
                self.stable.reset()
                self.box[0].reset()
            self.stable.close()
            self.box[0].close()
        except lb.BloomError as e:
            self.problem(f"cleaning up: {e!r}")
        self.counts["problems"] = self.problems
        print(json.dumps(self.counts), flush=True)
        return 1 if self.problems else 0

    def guard(self, fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001
                self.problem(f"{fn.__name__}: {type(e).__name__}: {e}")
                traceback.print_exc()
        return run


def main() -> int:
    kind = sys.argv[1]
    seconds = float(sys.argv[2])
    url = sys.argv[3] if len(sys.argv) > 3 else None
    faulthandler.enable()  # a crash prints where every thread was
    faulthandler.dump_traceback_later(seconds + WATCHDOG, exit=True)
    sys.setswitchinterval(1e-4)  # switch threads often: more interleavings
    return Run(kind, seconds, url).run()


if __name__ == "__main__":
    sys.exit(main())
