"""The test fixtures' own promises (tests/support/redis_server.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from redis_server import _all_threads_stopped, stop_process

BUSY = r"""
import threading
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
spin()
"""


def test_stop_process_returns_once_every_thread_is_stopped():
    # four threads spinning: right after a bare SIGSTOP some of them still read R
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        for _ in range(20):
            stop_process(proc.pid)
            assert _all_threads_stopped(proc.pid)
            assert len(os.listdir(f"/proc/{proc.pid}/task")) >= 4
            os.kill(proc.pid, signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait(30)


def test_the_module_server_answers_bf(bf_server):
    with bf_server.client() as c:
        mods = c.command("MODULE", "LIST")
        names = [m[m.index(b"name") + 1] for m in mods]
        assert b"bf" in names
        assert c.command("BF.ADD", "fixture:probe", "a") == 1
        c.command("DEL", "fixture:probe")


def test_no_folder_of_tests_passes_for_a_module():
    # tests/ off sys.path (tests/conftest.py): otherwise, where redis-py is not installed,
    # `import redis` would find the folder tests/redis as a namespace package, and
    # pytest.importorskip("redis") would run the tests it should skip.
    import importlib.util
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    assert all(Path(p or ".").resolve() != tests for p in sys.path)
    for folder in sorted(p.name for p in tests.iterdir() if p.is_dir() and p.name.isidentifier()):
        spec = importlib.util.find_spec(folder)
        places = [] if spec is None else [*(spec.submodule_search_locations or []), spec.origin]
        assert not any(p and Path(p).resolve().is_relative_to(tests) for p in places), (
            folder, places)
