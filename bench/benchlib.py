"""Helpers shared by the benchmark scripts in ``bench/``.

The scripts run as ``python bench/<script>.py``, so ``bench/`` is on
``sys.path`` and they import this module as ``benchlib``. It holds what both
need alike: the report and progress output (``Out``), failing with a message
and exit status 2 (``fail``), running a command that must succeed
(``run_checked``), finding the ``patchkit`` console script
(``find_patchkit``), the timed runs of one candidate (``Timing``,
``timed``), a subprocess's wall time, CPU time and peak RSS (``Meter``,
``run_measured``, ``run_measured_ok``), the environment that runs patchkit
from compiled bytecode (``cached_env``), the SHA-256 ceiling measured in
each round (``openssl_ceiling``) and the sign that another process held a
core (``held_core``), and the plain ``hashlib.file_digest`` baseline
(``FILE_DIGEST_SCRIPT``).

Every helper that can fail takes ``prog``, the script's name, which prefixes
its error message (``bench_sums: error: ...``).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

# --------------------------------------------------------------------------- output


class Out:
    """Progress and the report go to one stream; progress always goes to stderr."""

    def __init__(self, report: TextIO) -> None:
        self.report = report

    def line(self, text: str = "") -> None:
        print(text, file=self.report, flush=True)

    @staticmethod
    def progress(text: str) -> None:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


def fail(prog: str, message: str) -> NoReturn:
    """Print ``<prog>: error: <message>`` to stderr and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# --------------------------------------------------------------------------- commands


def require_tools(prog: str, tools: Sequence[str]) -> None:
    """Fail (as ``prog``) naming the first of ``tools`` that is not on PATH."""
    for tool in tools:
        if shutil.which(tool) is None:
            fail(prog, f"needs `{tool}` on PATH")


