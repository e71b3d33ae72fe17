"""A verified in-toto statement of the wrong shape is a list of problems, never a crash."""

from __future__ import annotations

import pytest

from patchkit.lockfile.reader import loads
from patchkit.signing.attest import BundleContents, check_statement, dependencies

SHA = "a" * 64


def _contents() -> BundleContents:
    lock = loads('schema = 1\n\n[deployment]\nname = "demo"\n')
    return BundleContents(SHA, {"lockfile.toml": "b" * 64}, lock, "b" * 64)


def _statement(subject: object) -> dict[str, object]:
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "predicateType": "https://slsa.dev/provenance/v1",
        "subject": subject,
        "predicate": {"buildDefinition": {"resolvedDependencies": dependencies(_contents().lock)}},
    }


@pytest.mark.parametrize(
    "subject",
    [
        [{"name": "deploy.tar.gz", "digest": "sha256:" + SHA}],  # a digest that is not an object
        [{"name": "deploy.tar.gz", "digest": None}],
        [{"name": 7, "digest": {"sha256": SHA}}],
        ["deploy.tar.gz"],
        {"name": "deploy.tar.gz"},  # one subject, not a list of them
        7,
    ],
)
def test_a_malformed_subject_is_a_problem(subject: object) -> None:
    problems, _ = check_statement(_statement(subject), _contents())
    assert any(p.startswith("subject without a name and sha256 digest") for p in problems)
    assert any(p.startswith("no subject is this bundle") for p in problems)


def test_a_well_formed_statement_has_no_problem() -> None:
    subject = [
        {"name": "deploy.tar.gz", "digest": {"sha256": SHA}},
        {"name": "lockfile.toml", "digest": {"sha256": "b" * 64}},
    ]
    assert check_statement(_statement(subject), _contents()) == ([], ())
