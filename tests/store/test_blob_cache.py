"""The blob cache: files by sha256, loose or packed, every read checked against the hash it is asked for.

A rebase of many overlays stores its files in one pack; a rebase that stops
reads its merged files back from there on ``--continue``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from conftest import Invoke

from patchkit.core.hashing import Blob
from patchkit.store.cache import PACK_INDEX_HEADER, PACK_MIN, BlobStore
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy, outcomes, rebase_json, upstream  # noqa: F401


def _files(n: int, tag: bytes = b"") -> list[bytes]:
    # Of every kind a cached file may be: empty, CRLF, no final newline, NUL bytes.
    kinds = [b"", b"a\r\nb\r\n", b"no newline", b"\0bin\0"]
    return [kinds[i % len(kinds)] + tag + b"%d\n" % i * (i + 1) for i in range(n)]


def _loose(store: BlobStore) -> list[str]:
    return sorted(p.name for p in store.root.iterdir()) if store.root.exists() else []


def _packs(store: BlobStore) -> list[str]:
    return sorted(p.name for p in store.packs.iterdir()) if store.packs.exists() else []


def test_a_batch_of_many_is_one_pack_every_file_reads_back(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    files = _files(3 * PACK_MIN)
    with store.batch():
        digests = [store.put(f) for f in files]
        # Held in memory until the block ends, and read from there.
        assert store.get(digests[5]) == files[5] and _packs(store) == []
    assert digests == [hashlib.sha256(f).hexdigest() for f in files]
    assert _loose(store) == [] and [Path(p).suffix for p in _packs(store)] == [".idx", ".pack"]
    fresh = BlobStore(tmp_path)  # another process: reads the pack's index from disk
    assert [fresh.get(d) for d in digests] == files


def test_a_small_batch_and_a_single_put_are_loose(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    files = _files(PACK_MIN - 1)
    with store.batch():
        digests = [store.put(f) for f in files]
    assert _loose(store) == sorted(set(digests)) and _packs(store) == []
    one = store.put(Blob(b"one more\n"))
    assert one in _loose(store) and BlobStore(tmp_path).get(one) == b"one more\n"


def test_what_is_cached_is_not_stored_again(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    files = _files(2 * PACK_MIN)
    with store.batch():
        for f in files:
            store.put(f)
    packs = _packs(store)
    again = BlobStore(tmp_path)
    with again.batch():
        for f in files:
            again.put(f)
    # A single put of a packed file names it and stores nothing again.
    assert again.put(files[0]) == hashlib.sha256(files[0]).hexdigest()
    assert _packs(again) == packs and _loose(again) == []
    # Nested batches store once, at the outer end.
    extra = _files(PACK_MIN, b"x")
    with again.batch():
        with again.batch():
            for f in extra:
                again.put(f)
        assert _packs(again) == packs
    assert len(_packs(again)) == len(packs) + 2


def test_a_damaged_pack_entry_is_a_miss_and_the_others_still_read(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    files = _files(2 * PACK_MIN)
    with store.batch():
        digests = [store.put(f) for f in files]
    (pack,) = store.packs.glob("*.pack")
    data = bytearray(pack.read_bytes())
    at = data.index(files[3])
    data[at] ^= 0xFF
    pack.write_bytes(bytes(data))
    fresh = BlobStore(tmp_path)
    assert fresh.get(digests[3]) is None
    assert [fresh.get(d) for i, d in enumerate(digests) if i != 3] == [f for i, f in enumerate(files) if i != 3]
    # A pack cut short: its later entries are misses, not short reads.
    pack.write_bytes(bytes(data[: at - 1]))
    assert BlobStore(tmp_path).get(digests[-1]) is None


def test_a_pack_without_its_index_or_with_a_foreign_index_is_not_read(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    files = _files(PACK_MIN)
    with store.batch():
        digests = [store.put(f) for f in files]
    (idx,) = store.packs.glob("*.idx")
    body = idx.read_bytes()
    idx.unlink()  # as if the writer died between the pack and its index
    assert BlobStore(tmp_path).get(digests[0]) is None
    idx.write_bytes(b"not a pack index\n" + body[len(PACK_INDEX_HEADER) :])
    assert BlobStore(tmp_path).get(digests[0]) is None
    idx.write_bytes(body + b"garbage line\n" + b"f" * 64 + b" x 1\n")
    assert BlobStore(tmp_path).get(digests[0]) == files[0]


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path: Path) -> None:
    (tmp_path / "blobs").write_bytes(b"a file where the cache's directory should be\n")
    store = BlobStore(tmp_path)
    with store.batch():
        digests = [store.put(f) for f in _files(2 * PACK_MIN)]
    assert store.put(b"single\n") == hashlib.sha256(b"single\n").hexdigest()  # named, though not stored
    assert BlobStore(tmp_path).get(digests[0]) is None
    assert BlobStore(tmp_path).get(hashlib.sha256(b"single\n").hexdigest()) is None


def test_a_stopped_rebase_of_many_overlays_continues_from_its_pack(
    invoke: Invoke,
    tmp_path: Path,
    upstream: Upstream,  # noqa: F811
) -> None:
    names = [f"vllm/w{i}.py" for i in range(PACK_MIN)]
    base = {n: WORKER.replace(b"Restorer", b"Restorer%d" % i) for i, n in enumerate(names)}
    c1 = upstream.commit(dict(base))
    loop = b"        for b in blocks:\n"
    ours = {n: b.replace(loop, b"        self.stream.synchronize()\n" + loop) for n, b in base.items()}
    root = make_deploy(invoke, tmp_path, upstream, c1, ours)
    theirs = dict(base)
    theirs[names[0]] = base[names[0]].replace(loop, b"        sync()\n" + loop)
    for n in names[1:]:
        theirs[n] = base[n] + b"\n\ndef later():\n    return 1\n"
    c2 = upstream.commit(dict(theirs))
    code, doc = rebase_json(invoke, root, "--onto", c2)
    assert code == 1 and list(outcomes(doc).values()).count("conflict") == 1
    cache = BlobStore(Path(os.environ["PATCHKIT_CACHE"]))
    assert list(cache.packs.glob("*.pack")), "the rebase stored its files in a pack"
    work = root / doc["work_files"][0]  # type: ignore[index]
    work.write_bytes(ours[names[0]].replace(b"        self.stream", b"        sync()\n        self.stream"))
    done = invoke("rebase", "--continue", repo=root)
    assert done.exit_code == 0, done.stderr
    for n in names[1:]:
        assert (root / "patches" / Path(n).name).read_bytes() == ours[n] + b"\n\ndef later():\n    return 1\n"
    assert invoke("check", repo=root).exit_code == 0
