"""[[notifications]] in parallax.toml: a target that could never be reached, or an event that
never happens, is refused when the settings load, with the entry and key named."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import ConfigError, load_settings
from tests.support.settings import CATALOGUE_TOML

GOOD = '''
[[notifications]]
kind = "webhook"
url = "https://hooks.example.com/parallax"
events = ["alert.opened", "bisect.done"]
secret = "s3cret"
platforms = ["rocm"]

[[notifications]]
name = "team"
kind = "slack"
url = "https://hooks.slack.com/services/T000/B000/XXXX"
events = ["alert.opened", "alert.fixed", "pull_request.verdict"]
repository = "demo/engine"
'''


def _load(tmp_path: Path, notifications: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "parallax.toml"
    path.write_text(CATALOGUE_TOML + notifications)
    return load_settings(env={"PARALLAX_CONFIG": str(path)})


def test_webhook_and_slack_targets_load(tmp_path):
    webhook, slack = _load(tmp_path, GOOD).notifications
    assert (webhook.name, webhook.kind, webhook.events, webhook.platforms, webhook.secret) == (
        "notifications[0]", "webhook", ("alert.opened", "bisect.done"), ("rocm",), "s3cret")
    assert (slack.name, slack.kind, slack.repository) == ("team", "slack", "demo/engine")
    assert "s3cret" not in repr(webhook)


@pytest.mark.parametrize("entry,message", [
    ('kind = "webhook"\nurl = "ftp://example.com/x"\nevents = ["alert.opened"]',
     r"notifications\[0\]\.url must be an http:// or https:// URL, got 'ftp://example.com/x'"),
    ('kind = "webhook"\nurl = "hooks.example.com"\nevents = ["alert.opened"]', r"notifications\[0\]\.url must be an http"),
    ('kind = "webhook"\nurl = "https://x.example"\nevents = ["alert.opend"]',
     r"notifications\[0\]\.events: unknown event 'alert.opend'; known: alert.opened, alert.fixed"),
    ('kind = "webhook"\nurl = "https://x.example"\nevents = []', r"events must name at least one"),
    ('kind = "email"\nurl = "https://x.example"\nevents = ["alert.opened"]', r"kind must be one of webhook, slack"),
    ('kind = "slack"\nurl = "https://x.example"\nevents = ["alert.opened"]\nsecret = "s"', r"secret: .*webhook"),
    ('kind = "webhook"\nurl = "https://x.example"\nevents = ["alert.opened"]\nplatforms = ["tpu"]',
     r"platforms: unknown platform 'tpu'"),
    ('kind = "webhook"\nurl = "https://x.example"\nevents = ["alert.opened"]\nchannel = "#perf"', r"unknown key\(s\) 'channel'"),
    ('kind = "webhook"\nevents = ["alert.opened"]', r"missing required key 'url'"),
    ('name = "a"\nkind = "slack"\nurl = "https://x.example"\nevents = ["alert.opened"]\n\n[[notifications]]\n'
     'name = "a"\nkind = "slack"\nurl = "https://y.example"\nevents = ["alert.fixed"]', r"notifications\[1\]\.name: 'a' is used"),
])
def test_a_bad_target_is_refused_at_load_naming_the_key(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, f"\n[[notifications]]\n{entry}\n")
