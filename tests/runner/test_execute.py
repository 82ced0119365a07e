"""Running a command: output shipped in bounded chunks without splitting characters, argv
resolution, and a timeout that takes the whole process group."""
from __future__ import annotations

import sys
import threading

from runners.execute import LogShipper, resolve_argv, run
from tests.support.runner_harness import pid_alive, wait_for


def test_output_is_shipped_in_bounded_chunks_and_reassembles_exactly():
    sent: list[str] = []
    shipper = LogShipper(sent.append, interval_s=0.05, chunk_chars=1000)
    text = "ünïcødé line %d\n"
    expected = "".join(text % i for i in range(500))
    data = expected.encode()
    for start in range(0, len(data), 7):  # 7-byte writes split multi-byte characters
        shipper.write(data[start:start + 7])
    shipper.close()
    assert "".join(sent) == expected
    assert max(len(chunk) for chunk in sent) <= 1000
    assert shipper.tail_text(50) == expected[-50:]


def test_a_failing_service_neither_blocks_the_job_nor_grows_memory_and_the_gap_is_marked():
    gate = threading.Event()
    sent: list[str] = []
    failures = {"n": 0}

    def send(chunk: str) -> None:
        if not gate.is_set():
            failures["n"] += 1
            raise ConnectionError("service down")
        sent.append(chunk)

    shipper = LogShipper(send, interval_s=0.02, chunk_chars=100, max_buffer_chars=300)
    for i in range(100):
        shipper.write(f"line {i}\n".encode())
        assert shipper.buffered <= 300
    wait_for(lambda: failures["n"] > 0 and shipper.buffered == 0, 60, "the shipper to give up on the backlog")
    gate.set()
    shipper.write(b"after the outage\n")
    shipper.close()
    shipped = "".join(sent)
    assert "characters of output dropped while the service was unreachable" in shipped
    assert shipped.endswith("after the outage\n")


def test_bare_python_means_the_runner_interpreter():
    assert resolve_argv(["python", "-m", "x"]) == [sys.executable, "-m", "x"]
    assert resolve_argv(["/usr/bin/env", "true"]) == ["/usr/bin/env", "true"]


def test_a_timeout_kills_the_whole_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = ("import os, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              "time.sleep(600)\n")
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env={}, timeout_s=5, output=lambda b: None,
                  interrupt=lambda: None, kill_grace_s=0.5)
    assert outcome.stopped_by == "timeout" and outcome.exit_code is None
    parent, child = map(int, pids.read_text().split())
    wait_for(lambda: not pid_alive(parent) and not pid_alive(child), 60, "the group to be gone")


def test_an_interrupt_stops_the_command_and_names_the_reason(tmp_path):
    calls = {"n": 0}

    def interrupt() -> str | None:
        calls["n"] += 1
        return "cancelled" if calls["n"] > 3 else None

    outcome = run([sys.executable, "-c", "import time; time.sleep(600)"], cwd=tmp_path, env={}, timeout_s=60,
                  output=lambda b: None, interrupt=interrupt, kill_grace_s=0.5)
    assert outcome.stopped_by == "cancelled" and outcome.duration_s < 60


def test_a_timeout_kills_the_group_without_psutil(tmp_path, monkeypatch):
    # A runner box without the `runner` extra: only the process group reaches the child.
    pids = tmp_path / "pids"
    script = ("import os, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              "time.sleep(600)\n")
    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` raises ImportError
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env={}, timeout_s=5, output=lambda b: None,
                  interrupt=lambda: None, kill_grace_s=0.5)
    monkeypatch.undo()
    assert outcome.stopped_by == "timeout"
    parent, child = map(int, pids.read_text().split())
    wait_for(lambda: not pid_alive(parent) and not pid_alive(child), 60, "the group to be gone")


def test_a_process_started_while_the_command_is_being_stopped_is_killed_too(tmp_path):
    # The command answers SIGTERM by starting a process and carrying on; psutil's list of
    # children was taken before the SIGTERM, so only the group's SIGKILL reaches the newcomer.
    late = tmp_path / "late"
    script = ("import signal, subprocess, sys, time\n"
              "def on_term(*_):\n"
              "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              f"    open({str(late)!r}, 'w').write(str(p.pid))\n"
              "signal.signal(signal.SIGTERM, on_term)\n"
              "print('ready', flush=True)\n"
              "while True:\n"
              "    time.sleep(0.05)\n")
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env={}, timeout_s=5, output=lambda b: None,
                  interrupt=lambda: None, kill_grace_s=1.0)
    assert outcome.stopped_by == "timeout"
    started_late = int(wait_for(lambda: late.exists() and late.read_text(), 60, "the late process's pid"))
    wait_for(lambda: not pid_alive(started_late), 60, "the late process to be gone")
