"""``fanout.map_items``: the serial result, computed on every core when there is enough work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patchkit.core import fanout

# Run in a fresh interpreter: the test process may have threads (servers of other tests), which rule fork out.
SCRIPT = """
import os, sys
from patchkit.core import fanout

def work(x):
    if x == 77:
        raise ValueError("item 77")
    return (x * x, os.getpid())

items = list(range(200))
got = fanout.map_items(work, [i for i in items if i != 77], min_items=8)
assert [v for v, _ in got] == [i * i for i in items if i != 77], got
pids = {pid for _, pid in got}
print(len(pids), os.getpid() in pids)
try:
    fanout.map_items(work, items, min_items=8)
except ValueError as e:
    print("raised", e)
"""


def test_map_items_runs_in_worker_processes_and_keeps_order_and_errors() -> None:
    if fanout.cores() < 2:
        pytest.skip("one core: map_items is the serial loop, covered below")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    # Which worker takes which chunk is up to the pool (one busy core can leave all to the other).
    workers, parent_worked = done.stdout.splitlines()[0].split()
    assert int(workers) >= 1 and parent_worked == "False"
    assert done.stdout.splitlines()[1] == "raised item 77"


def test_map_items_below_the_threshold_runs_in_this_process() -> None:
    import os

    got = fanout.map_items(lambda x: (x + 1, os.getpid()), [1, 2, 3], min_items=64)
    assert got == [(2, os.getpid()), (3, os.getpid()), (4, os.getpid())]
