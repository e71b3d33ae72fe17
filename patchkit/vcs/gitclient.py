"""The one git client: every git command patchkit runs goes through GitPython from here.

Two kinds of repository are read. The upstream caches (``sources/git.py``)
are bare clones, run with an environment that names that directory and
nothing else (``repo_env``). The deployment repository itself is a work tree
the user owns, read with ``git -C ROOT`` for what only git knows: a file as
committed at a revision (``show``), what ``.gitignore`` says (``run`` with
``stdin``).

Objects are read through GitPython's persistent ``git cat-file --batch``
(``read_objects``): one process for any number of names, read as they come.
gitpython itself is imported on first use, so commands that never run git do
not pay for it at start-up.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from patchkit.errors import ExternalFailure

if TYPE_CHECKING:
    import git

# Never prompt for credentials: a prompt would hang a CI job; a failure is reported instead.
NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}


class GitMissing(ExternalFailure):
    """git is not installed (or not on PATH)."""


class GitFailed(ExternalFailure):
    """A git command could not run to its end (it died, or its answers stopped short)."""


def repo_env(git_dir: Path) -> dict[str, str]:
    """Environment that points git at the repository ``git_dir`` and nothing else.

    Run from a git hook (or inside another repository's tooling), the
    environment may carry ``GIT_DIR``, ``GIT_OBJECT_DIRECTORY`` and the like
    for the user's own repository; they would override ``--git-dir`` in part.
    """
    return {
        **NO_PROMPT,
        "GIT_DIR": str(git_dir),
        "GIT_COMMON_DIR": str(git_dir),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
        "GIT_NAMESPACE": "",
        "GIT_NO_REPLACE_OBJECTS": "1",  # an object is what its id names, never a replace ref's stand-in
    }


def _client(cwd: Path, env: Mapping[str, str]) -> git.Git:
    import git

    client = git.Git(str(cwd))
    client.update_environment(**env)
    return client


def run(
    cwd: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] = NO_PROMPT,
    stdin: bytes | None = None,
    timeout: float | None = None,
    strip: bool = True,
) -> tuple[int, bytes, str]:
    """Run ``git ARGS`` in ``cwd``: (status, stdout bytes, stderr text); never raises on a non-zero status.

    ``strip`` drops one final newline of stdout (what a ref or a count ends
    with); file contents need ``strip=False``. ``timeout`` kills git after
    that many seconds, which reads as a failure (status -9). Raises
    ``GitMissing`` when git cannot be started.
    """
    import git

    with _input(stdin) as istream:
        try:
            status, out, err = _client(cwd, env).execute(
                ["git", *args],
                istream=istream,
                with_extended_output=True,
                with_exceptions=False,
                stdout_as_string=False,
                strip_newline_in_stdout=strip,
                kill_after_timeout=timeout,
            )
        except git.GitCommandNotFound as e:
            raise GitMissing("git is not installed (or not on PATH)", "install git") from e
    return status, out, err


class Running:
    """A git command started and not waited for (``start``); ``result`` waits and gives what ``run`` gives.

    Dropped without ``result`` (the caller raised), git is terminated.
    """

    def __init__(self, process: git.Git.AutoInterrupt) -> None:
        self._process = process

    def result(self) -> tuple[int, bytes, str]:
        """(status, stdout bytes, stderr text) once git has ended; its output is read as it comes, never lost."""
        proc = self._process.proc
        if proc is None:
            raise GitFailed("a git command was stopped before its result was read")
        out, err = proc.communicate()
        return proc.returncode, out, err.decode("utf-8", "replace")

    def stop(self) -> None:
        """End git if it still runs (its result no longer wanted) and wait for it: nothing of it outlives this."""
        proc = self._process.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()


def start(cwd: Path, args: Sequence[str], *, env: Mapping[str, str] = NO_PROMPT) -> Running:
    """Start ``git ARGS`` in ``cwd`` without input and go on; ``result()`` waits for it.

    For work that overlaps a long git command (a merge of a thousand files)
    without a thread, so that worker processes may still be forked: git
    writes into pipes, and waits on a full one until ``result`` reads it.
    Raises ``GitMissing`` when git cannot be started.
    """
    import git

    try:
        process = _client(cwd, env).execute(["git", *args], as_process=True)
    except git.GitCommandNotFound as e:
        raise GitMissing("git is not installed (or not on PATH)", "install git") from e
    return Running(process)


@contextlib.contextmanager
def _input(data: bytes | None) -> Iterator[BinaryIO | None]:
    """``data`` as a file git reads its standard input from (None: no input)."""
    if data is None:
        yield None
        return
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        yield f


def write_config(path: Path, values: Mapping[tuple[str, str], str]) -> None:
    """Set ``(section, option) = value`` in the git config file ``path``, as ``git config`` would write it.

    Written to the file by name through gitpython's parser: a ``git.Repo``
    would honour ``GIT_COMMON_DIR`` and the like from the environment.
    Raises ``GitFailed`` (or ``OSError``) when the file cannot be written.
    """
    import git

    try:
        with git.GitConfigParser(str(path), read_only=False) as config:
            for (section, option), value in values.items():
                config.set_value(section, option, value)
    except git.GitError as e:
        raise GitFailed(str(e)) from e


def show(root: Path, rev: str, rel: str, timeout: float = 30) -> bytes | None:
    """The work tree ``root``'s file ``rel`` as committed at ``rev`` (``git show REV:./REL``).

    None when it was not there, when ``root`` is no git work tree, or when
    git is missing or does not answer in ``timeout`` seconds: every caller
    treats "not known to git" as one case.
    """
    if rev.startswith("-"):
        return None
    try:
        status, out, _ = run(root, ["-C", str(root), "show", f"{rev}:./{rel}"], timeout=timeout, strip=False)
    except GitMissing:
        return None
    return out if status == 0 else None


def commit_of(root: Path, rev: str, timeout: float = 30) -> str | None:
    """The commit ``rev`` names in the work tree ``root`` (``git rev-parse --verify REV^{commit}``).

    None when it names no commit there (a typo, a ref of another clone, a
    tree or blob), when ``root`` is no git work tree, or when git does not
    answer in ``timeout`` seconds. An option-like ``rev`` names nothing.
    """
    if not rev or rev.startswith("-"):
        return None
    try:
        status, out, _ = run(
            root,
            ["-C", str(root), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
            timeout=timeout,
        )
    except GitMissing:
        return None
    return out.decode("ascii", "replace") if status == 0 and out else None


def read_objects(git_dir: Path, names: Sequence[str]) -> list[bytes | None]:
    """The blob each object name (``COMMIT:PATH``, a blob id) names in ``git_dir``, in order.

    A name that resolves to nothing, or to a tree or a commit (a directory,
    a submodule), reads as None, and so does a name git would read as
    another (``_sendable``). One ``git cat-file --batch`` serves them all,
    GitPython's persistent one, read as the answers come (which lets a
    caller on another thread work while git inflates the objects). Raises
    ``GitFailed`` when git dies or stops answering part-way, ``GitMissing``
    when it cannot be started.
    """
    if not names:
        return []
    import git

    client = _client(git_dir, repo_env(git_dir))
    results: list[bytes | None] = []
    try:
        for name in names:
            if not _sendable(name):
                results.append(None)
                continue
            try:
                _, kind, size, data = client.get_object_data(name)
            except ValueError as e:  # "<name> missing" (or ambiguous), or no answer at all
                if str(e).startswith(_NO_ANSWER):
                    raise _died(client, git_dir) from None
                results.append(None)
                continue
            if len(data) != size:
                raise _died(client, git_dir)
            results.append(data if kind in (b"blob", "blob") else None)
    except git.GitCommandNotFound as e:
        raise GitMissing("git is not installed (or not on PATH)", "install git") from e
    except BrokenPipeError:  # git exited before it read the names: its own reason says why
        raise _died(client, git_dir) from None
    except (OSError, git.GitError) as e:
        raise GitFailed(f"git cat-file in {git_dir} failed: {e}") from e
    finally:
        client.clear_cache()
    return results


# How gitpython words an empty answer line: git closed its output (it died, or refused the repository).
_NO_ANSWER = "SHA is empty"


def _died(client: git.Git, git_dir: Path) -> GitFailed:
    """The error for a batch process that stopped answering: its last stderr line, else its exit status."""
    auto = client.cat_file_all
    proc = auto.proc if auto is not None else None
    if proc is None:
        return GitFailed(f"git cat-file in {git_dir} failed")
    status = proc.wait()
    lines = proc.stderr.read().decode("utf-8", "replace").split("\n") if proc.stderr is not None else []
    reason = next((line.strip() for line in reversed(lines) if line.strip()), "") or f"exit status {status}"
    return GitFailed(f"git cat-file in {git_dir} failed: {_strip_prefix(reason)}")


def _sendable(name: str) -> bool:
    """Whether ``git cat-file --batch`` reads ``name`` as written.

    git reads one name a line, drops a final CR and ends a name at NUL: a
    name with any of them would be read as another name (or as two, putting
    every later answer against the wrong name).
    """
    return not ("\n" in name or "\r" in name or "\0" in name)


def _strip_prefix(line: str) -> str:
    """git's reason without its ``fatal:``/``error:`` label."""
    for prefix in ("fatal:", "error:"):
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return line
