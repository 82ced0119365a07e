"""Results from the CI people already run (issue 29): `POST /api/v1/runs` validated, converted
through the runner's adapters, placed on a commit of the repository, and stored as runs of the
same series as runner-made ones."""
