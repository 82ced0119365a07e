"""Who Parallax is on GitHub: a GitHub App (check runs need one) or a personal token.

App mode (`PARALLAX_GITHUB_APP_ID` + `PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE`): an RS256 JWT signed
with PyJWT proves the app; `POST /app/installations/<id>/access_tokens` turns it into an
installation token (the installation id comes from the repository's webhooks), cached per
process until five minutes before GitHub says it expires. Token mode (`PARALLAX_GITHUB_TOKEN`):
the token itself; commit statuses and comments work, check runs do not.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import jwt
import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.config import ConfigError, Settings
from app.core.models import GitHubInstallation, Repository

REFRESH_BEFORE_S = 300.0   # a cached installation token is renewed this long before it expires
JWT_LIFETIME_S = 540       # GitHub accepts at most 10 minutes
API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
               "User-Agent": "parallax-ci"}


class MissingInstallation(RuntimeError):
    """App mode, but no webhook of this repository has named its installation yet."""


@dataclass(frozen=True)
class CachedToken:
    token: str
    expires_at: float  # time.time()


_tokens: dict[tuple[str, str, int], CachedToken] = {}
_lock = threading.Lock()


def app_mode(settings: Settings) -> bool:
    return bool(settings.github_app_id and settings.github_app_private_key_file)


def enabled(settings: Settings) -> bool:
    return app_mode(settings) or bool(settings.github_token)


def app_jwt(settings: Settings, now: float | None = None) -> str:
    """The app's own credential: RS256 over {iat, exp, iss}, iat a minute back for clock skew."""
    assert settings.github_app_private_key_file and settings.github_app_id
    path = Path(settings.github_app_private_key_file)
    try:
        key = path.read_text()
    except OSError as exc:
        raise ConfigError(f"PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE: cannot read {path}: {exc}") from exc
    now = time.time() if now is None else now
    payload = {"iat": int(now) - 60, "exp": int(now) + JWT_LIFETIME_S, "iss": str(settings.github_app_id)}
    try:
        return jwt.encode(payload, key, algorithm="RS256")
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE: {path} is not an RSA private key in PEM: {exc}") from exc


def installation_token(settings: Settings, installation_id: int, *, http: requests.Session,
                       timeout: tuple[float, float]) -> str:
    key = (settings.github_api_url, str(settings.github_app_id), installation_id)
    with _lock:
        cached = _tokens.get(key)
    if cached is not None and cached.expires_at - REFRESH_BEFORE_S > time.time():
        return cached.token
    response = http.post(f"{settings.github_api_url}/app/installations/{installation_id}/access_tokens",
                         headers={**API_HEADERS, "Authorization": f"Bearer {app_jwt(settings)}"}, timeout=timeout)
    if response.status_code != 201:
        raise requests.HTTPError(f"installation token for {installation_id}: HTTP {response.status_code}: "
                                 f"{response.text[:300]}", response=response)
    body = response.json()
    expires = datetime.fromisoformat(str(body["expires_at"]).replace("Z", "+00:00")).timestamp()
    with _lock:
        _tokens[key] = CachedToken(str(body["token"]), expires)
    return str(body["token"])


def installation_for(session: Session, repository_id: int) -> int | None:
    return session.scalar(select(GitHubInstallation.installation_id)
                          .where(GitHubInstallation.repository_id == repository_id))


def remember_installation(session: Session, repository: Repository, installation_id: object) -> None:
    """Keep the installation a webhook named for its repository (App mode needs it to write)."""
    if not isinstance(installation_id, int) or isinstance(installation_id, bool) or installation_id <= 0:
        return
    row = session.get(GitHubInstallation, repository.id)
    if row is None:
        session.add(GitHubInstallation(repository_id=repository.id, installation_id=installation_id))
    elif row.installation_id != installation_id:
        row.installation_id, row.updated_at = installation_id, utcnow()


def headers(settings: Settings, installation_id: int | None, *, http: requests.Session,
            timeout: tuple[float, float]) -> dict[str, str]:
    """Request headers for a write to one repository."""
    if app_mode(settings):
        if installation_id is None:
            raise MissingInstallation("GitHub App mode, but no webhook has named this repository's installation yet")
        token = installation_token(settings, installation_id, http=http, timeout=timeout)
    else:
        token = settings.github_token or ""
    return {**API_HEADERS, "Authorization": f"Bearer {token}"}
