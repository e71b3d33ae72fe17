"""The bundle as an OCI artifact: ``push`` and ``pull``."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.cli.common import FORMAT, INSECURE, Command, registry_client


@click.command(cls=Command)
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("ref", metavar="REGISTRY/REPO[:TAG]")
@INSECURE
@FORMAT
def push(bundle: Path, ref: str, insecure: tuple[str, ...], fmt: str) -> None:
    """Publish BUNDLE (.tar.gz) with its signature (BUNDLE.sig) and attestation as an OCI artifact.

    The signature and attestation are referrers of the bundle (subject), on
    the referrers API or, where the registry lacks it, the referrers tag.
    Prints REPO@DIGEST: what `patchkit pull` takes.
    """
    from patchkit.oci.ref import ImageRef
    from patchkit.ship.artifact import push as run

    target = ImageRef.parse(ref)
    if target.digest is not None:
        from patchkit.errors import BadInput

        raise BadInput(f"{ref}: push to a repository and tag, not a digest")
    with registry_client(insecure) as client:
        pushed = run(client, bundle, target)
    from patchkit.formats import images

    click.echo(images.pushed(pushed, fmt), nl=False)


@click.command(cls=Command)
@click.argument("ref", metavar="REF@DIGEST")
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Directory.")
@click.option("--allowed-signers", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("-I", "--identity", help="Principal the signer must be (default: any allowed signer).")
@INSECURE
def pull(ref: str, out: Path, allowed_signers: Path, identity: str | None, insecure: tuple[str, ...]) -> None:
    """Fetch the bundle REF@DIGEST, its SHA256SUMS, signature and attestation; verify all of it; write them to --out.

    Nothing is written unless every blob matches its digest, every referrer
    names the bundle, the signature is by an allowed signer, and the bundle
    and its attestation verify (as `patchkit verify` checks them).
    """
    from patchkit.oci.ref import ImageRef
    from patchkit.ship.artifact import pull as run

    with registry_client(insecure) as client:
        pulled = run(client, ImageRef.parse(ref), out, allowed_signers, identity)
    for rel in pulled.written:
        click.echo(f"wrote {out / rel}")
    click.echo(f"pull: verified, signed by {pulled.signer}")
    for detail in pulled.details:
        click.echo(f"  {detail}")


COMMANDS: tuple[click.Command, ...] = (push, pull)
