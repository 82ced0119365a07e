"""Pull-request verdicts: base against head on every platform, told on the pull request itself."""
