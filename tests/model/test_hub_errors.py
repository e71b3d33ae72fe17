"""What the Hub's HTTP answers become: the message and hint a user acts on."""

from __future__ import annotations

import pytest

from patchkit.errors import ExternalFailure
from patchkit.net.hub import HfHub

ENDPOINT = "http://127.0.0.1:9"
NO_TOKEN = "no token was sent; the repository is private, gated or does not exist"
HINT = "set HF_TOKEN to a token that can read this repository (huggingface.co/settings/tokens)"


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.mark.parametrize(
    ("token", "status", "message", "hint"),
    [
        (None, 401, f"m: 401 unauthorized from {ENDPOINT} (no token was sent)", HINT),
        ("t", 401, f"m: 401 unauthorized from {ENDPOINT} (the token was refused)", HINT),
        ("t", 403, f"m: 403 forbidden from {ENDPOINT}: the token lacks access", HINT),
        ("t", 500, f"m: the Hub at {ENDPOINT} answered 500", "retry later"),
    ],
)
def test_http_statuses(token: str | None, status: int, message: str, hint: str) -> None:
    error = HfHub(ENDPOINT, token, offline=False)._refused("m", status, HINT)
    assert isinstance(error, ExternalFailure)
    assert (error.message, error.hint) == (message, hint)


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        (
            None,
            401,
            f"m: 401 unauthorized from {ENDPOINT} ({NO_TOKEN})",
        ),
        ("t", 401, f"m: 401 unauthorized from {ENDPOINT} (the token was refused)"),
        (None, None, f"m: no such model repository on {ENDPOINT} (404)"),
        (None, 404, f"m: no such model repository on {ENDPOINT} (404)"),
    ],
)
def test_no_such_repository(token: str | None, status: int | None, message: str) -> None:
    error = HfHub(ENDPOINT, token, offline=False)._no_repository("m", status, HINT)
    assert error.message == message
