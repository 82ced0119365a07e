"""Alert reproduction: a new regression's good and bad commits measured again, A/B on one runner,
before the alert stands."""