def run_checked(
    prog: str,
    argv: Sequence[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    hint: str = "",
    stdin: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` in ``cwd`` (with ``env``, or this process's environment, and ``stdin``), capturing its output.

    If it exits non-zero, fail (as ``prog``) with the command, its exit status,
    its output and then ``hint``, which is appended as given (start it with a
    newline to put it on a line of its own).
    """
    data = stdin.encode() if stdin is not None else None
    done = subprocess.run(argv, cwd=cwd, input=data, capture_output=True, check=False, env=env)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace").strip()
        fail(prog, f"`{' '.join(argv)}` in {cwd} exited {done.returncode}:\n{output}{hint}")
    return done


def find_patchkit(prog: str) -> str:
    """The console script of this interpreter (not a pyenv/asdf shim, which adds its own start-up)."""
    beside = Path(sys.executable).parent / "patchkit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("patchkit")
    if found is None:
        fail(prog, "no `patchkit` console script; pip install -e '.[test]' first")
    return str(found)


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """The timed runs of one candidate, one row of the report."""

    key: str
    tag: str  # the row letter in the report
    label: str
    seconds: list[float] = field(default_factory=list)
    peaks_kib: list[int] = field(default_factory=list)  # of the timed child process; empty in process
    cpu: list[float] = field(default_factory=list)  # user + system seconds (of the child, or in process)

    def record(self, fn: Callable[[], Cost | object]) -> None:
        """Run ``fn`` once: a ``Cost`` it returns (a measured subprocess) is kept whole, else its wall and CPU time."""
        started, cpu = time.perf_counter(), time.process_time()
        got = fn()
        if isinstance(got, Cost):
            self.seconds.append(got.seconds)
            self.peaks_kib.append(got.peak_kib)
            self.cpu.append(got.cpu)
        else:  # in process: this process's CPU time, every thread included
            self.seconds.append(time.perf_counter() - started)
            self.cpu.append(time.process_time() - cpu)

    @property
    def best_cpu(self) -> float | None:
        """The least CPU time over the timed runs: the work done, whatever else the machine was running."""
        return min(self.cpu) if self.cpu else None

    @property
    def peak_mib(self) -> float | None:
        """The largest peak RSS over the timed runs, in MiB (None for an in-process candidate)."""
        return max(self.peaks_kib) / 1024 if self.peaks_kib else None

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def timed(fn: Callable[[], object]) -> float:
    """Wall time of one call of ``fn``, in seconds."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# --------------------------------------------------------------------------- measured runs


@dataclass(frozen=True)
class Cost:
    """What a step cost: wall seconds, CPU seconds (user + system, children included), peak RSS in KiB."""

    seconds: float
    cpu: float
    peak_kib: int


@dataclass(frozen=True)
class Measured:
    """One subprocess: its cost and what it said."""

    cost: Cost
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Meter:
    """How peak memory is measured: GNU ``/usr/bin/time -f %M`` if there is one, else ``os.wait4``.

    Both report ``ru_maxrss`` (KiB) of the process and the children it waited
    for. Without ``time`` the figure is that of a child forked from this
    benchmark, and Linux keeps the high-water mark a process had before
    ``exec``: every reading is then at least this benchmark's own RSS (``floor_kib``).
    """

    time_bin: str | None
    scratch: Path  # where ``time -o`` writes its figure

    @property
    def method(self) -> str:
        return f"{self.time_bin} -f %M" if self.time_bin else "os.wait4 ru_maxrss (floored at the benchmark's own RSS)"

    @staticmethod
    def find(scratch: Path) -> Meter:
        candidate = "/usr/bin/time"
        if os.access(candidate, os.X_OK):
            done = subprocess.run([candidate, "--version"], capture_output=True, text=True, check=False)
            if "GNU" in done.stdout + done.stderr:
                return Meter(candidate, scratch)
        return Meter(None, scratch)

    @staticmethod
    def floor_kib() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_measured(prog: str, argv: Sequence[str], cwd: Path, env: dict[str, str] | None, meter: Meter) -> Measured:
    """Run ``argv``, measuring its wall time and peak RSS (see ``Meter``).

    Output goes to temporary files, so a chatty process cannot block on a full pipe.
    """
    full = [meter.time_bin, "-f", "%M", "-o", str(meter.scratch), *argv] if meter.time_bin else list(argv)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(full, cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak = usage.ru_maxrss
        if meter.time_bin:
            # "Command exited with non-zero status N" may come first; the figure is the last line.
            lines = meter.scratch.read_text().split()
            if not lines or not lines[-1].isdigit():
                fail(prog, f"{meter.time_bin} wrote no peak RSS for `{argv[0]}`: {' '.join(lines)!r}")
            peak = int(lines[-1])
        out.seek(0)
        err.seek(0)
        cost = Cost(seconds, usage.ru_utime + usage.ru_stime, peak)
        return Measured(cost, proc.returncode, out.read(), err.read())


def cached_env(pycache: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with a bytecode cache of its own, as an installed patchkit runs.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (this sandbox sets it), every
    start would compile every module from source again; ``PYTHONPYCACHEPREFIX``
    alone does not help, because nothing is written there while that variable
    is set. So it is dropped, and the cache goes to ``pycache`` (filled by the
    warm-up run).
    """
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


# --------------------------------------------------------------------------- the SHA-256 ceiling

OPENSSL_BLOCK = 16384


@dataclass(frozen=True)
class Ceiling:
    """One ``openssl speed -multi <cores> -evp sha256`` run: its processes' rates and the CPU they used.

    Each process reports bytes per wall second over ``seconds``, so the rates
    drop when other processes take the cores (rounds of one run gave 1.2 and
    2.4 GB/s on 2 cores). Their bytes over the CPU seconds they used do not:
    that is one core's rate, and ``total`` (cores x that rate) is the
    machine's limit, measured in the round whatever else was running.
    """

    rates: tuple[float, ...]  # bytes/s of wall time, one per process
    seconds: float
    cpu: float  # user + system seconds of all the processes

    @property
    def per_core(self) -> float:
        return sum(self.rates) * self.seconds / self.cpu if self.cpu > 0 else max(self.rates)

    @property
    def total(self) -> float:
        return self.per_core * len(self.rates)

    @property
    def wall_total(self) -> float:
        """What the cores gave OpenSSL in that second: below ``total`` when another process held one."""
        return sum(self.rates)


def parse_openssl_multi(text: str) -> tuple[float, ...]:
    """The per-process rates of ``openssl speed -multi`` (its ``+F:<n>:sha256:<bytes/s>`` lines)."""
    rates = tuple(float(m) for m in re.findall(r"\+F:\d+:sha256:(\d+(?:\.\d+)?)", text))
    if not rates:
        raise ValueError(f"no per-process rate in `openssl speed -multi` output:\n{text[-2000:]}")
    return rates


def openssl_version() -> str | None:
    exe = shutil.which("openssl")
    if exe is None:
        return None
    return subprocess.run([exe, "version"], capture_output=True, text=True, check=False).stdout.strip()


def openssl_ceiling(cores: int, seconds: int = 1) -> Ceiling | None:
    """SHA-256 over ``cores`` processes for ``seconds`` (see ``Ceiling``); None without a usable ``openssl``."""
    exe = shutil.which("openssl")
    if exe is None:
        return None
    argv = [exe, "speed", "-multi", str(cores), "-evp", "sha256"]
    argv += ["-bytes", str(OPENSSL_BLOCK), "-seconds", str(seconds)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        Out.progress(f"`{' '.join(argv)}` exited {done.returncode}; no ceiling")
        return None
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    try:
        return Ceiling(parse_openssl_multi(done.stdout + "\n" + done.stderr), seconds, cpu)
    except ValueError as e:
        Out.progress(str(e))
        return None


def held_core(threads_s: float, one_s: float, cores: int) -> bool:
    """Whether another process held a core during a round: ``cores`` threads were hardly faster than one.

    On an idle machine hashing on N threads takes about 1/N of the time on
    one; a speed-up under 1 + 0.6 (N - 1) (1.6x on 2 cores) means the threads
    did not all get a core. A share of a ceiling measured then would come out
    about halved, and says nothing about patchkit.
    """
    return cores >= 2 and one_s / threads_s < 1 + 0.6 * (cores - 1)


# --------------------------------------------------------------------------- the plain baseline

FILE_DIGEST_SCRIPT = """\
import hashlib, sys
from concurrent.futures import ThreadPoolExecutor
def digest(name):
    with open(name, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
listed = [line.split("  ", 1) for line in open(sys.argv[1], encoding="utf-8").read().splitlines()]
with ThreadPoolExecutor(int(sys.argv[2])) as pool:
    got = list(pool.map(digest, [name for _, name in listed]))
sys.exit(any(g != want for g, (want, _) in zip(got, listed)))
"""
"""The plain baseline: ``hashlib.file_digest`` on N threads over a sha256sum-style list, as a ten-line script.

Run as ``python -c FILE_DIGEST_SCRIPT LIST JOBS`` in the list's directory; exit 1 on a mismatch.
"""


def run_measured_ok(
    prog: str, argv: Sequence[str], cwd: Path, env: dict[str, str] | None, meter: Meter, hint: str = ""
) -> Cost:
    """``run_measured``, failing (as ``prog``) with the command's output when it exits non-zero."""
    m = run_measured(prog, argv, cwd, env, meter)
    if m.returncode != 0:
        text = (m.stdout + m.stderr).decode(errors="replace").strip()
        fail(prog, f"`{' '.join(argv[:6])} ...` in {cwd} exited {m.returncode}:\n{text[-3000:]}{hint}")
    return m.cost
