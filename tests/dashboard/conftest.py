"""A real browser (Debian's chromium driven by Playwright) against the service on loopback."""
from pathlib import Path

import pytest

from app.auth.tokens import create_user
from app.detection.service import rescan
from bench.history import Step, seed

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
ROCM_ONLY_AT, COMMON_AT = 30, 40


@pytest.fixture(params=["sqlite"])
def database_url(request, sqlite_url):
    # The pages read the same tables on both backends (bench/dashboard.py times both); one
    # backend keeps the browser tests quick.
    return sqlite_url


@pytest.fixture
def history(app, db):
    """48 commits x cuda/rocm/cpu: ROCm alone loses 15 % at commit 30, every platform 8 % at 40;
    the detector then scans it as it would uploaded results."""
    with db.session() as session:
        seeded = seed(session, commits=48, steps=(Step(ROCM_ONLY_AT, ("rocm",), 0.85),
                                                  Step(COMMON_AT, ("cuda", "rocm", "cpu"), 0.92)))
    rescan(db)
    return seeded


@pytest.fixture
def user_token(db):
    with db.session() as session:
        return create_user(session, "ada")


def sign_in(page, base_url: str, token: str, name: str = "ada") -> None:
    page.goto(base_url + "/signin")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#signed-in-as")


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
