"""Telling people: the `[[notifications]]` outbox (webhooks signed with HMAC, Slack incoming
webhooks), a comment on the culprit's merged pull request, and a daily digest. See docs/notify.md."""
