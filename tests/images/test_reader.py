"""One ``ImageReader`` interface for ``--via``: the table the command picks from, and the registry adapter."""

from __future__ import annotations

import pytest

from images.conftest import ClientFactory, TestImages
from patchkit.errors import BadInput
from patchkit.images.reader import ImageReader, RegistryReader
from patchkit.ship.operations import read


def test_via_offers_exactly_the_adapters_of_the_table() -> None:
    from patchkit.cli.image import READERS, image_cat, image_files
    from patchkit.sources.image import VIA

    for command in (image_cat, image_files):
        via = next(p for p in command.params if p.name == "via")
        assert list(via.type.choices) == list(READERS) == ["registry", "docker"]  # type: ignore[attr-defined]
        assert via.default == "registry"
    assert VIA == ("registry", "docker")


def test_paths_are_checked_before_a_reader_is_opened() -> None:
    opened: list[str] = []

    def open_reader() -> ImageReader:
        opened.append("opened")
        raise AssertionError("a reader was opened for a path that is not absolute")

    with pytest.raises(BadInput, match=r"etc/os-release: container paths are absolute"):
        read(open_reader, "ubuntu:24.04", ["/etc/hostname", "etc/os-release"])
    assert opened == []


def test_the_registry_reader_reads_a_reference_and_is_closed(oci_image: TestImages, make_client: ClientFactory) -> None:
    client = make_client()
    expected = oci_image.expected("linux/amd64")
    closed: list[bool] = []

    class Counting(RegistryReader):
        def close(self) -> None:
            closed.append(True)
            super().close()

    assert read(lambda: Counting(client), oci_image.multi, list(expected), platform="linux/amd64") == expected
    assert closed == [True]
    # A resolved image is read at its digest, without resolving it again.
    resolved = client.resolve(oci_image.multi, "linux/arm64")
    arm64 = oci_image.expected("linux/arm64")
    assert RegistryReader(client).read_image(resolved, list(arm64), "linux/amd64") == arm64
