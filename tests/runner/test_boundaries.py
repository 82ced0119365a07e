"""A GPU box has requests, click and its own torch, not Flask or a database: the runner must
never need `app`'s dependencies."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

RUNNERS = Path(__file__).resolve().parents[2] / "runners"
BLOCK = "import sys\nfor name in ('flask', 'sqlalchemy', 'werkzeug', 'alembic', 'psycopg'):\n    sys.modules[name] = None\n"


def test_no_runner_module_imports_app():
    for path in sorted(RUNNERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "app" or n.startswith("app.") for n in names), f"{path.name} imports {names}"


def test_parallax_runner_works_without_flask_or_a_database_driver():
    code = BLOCK + "from app.cli import main\nmain(['runner', '--help'])\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--registration-token" in done.stdout


def test_the_agent_modules_import_without_flask():
    code = BLOCK + "import runners.agent, runners.cli, runners.checkout, runners.execute, runners.facts\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
