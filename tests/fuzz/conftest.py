"""Fuzzing tests record how many examples they tried through `record_examples`
(tests/support/examples.py), so `make test` shows the figures."""
