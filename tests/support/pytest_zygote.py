"""A warm interpreter that runs pytest sessions in forked children (the mutation tests' runner).

Each mutant's guarding tests run on a copy of the tree in a fresh interpreter, and most of such a
run was its imports: pytest, torch, Flask, SQLAlchemy, numpy and scipy took about 2.6 of the
3-4.7 CPU-seconds of a run. This process imports those third-party modules once, then forks a
child per request; the child imports the copy's own code (`app`, `runners`, `scheduler_core`,
`tests`: never imported here) from the copy, as the fresh interpreter did.
`multiprocessing`'s forkserver would pickle its target by module name and so import the project's
`tests` package into the child before the copy's; this protocol has no such step.

Run as a script (`python -P tests/support/pytest_zygote.py`); one JSON request per line on stdin:
`{"root": DIR, "args": [...], "env": {...}, "log": FILE}`; answers `{"pid": N}` when the child is
started and `{"exit": CODE}` when it is done (stdout and stderr of the session are in FILE).
"""
from __future__ import annotations

import json
import os
import sys
import traceback

# Not pytest_timeout: a plugin imported before pytest.main cannot be assertion-rewritten (a warning).
PRELOAD = ("pytest", "torch", "numpy", "scipy.stats", "sqlalchemy", "sqlalchemy.orm", "flask",
           "werkzeug", "alembic", "requests", "psycopg", "click", "jinja2")
PROJECT = ("app", "runners", "scheduler_core", "tests", "migrations")


def _child(request: dict) -> None:
    root = request["root"]
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(root)
    sys.dont_write_bytecode = True
    sys.path[:] = [root, *(p for p in sys.path if p and os.path.abspath(p) != os.path.abspath(root))]
    assert not [name for name in sys.modules if name.split(".")[0] in PROJECT], "the zygote imported project code"
    import pytest

    code = pytest.main(list(request["args"]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def main() -> None:
    for name in PRELOAD:
        __import__(name)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            except BaseException:
                traceback.print_exc()  # into the log once _child redirected stderr
            os._exit(70)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
