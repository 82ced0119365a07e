"""Runner overhead: what the agent adds around a job's own command.

Builds a git repository (F files, C commits), starts the real service on loopback (SQLite),
queues one trivial job per commit and lets the runner agent (in-process, real HTTP and git)
run them one by one. Reports, per job: checkout time (first job: cold mirror, then warm),
the command's own time, and the end-to-end time from claim to stored result. Run:

    .venv/bin/python bench/runner_overhead.py --files 2000 --commits 10

Prints a table and writes JSON to bench/results/runner_overhead.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.auth.tokens import create_registration_token  # noqa: E402
from app.core.config import RepositorySpec, Settings, SuiteSpec  # noqa: E402
from app.core.migrate import upgrade  # noqa: E402
from app.git.workdir import git  # noqa: E402
from app.web import create_app  # noqa: E402
from runners import checkout  # noqa: E402
from runners.agent import Agent, Config  # noqa: E402
from runners.facts import detect  # noqa: E402

JOB = ("import json, os; json.dump({'schema': 'parallax.results/1', 'suite': 'bench', 'metrics': [{'name': 'x', "
       "'unit': '', 'direction': 'higher_is_better', 'samples': [1.0]}], 'environment': {'simulated': False}}, "
       "open(os.environ['PARALLAX_RESULTS'], 'w'))")




def make_repo(path: Path, files: int, commits: int) -> list[str]:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for c in range(commits):
        for f in range(files):
            if c == 0 or f % 50 == c:
                sub = path / f"pkg{f % 40}"
                sub.mkdir(exist_ok=True)
                (sub / f"m{f}.py").write_text(f"# file {f} commit {c}\n" + "x = 1\n" * 40)
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"c{c}")
    return git(path, "rev-list", "--reverse", "HEAD").split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args()
    from werkzeug.serving import make_server

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-"))
    shas = make_repo(tmp / "repo", args.files, args.commits)
    url = f"sqlite:///{tmp / 'db.sqlite'}"
    upgrade(url)
    settings = Settings(database_url=url, admin_token="bench", lease_s=60,
                        repositories=(RepositorySpec("bench/repo", str(tmp / "repo")),),
                        suites=(SuiteSpec("bench", (sys.executable, "-c", JOB), ("cpu",), timeout_s=60, repeats=1),))
    flask_app = create_app(settings)
    server = make_server("127.0.0.1", 0, flask_app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    client = flask_app.test_client()
    for sha in shas:
        assert client.post("/api/v1/jobs", json={"repository": "bench/repo", "commit": sha},
                           headers={"Authorization": "Bearer bench"}).status_code == 201
    with flask_app.extensions["parallax.db"].session() as session:
        token = create_registration_token(session, "bench")

    # The command alone, outside the runner, for comparison.
    command_s = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", JOB], env=dict(os.environ, PARALLAX_RESULTS=str(tmp / "r.json")),
                       check=True)
        command_s.append(time.perf_counter() - started)

    checkout_s: list[float] = []
    original = checkout.Workspace.prepare

    def timed_prepare(self, *a, **kw):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return original(self, *a, **kw)
        finally:
            checkout_s.append(time.perf_counter() - started)

    checkout.Workspace.prepare = timed_prepare  # type: ignore[method-assign]
    facts = detect()
    agent = Agent(Config(server=base, work_dir=tmp / "work", registration_token=token, once=True, claim_wait_s=1),
                  facts=facts)
    job_s = []
    for _ in shas:
        started = time.perf_counter()
        agent.run()
        job_s.append(time.perf_counter() - started)
    server.shutdown()
    states = [client.get(f"/api/v1/jobs/{i + 1}").get_json()["state"] for i in range(len(shas))]
    assert states == ["succeeded"] * len(shas), states

    result = {
        "files": args.files, "commits": args.commits, "cpu": facts.cpu_model, "cpu_count": facts.cpu_count,
        "command_alone_s_median": statistics.median(command_s),
        "checkout_cold_s": checkout_s[0], "checkout_warm_s_median": statistics.median(checkout_s[1:]),
        "job_end_to_end_s_first": job_s[0], "job_end_to_end_s_median_warm": statistics.median(job_s[1:]),
        "runner_overhead_s_median_warm": statistics.median(job_s[1:]) - statistics.median(command_s),
    }
    print(f"{'measure':32} {'seconds':>9}")
    for key, value in result.items():
        if key.endswith("_s") or "_s_" in key:
            print(f"{key:32} {value:9.3f}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "runner_overhead.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
