"""Under the gevent worker on SQLite, a greenlet that wants to begin a transaction while another
greenlet of the process holds one waits for it cooperatively (app.core.sqlite_gate), so the
holder gets to finish. Without the gate the waiter sits in SQLite's busy handler, in C: the
holder never runs again and the waiter fails with "database is locked" when SQLite's busy
timeout runs out (it did, in CI: a runner registration stalled 30 s behind a background duty).
Checked in a child process shaped like a worker (monkey-patched before the app is imported)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.settings import REPO_ROOT

CHILD = textwrap.dedent("""
    import json, sys
    import gevent, gevent.monkey
    gevent.monkey.patch_all()
    from sqlalchemy import text
    from app.core.db import Database
    db = Database(sys.argv[1])
    with db.session() as session:
        session.execute(text("CREATE TABLE said (who TEXT)"))
    events = []
    def holder():
        # A connection of its own, not a session's: a session gives its connection back to
        # the pool when it commits, and the pool's check-in would open the gate by itself.
        with db.engine.connect() as conn:
            conn.execute(text("INSERT INTO said VALUES ('holder')"))
            events.append("holder began")
            if sys.argv[2] == "commit first":
                conn.commit()
                events.append("holder committed")
            gevent.sleep(0)  # yields inside its transaction, as a request reading its body does
            events.append("holder goes on")
            conn.commit()
    def other():
        with db.session() as session:
            session.execute(text("INSERT INTO said VALUES ('other')"))
        events.append("other committed")
    gevent.joinall([gevent.spawn(holder), gevent.spawn(other)], raise_error=True)
    with db.session() as session:
        rows = [row[0] for row in session.execute(text("SELECT who FROM said ORDER BY rowid"))]
    print(json.dumps({"events": events, "rows": rows}))
""")


def run_child(database: Path, mode: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", CHILD, f"sqlite:///{database}", mode], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_a_greenlet_waits_for_the_transaction_of_another_without_freezing_the_worker(tmp_path: Path) -> None:
    assert run_child(tmp_path / "gate.db", "yield inside") == {
        "events": ["holder began", "holder goes on", "other committed"], "rows": ["holder", "other"]}


def test_a_commit_lets_the_next_transaction_in_before_its_connection_closes(tmp_path: Path) -> None:
    assert run_child(tmp_path / "gate.db", "commit first") == {
        "events": ["holder began", "holder committed", "other committed", "holder goes on"],
        "rows": ["holder", "other"]}
