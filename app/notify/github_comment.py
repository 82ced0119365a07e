"""The one place notifications call GitHub's API (the personal-token mode of
`PARALLAX_GITHUB_TOKEN`; a GitHub App installation token can replace `_headers` later), and
the comment on the pull request that merged a culprit commit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from app.core.config import Settings

TIMEOUT = (5.0, 10.0)


@dataclass(frozen=True)
class Answer:
    """What GitHub said: `ok`, or a status and text for the outbox's retry decision."""

    status: int
    text: str
    data: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.github_token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "parallax-ci"}


def github_call(settings: Settings, method: str, path: str, body: Any = None,
                http: requests.Session | None = None) -> Answer:
    """`method` `{github_api_url}{path}`; network errors propagate (the outbox retries them)."""
    response = (http or requests).request(method, f"{settings.github_api_url}{path}", json=body,
                                          headers=_headers(settings), timeout=TIMEOUT)
    try:
        data = response.json()
    except ValueError:
        data = None
    return Answer(response.status_code, response.text[:500], data)


def merged_pull_request(settings: Settings, repository: str, sha: str,
                        http: requests.Session | None = None) -> tuple[Answer, int | None]:
    """GitHub's "pull requests associated with a commit": the merged one's number, if any."""
    answer = github_call(settings, "GET", f"/repos/{repository}/commits/{sha}/pulls", http=http)
    if not answer.ok or not isinstance(answer.data, list):
        return answer, None
    merged = [p for p in answer.data if isinstance(p, dict) and p.get("merged_at") and isinstance(p.get("number"), int)]
    return answer, merged[0]["number"] if merged else None


def comment(settings: Settings, repository: str, number: int, text: str,
            http: requests.Session | None = None) -> Answer:
    return github_call(settings, "POST", f"/repos/{repository}/issues/{number}/comments", {"body": text}, http=http)
