"""Parallax: per-commit, cross-platform regression tracking for LLM serving engines.

Packages, and the one direction dependencies run in (a test of the import graph enforces it):

- entry points: `app.web` (Flask app and blueprints), `app.cli` (the `parallax` command),
  `app.demo`, and `app.wiring` (signal receivers and duties, used by all of them);
- areas: `app.jobs` (queue, matrix, measurements, catalogue), `app.git` (mirrors, commit graph),
  `app.detection`, `app.github` (webhook ingest, commit statuses), `app.auth` (tokens, users),
  `app.bisect`;
- core: `app.core` (config, database, models, migrations, errors, clock, signals, duties).

Entry points use areas, areas use the core and each other without cycles, and nothing points
back up. The package itself imports nothing, so `parallax runner` needs no Flask.
"""
