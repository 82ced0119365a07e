"""Explanations of alerts and bisects: what changed between the last good and the first bad
measurement (recorded context and environment, the culprit's files) and why it is slower (the
jobs' timeline artifacts). See docs/notify.md."""
