"""bump --image without the registry: the image upstream derived from the shipped lockfile, and every refusal."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from patchkit.core.values import ContainerPath
from patchkit.errors import BadInput, Refused
from patchkit.images.errors import RegistryError
from patchkit.images.registry import _tag_list
from patchkit.lockfile.model import ImageUpstream, Lockfile, PatchKind
from patchkit.lockfile.reader import loads
from patchkit.rebase.bumping import (
    Candidate,
    _image_upstream,
    _refuse_unbased,
    adopted_notes,
    candidate_tags,
    derive_upstream,
    series_notes,
)
from patchkit.ship.adopt import adopt, in_image, upstream_from_state, upstream_state
from tests.conftest import REPO_ROOT
from tests.images.conftest import ClientFactory, FakeRegistry, Reply

SHIPPED = loads((REPO_ROOT / "lockfile.toml").read_text())
REPOSITORY = "vllm/vllm-openai-rocm"
PREFIX = "/usr/local/lib/python3.12/dist-packages"
IN_IMAGE = ["kv-restore-fence", "dsv4-indexer-fnuz", "aiter-dsv4-blockscale-gemm"]


def test_the_shipped_lockfile_derives_the_image_upstream_of_its_nightly() -> None:
    up, derived = _image_upstream(SHIPPED, REPOSITORY, None)
    vllm = next(i for i in SHIPPED.images if i.name == "vllm")
    assert derived and up.name == "vllm-image" and up.image == REPOSITORY
    assert (str(up.prefix), up.image_digest, up.version) == (PREFIX, vllm.digest, vllm.version)
    assert in_image(SHIPPED, up) == (IN_IMAGE, [])
    work = adopt(SHIPPED, up)
    assert work.upstream("vllm-image") == up
    bases = {p.name: p.base.upstream for p in work.patches if p.base is not None}
    assert bases == dict.fromkeys(IN_IMAGE, "vllm-image")
    assert adopt(work, up) == work  # once adopted, nothing more moves
    assert upstream_from_state(json.loads(json.dumps(upstream_state(up)))) == up


def test_a_registered_image_upstream_is_used_and_adopts_the_wheel_based_overlays() -> None:
    registered = ImageUpstream(
        name="nightly", image=REPOSITORY, image_digest=SHIPPED.images[1].digest, prefix=ContainerPath(PREFIX)
    )
    lock = replace(SHIPPED, upstreams=(*SHIPPED.upstreams, registered))
    assert _image_upstream(lock, REPOSITORY, None) == (registered, False)
    assert _image_upstream(lock, REPOSITORY, "nightly") == (registered, False)
    bases = {p.name: p.base.upstream for p in adopt(lock, registered).patches if p.base is not None}
    assert bases == dict.fromkeys(IN_IMAGE, "nightly")


def _without_images(lock: Lockfile) -> Lockfile:
    return replace(lock, images=tuple(i for i in lock.images if i.repository != REPOSITORY))


def _unbased(lock: Lockfile) -> Lockfile:
    return replace(lock, patches=tuple(replace(p, base=None) for p in lock.patches))


def _two_prefixes(lock: Lockfile) -> Lockfile:
    def moved(p: Any) -> Any:
        if p.name != "kv-restore-fence":
            return p
        return replace(p, target=ContainerPath(str(p.target).replace("/usr/local/lib/", "/opt/venv/lib/")))

    return replace(lock, patches=tuple(moved(p) for p in lock.patches))


@pytest.mark.parametrize(
    ("change", "message", "hint"),
    [
        (_without_images, "no image of vllm/vllm-openai-rocm is pinned", "patchkit image pin NAME"),
        (_unbased, "no overlay says where its upstream tree is", "patchkit upstream add vllm-image --image"),
        (_two_prefixes, "installed under several directories (/opt/venv/", "--prefix DIR"),
    ],
)
def test_an_image_upstream_that_cannot_be_derived_is_refused_with_the_fix(change: Any, message: str, hint: str) -> None:
    with pytest.raises(BadInput) as e:
        derive_upstream(change(SHIPPED), REPOSITORY)
    assert message in e.value.message and hint in (e.value.hint or "")


@pytest.mark.parametrize(
    ("name", "what"), [("aiter", "a wheel upstream, not an image"), ("nope", "not in the lockfile")]
)
def test_upstream_naming_no_image_upstream_is_refused(name: str, what: str) -> None:
    with pytest.raises(BadInput) as e:
        _image_upstream(SHIPPED, REPOSITORY, name)
    assert f"--upstream {name}: {what} (image upstreams: none)" == e.value.message
    assert "leave --upstream out" in (e.value.hint or "")


def test_several_image_upstreams_of_one_repository_need_a_name() -> None:
    ups = [ImageUpstream(name=n, image=REPOSITORY, prefix=ContainerPath(PREFIX)) for n in ("a", "b")]
    with pytest.raises(BadInput, match="several image upstreams read vllm/vllm-openai-rocm: a, b"):
        _image_upstream(replace(SHIPPED, upstreams=(*SHIPPED.upstreams, *ups)), REPOSITORY, None)


def test_an_overlay_in_the_image_without_a_base_refuses_the_bump() -> None:
    up = derive_upstream(SHIPPED, REPOSITORY)
    lock = replace(
        SHIPPED,
        patches=tuple(replace(p, base=None) if p.name == "dsv4-indexer-fnuz" else p for p in SHIPPED.patches),
    )
    assert in_image(lock, up) == (["kv-restore-fence", "aiter-dsv4-blockscale-gemm"], ["dsv4-indexer-fnuz"])
    with pytest.raises(Refused, match=r"no pinned base .* \(dsv4-indexer-fnuz\); re-pinning it would leave"):
        _refuse_unbased(lock, up)
    _refuse_unbased(SHIPPED, up)  # every overlay has its base: nothing to refuse
    assert all(p.kind is not PatchKind.OVERLAY for p in SHIPPED.patches if p.name not in IN_IMAGE)


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"name": "x"},
        {"name": "x", "image": "r", "image_digest": "sha256:12"},
        {"name": "x", "image": "r", "prefix": "rel"},
    ],
)
def test_a_malformed_saved_image_upstream_is_a_value_error(doc: dict[str, Any]) -> None:
    with pytest.raises((KeyError, ValueError)):
        upstream_from_state(doc)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "is not JSON"),
        (b'{"tags": "nightly"}', "has no list of tags"),
        (b'{"tags": ["ok", "not a tag"]}', "has no list of tags"),
        (b"[]", "has no list of tags"),
    ],
)
def test_a_malformed_tags_list_is_a_registry_error(body: bytes, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        _tag_list(body, "the tags of r")


def test_a_repository_without_tags_lists_none() -> None:
    assert _tag_list(b'{"name": "r", "tags": null}', "the tags of r") == []


class _Tags:
    def tags(self, ref: Any) -> list[str]:
        return ["nightly", "nightly-1", "v0.26.0"]


def test_candidate_tags_given_globbed_or_refused() -> None:
    client: Any = _Tags()
    assert candidate_tags(client, REPOSITORY, (), "nightly*") == ["nightly", "nightly-1"]
    assert candidate_tags(client, REPOSITORY, ("b", "a", "b"), None) == ["b", "a"]
    with pytest.raises(BadInput, match="none matches 'rc-\\*'"):
        candidate_tags(client, REPOSITORY, (), "rc-*")
    with pytest.raises(BadInput, match="not a tag"):
        candidate_tags(client, REPOSITORY, ("a b",), None)


def test_a_candidate_is_clean_only_when_nothing_blocks() -> None:
    assert Candidate("t", outcomes={"a": "clean", "b": "upstreamed"}).clean
    assert not Candidate("t", outcomes={"a": "clean", "b": "broken"}).clean
    assert not Candidate("t", outcomes={"a": "deleted"}).clean
    assert not Candidate("t", error="registry down").clean
    assert "blocked: b (conflict)" in Candidate("t", outcomes={"a": "clean", "b": "conflict"}).line()


def test_series_applied_to_the_image_tree_are_named_with_the_rebase_that_moves_them() -> None:
    from patchkit.core.values import Revision
    from patchkit.lockfile.series import Series

    up = derive_upstream(SHIPPED, REPOSITORY)
    commit = Revision("2359b7ddd05d372409514b275286e2c1f181aafb")
    inside = Series(name="vllm", upstream="vllm", commit=commit, target=ContainerPath(PREFIX))
    elsewhere = Series(name="caddy", upstream="vllm", commit=commit, target=ContainerPath("/srv/caddy"))
    lock = replace(SHIPPED, series=(inside, elsewhere))
    (line,) = series_notes(lock, up, "0.26.1rc1.dev300+g0123abcd9.rocm723")
    assert line.startswith(f"series vllm applies to {PREFIX} in the image at {commit}")
    assert line.endswith("patchkit rebase --series vllm --onto 0123abcd9")
    assert series_notes(SHIPPED, up, None) == []


def test_tags_are_read_across_the_registry_s_pages(
    fake_registry: FakeRegistry, make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """distribution 2.8 sends every tag at once; Docker Hub and distribution 3 page them with a Link header."""
    path = "/v2/pk/paged/tags/list"

    def page(tags: list[str], last: str | None) -> Reply:
        link = {"Link": f'<{path}?n=2&last={last}>; rel="next"'} if last else {}
        return Reply(200, json.dumps({"name": "pk/paged", "tags": tags}).encode(), link)

    pages = [page(["a1", "a2"], "a2"), page(["b1", "b2"], "b2"), page(["c1"], None)]
    fake_registry.route("GET", path, *pages)
    with make_client() as client:
        assert client.tags(f"{fake_registry.host}/pk/paged") == ["a1", "a2", "b1", "b2", "c1"]
    fake_registry.route("GET", path, page(["a1"], "a1"))  # a registry that never stops paging
    monkeypatch.setattr("patchkit.images.registry._MAX_TAG_PAGES", 3)
    with make_client() as client, pytest.raises(RegistryError, match="more than 3 pages"):
        client.tags(f"{fake_registry.host}/pk/paged")


def test_the_bump_says_where_the_bases_it_moves_onto_the_image_were_taken() -> None:
    up = derive_upstream(SHIPPED, REPOSITORY)
    aiter, release = sorted(adopted_notes(SHIPPED, up))
    assert release == (
        "the bases of kv-restore-fence, dsv4-indexer-fnuz were files of upstream 'vllm-release' "
        "(vllm==0.26.0 (adb1e4c9b46d)); the bump bases them on the files at their targets in the new image; "
        "no patch is based on 'vllm-release' any more"
    )
    assert aiter.startswith("the bases of aiter-dsv4-blockscale-gemm were files of upstream 'aiter' (amd-aiter==")
    assert adopted_notes(adopt(SHIPPED, up), up) == []  # once on the image, nothing more to say
