"""Retention: dropping raw samples that the `[[retention]]` rules of parallax.toml let go, while
each run's summary (median, min, max, count) stays."""
