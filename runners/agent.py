"""The runner agent: registers once, then claims jobs for its platform, checks out the exact
commit, runs the suite's command, validates and uploads the results document, and reports
failures with the tail of the log. Shuts down cleanly on SIGTERM/SIGINT.

Threads: the main thread claims and supervises one job at a time (signals land there); a
heartbeat thread keeps the lease and hears about cancellation; a log thread ships output.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runners import execute
from runners.checkout import CheckoutError, Workspace, validate_sha
from runners.client import RESTARTED_REASON, Aborted, Client, LeaseLost, RetryPolicy, ServiceError, Unauthorized
from runners.facts import REAL_PLATFORMS, Facts, detect, engine_version, environment_facts, probe_torch
from runners.host_lock import HostLock, HostLockError, Interrupted
from runners.outage import OutageReport
from runners.results import ResultsError, loads, to_json
from runners.warm import WarmInterpreter

log = logging.getLogger("parallax.runner")
SIM_DEVICE_RE = re.compile(r"sim:[A-Za-z0-9._-]+")
IDENTITY_FILE = "runner.json"
LOCK_FILE = "runner.lock"
RUNNING_FILE = "running.json"
# Never handed to a job: the job runs code from arbitrary commits.
SECRET_ENV = ("PARALLAX_REGISTRATION_TOKEN", "PARALLAX_RUNNER_TOKEN", "PARALLAX_ADMIN_TOKEN")
# The `kind` sent with /fail when the suite's setup failed: the commit could not be built, so
# detection has no measurement to use and a bisect skips the commit.
BUILD_FAILURE = "build"
# Files a job leaves under $PARALLAX_OUTPUT_DIR/artifacts/ go up beside its results (docs/runner.md).
ARTIFACTS_DIR = "artifacts"
ARTIFACT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_ARTIFACTS = 16


def suite_env(job: dict[str, Any]) -> dict[str, str]:
    """The suite's `env`, as strings; PARALLAX_* names are the runner's and are not taken."""
    raw = job.get("env") or {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items() if not str(k).startswith("PARALLAX_") and k not in SECRET_ENV}


class RunnerError(Exception):
    """A configuration or start-up problem; the message says what to change."""


@dataclass
class Config:
    server: str
    work_dir: Path
    registration_token: str | None = None
    name: str = field(default_factory=socket.gethostname)
    labels: dict[str, str] = field(default_factory=dict)
    once: bool = False
    sim_device: str | None = None  # "sim:<profile>", passed to jobs as PARALLAX_DEVICE
    grace_s: float = 60.0
    claim_wait_s: float = 10.0
    heartbeat_s: float | None = None  # default: a third of the lease, between 1 and 30 s
    upload_budget_s: float = 900.0
    kill_grace_s: float = 5.0
    claim_retry_s: float = 15.0  # how long one claim retries through an outage before the loop counts a failure
    outage_report_s: float = 60.0  # at most one line this often while claims keep failing
    host_lock: Path | None = None  # shared by the runners of one machine: real platforms measure alone
    warm_imports: tuple[str, ...] = ()  # libraries imported once by the interpreter that forks each job
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass
class Identity:
    server: str
    runner_id: int
    token: str
    name: str
    labels: dict[str, str]


# ---------------------------------------------------------------- start-up pieces

# The simulator profile a simulated platform label runs on when no --sim-profile is given.
DEFAULT_SIM_PROFILES = {"cuda-sim": "cuda-h100", "rocm-sim": "rocm-mi300x"}


def default_sim_device(declared: dict[str, str], sim_device: str | None) -> str | None:
    """The simulator setting: the one given, else the default profile of a declared ``<x>-sim`` label."""
    if sim_device is not None:
        return sim_device
    profile = DEFAULT_SIM_PROFILES.get(declared.get("platform", ""))
    return f"sim:{profile}" if profile else None


def resolve_labels(facts: Facts, declared: dict[str, str], sim_device: str | None) -> dict[str, str]:
    """Detected labels overlaid with the operator's. The platform must be what was detected,
    or a simulated one (`<x>-sim`) together with the simulator's device setting."""
    labels = facts.default_labels()
    labels.update(declared)
    platform = labels["platform"]
    if sim_device is not None and SIM_DEVICE_RE.fullmatch(sim_device) is None:
        raise RunnerError(f"simulator device setting {sim_device!r} must look like sim:<profile>")
    if platform.endswith("-sim"):
        if sim_device is None:
            raise RunnerError(f"platform {platform!r} is simulated: give the simulator's device setting "
                              "(--sim-profile PROFILE or PARALLAX_DEVICE=sim:PROFILE); only "
                              f"{', '.join(DEFAULT_SIM_PROFILES)} have a default profile")
        for key in ("gpu", "driver"):  # the real device's labels would misdescribe a simulated one
            if key not in declared:
                labels.pop(key, None)
    else:
        if sim_device is not None:
            raise RunnerError(f"the simulator device setting {sim_device!r} needs a simulated platform "
                              f"(--label platform=<name>-sim), not {platform!r}")
        if platform != facts.platform:
            known = platform in REAL_PLATFORMS
            raise RunnerError(f"platform {platform!r} was declared but this box was detected as "
                              f"{facts.platform!r}" + ("" if known else f" ({platform!r} is not a known platform)")
                              + (f"; detection note: {facts.probe_error}" if facts.probe_error else ""))
    return labels


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (mode 0600, whatever the umask), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load_identity(work_dir: Path) -> Identity | None:
    path = work_dir / IDENTITY_FILE
    if not path.is_file():
        return None
    if path.stat().st_mode & 0o077:
        log.warning("%s was readable by others; setting its mode to 0600", path)
        os.chmod(path, 0o600)
    try:
        data = json.loads(path.read_text())
        return Identity(server=data["server"], runner_id=int(data["runner_id"]), token=data["token"],
                        name=data["name"], labels=dict(data["labels"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise RunnerError(f"{path} is damaged ({exc}); delete it to register this runner again") from exc


def save_identity(work_dir: Path, identity: Identity) -> None:
    write_private(work_dir / IDENTITY_FILE, json.dumps(identity.__dict__, indent=2))


def parse_time(value: str) -> datetime:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def leftover_attempt(work_dir: Path) -> tuple[int, int] | None:
    """The job and attempt this work dir's runner was running when it stopped without finishing
    them (killed, crashed, the machine rebooted), from its record; None if there is none."""
    try:
        data = json.loads((work_dir / RUNNING_FILE).read_text())
        return int(data["job_id"]), int(data["attempt"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kill_leftover_job(work_dir: Path) -> str | None:
    """A runner killed mid-job may leave part of the job behind: its leader dies with the runner
    (PR_SET_PDEATHSIG) but the leader's children do not. End every process of the recorded
    process group whose environment shows it was started for a job of this work dir."""
    path = work_dir / RUNNING_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        # None: the runner died between recording the job and recording its process group, so
        # the job's processes are found by their environment alone.
        pgid = None if data["pgid"] is None else int(data["pgid"])
    except (ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None
    try:
        import psutil
    except ImportError:
        path.unlink(missing_ok=True)
        return f"job {data.get('job_id')} may have left processes in group {pgid} (install psutil to clean up)"
    victims = []
    for proc in psutil.process_iter():
        try:
            if pgid is not None and os.getpgid(proc.pid) != pgid:
                continue
            if proc.environ().get("PARALLAX_RESULTS", "").startswith(str(work_dir) + os.sep):
                victims.append(proc)
        except (psutil.Error, OSError):
            continue
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    path.unlink(missing_ok=True)
    if victims:
        group = f"group {pgid}" if pgid is not None else "found by environment"
        return f"killed {len(victims)} leftover process(es) of job {data.get('job_id')} ({group})"
    return None


# ---------------------------------------------------------------- the agent

class Agent:
    def __init__(self, config: Config, facts: Facts | None = None) -> None:
        self.config = config
        self.work_dir = config.work_dir.resolve()
        self.workspace = Workspace(self.work_dir)
        self.abort = threading.Event()  # second signal: stop retrying anything
        self.stop_at: float | None = None  # monotonic deadline for the running job after a signal
        self.stop_signal: str | None = None
        self.facts = facts
        self.client: Client | None = None
        self.identity: Identity | None = None
        self._lock_fd: int | None = None
        self.running_job: int | None = None  # the job being run, if any (what a signal waits for)
        self.warm: WarmInterpreter | None = None  # the interpreter that forks each job (--warm-import)
        self.warm_failed = False

    # ------------------------------------------------------------ lifecycle

    def stopping(self) -> bool:
        return self.stop_at is not None

    def on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop_at is None and self.running_job is None:
            # Nothing to finish: stop claiming, and stop retrying (registration, a claim) at once.
            self.stop_signal = name
            self.stop_at = time.monotonic()
            log.info("%s received: no job running; exiting", name)
            self.abort.set()
        elif self.stop_at is None:
            self.stop_signal = name
            self.stop_at = time.monotonic() + self.config.grace_s
            log.info("%s received: finishing job %d within %.0f s, then exiting", name, self.running_job,
                     self.config.grace_s)
            # Bounds everything else too: an upload retrying through an outage gives up then.
            last_call = threading.Timer(self.config.grace_s + self.config.kill_grace_s + 15.0, self.abort.set)
            last_call.daemon = True
            last_call.start()
        else:
            log.info("%s received again: handing the job back now", name)
            self.stop_at = time.monotonic()
            self.abort.set()

    def lock_work_dir(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.work_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # flock dies with the process, so a crashed runner never blocks the next start.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise RunnerError(f"another runner is using the work dir {self.work_dir}") from exc
        self._lock_fd = fd

    def prepare(self) -> None:
        """Everything before the first claim: lock, clean-up after a crash, facts, identity."""
        self.lock_work_dir()
        if self.config.host_lock is not None:
            try:
                HostLock(self.config.host_lock).check()
            except HostLockError as exc:
                raise RunnerError(str(exc)) from exc
        leftover = leftover_attempt(self.work_dir)
        note = kill_leftover_job(self.work_dir)
        if note:
            log.warning("%s", note)
        for removed in self.workspace.clean_stale():
            log.info("removed leftover %s", removed)
        for leftover in (self.work_dir / "results").glob("*"):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(self.work_dir / "outputs", ignore_errors=True)  # a crashed job's tool output
        if self.facts is None:
            self.facts = detect()
        labels = resolve_labels(self.facts, self.config.labels, self.config.sim_device)
        log.info("detected %s: device=%s torch=%s cuda=%s hip=%s driver=%s cpu=%s", self.facts.platform,
                 self.facts.device, self.facts.torch, self.facts.cuda, self.facts.hip, self.facts.driver,
                 self.facts.cpu_model)
        self.identity = self.register(labels)
        self.client = Client(self.config.server, self.identity.token, retry=self.config.retry, abort=self.abort)
        log.info("runner %d (%s) on %s, platform %s", self.identity.runner_id, self.identity.name,
                 self.config.server, labels["platform"])
        if leftover is not None:
            self.release_leftover(*leftover)

    def release_leftover(self, job_id: int, attempt: int) -> None:
        """Fail the attempt this runner was running when it stopped, so that the job is retried
        now (while it has attempts left) rather than when its lease expires. The service refuses
        if the runner no longer holds it (the lease expired, another runner took it over)."""
        assert self.client is not None
        try:
            self.client.fail(job_id, attempt, RESTARTED_REASON, retryable=True, budget_s=self.config.claim_retry_s)
        except ServiceError as exc:  # 409 (no longer its holder), an outage, an abort
            log.info("job %d attempt %d, running when this runner stopped, was not failed back: %s",
                     job_id, attempt, exc)
            return
        log.warning("job %d attempt %d was running when this runner stopped; failed back to the queue",
                    job_id, attempt)

    def register(self, labels: dict[str, str]) -> Identity:
        stored = load_identity(self.work_dir)
        server = self.config.server.rstrip("/")
        if stored is not None and stored.server == server and stored.labels == labels \
                and stored.name == self.config.name:
            return stored
        if stored is not None:
            log.info("the stored registration (%s, %s, labels %s) differs from this start; registering anew",
                     stored.server, stored.name, stored.labels)
        if not self.config.registration_token:
            raise RunnerError("this runner is not registered yet: give --registration-token "
                              "(or PARALLAX_REGISTRATION_TOKEN) from `parallax token create`")
        client = Client(server, retry=self.config.retry, abort=self.abort)
        assert self.facts is not None
        try:
            runner_id, token = client.register(self.config.registration_token, self.config.name, labels,
                                               self.facts.as_dict())
        except ServiceError as exc:
            raise RunnerError(f"registration failed: {exc}") from exc
        identity = Identity(server=server, runner_id=runner_id, token=token, name=self.config.name, labels=labels)
        save_identity(self.work_dir, identity)
        log.info("registered as runner %d; token kept in %s (mode 0600)", runner_id, self.work_dir / IDENTITY_FILE)
        return identity

    def run(self) -> int:
        """Claim and run jobs until a signal (or one job with --once). Returns the exit code."""
        try:
            self.prepare()
            self.loop()
        except RunnerError as exc:
            if not self.stopping():
                raise
            # A signal while starting (registration retrying, say) is a stop, not a failure.
            log.info("stopped while starting: %s", exc)
        finally:
            if self.warm is not None:
                self.warm.close()
                self.warm = None
            self.unlock_work_dir()
        log.info("runner stopped%s", f" ({self.stop_signal})" if self.stop_signal else "")
        return 0

    def unlock_work_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def loop(self) -> None:
        assert self.client is not None
        outage = OutageReport(every_s=self.config.outage_report_s)
        # The first claim goes out at once, without waiting, before the warm interpreter starts
        # (its imports take a second or more): it names this process's session to the service, so
        # that a long-poll an earlier process of this runner left waiting there takes no job
        # meanwhile (app.jobs.queue.try_claim). A job it gets starts cold.
        first = True
        while not self.stopping():
            if not first:
                self.start_warm()
            wait_s, first = (0.0 if first else self.config.claim_wait_s), False
            try:
                # A short retry budget, so that a signal during an outage is noticed soon.
                job = self.client.claim(wait_s, budget_s=self.config.claim_retry_s)
            except Unauthorized as exc:
                raise RunnerError(f"the service refused this runner's token ({exc}); delete "
                                  f"{self.work_dir / IDENTITY_FILE} to register again") from exc
            except (Aborted, ServiceError) as exc:
                if self.stopping():
                    break
                line = outage.failed(str(exc), time.monotonic())
                if line:
                    log.warning("%s", line)
                else:
                    log.debug("claim failed (%d in a row): %s", outage.failures, exc)
                time.sleep(self.config.retry.delay(3))
                continue
            recovered = outage.succeeded(time.monotonic())
            if recovered:
                log.info("%s", recovered)
            if job is None:
                continue
            if self.stopping():  # claimed while a signal arrived: leave it to its lease
                log.info("job %d was claimed as the runner stops; it returns to the queue when its lease expires",
                         job["id"])
                break
            self.run_job(job)
            if self.config.once:
                break

    def base_env(self) -> dict[str, str]:
        """What every job's environment starts from (job_env adds the suite's and the job's)."""
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        if self.config.sim_device:
            env["PARALLAX_DEVICE"] = self.config.sim_device
        return env

    def start_warm(self) -> None:
        """Start the warm interpreter (--warm-import), unless it runs already, and wait until it
        has imported its libraries: between jobs, under the host lock (shared), so that it never
        imports beside a measurement. It then forks every job, and is started again only if it
        exits. One whose import failed is dropped, and every job starts cold from then on."""
        if not self.config.warm_imports or self.warm_failed or self.stopping():
            return
        if self.warm is not None and self.warm.proc.poll() is None:
            return
        if self.warm is not None:
            log.info("the warm interpreter exited (status %s); starting another", self.warm.proc.returncode)
            self.warm.close()
            self.warm = None

        def launch() -> None:
            warm = self.warm = WarmInterpreter.start(execute.resolve_argv(["python"])[0], self.base_env(),
                                                     self.config.warm_imports, self.work_dir / "warm")
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not self.stopping():  # a signal is heard within 0.5 s
                if warm.wait_ready(0.5):
                    return
                if warm.proc.poll() is not None:
                    self.warm_failed = True  # wait_ready logged why
                    warm.close()
                    self.warm = None
                    return

        if self.config.host_lock is None:
            launch()
            return

        def waiting() -> None:
            log.info("waiting for the host lock %s (shared) to start the warm interpreter: another job "
                     "on this machine is measuring", self.config.host_lock)
        try:
            with HostLock(self.config.host_lock).hold(False, lambda: "shutdown" if self.stopping() else None,
                                                      waiting):
                launch()
        except Interrupted:
            return  # shutting down before it started

    # ------------------------------------------------------------ one job

    def upload_budget(self) -> float:
        if self.stop_at is None:
            return self.config.upload_budget_s
        return max(5.0, self.stop_at - time.monotonic() + 10.0)

    def interrupt_reason(self, job: "JobState") -> str | None:
        if job.lease_lost.is_set():
            return "lease_lost"
        if job.cancel.is_set():
            return "cancelled"
        if self.stop_at is not None and time.monotonic() >= self.stop_at:
            return "shutdown"
        return None

    def job_env(self, job: dict[str, Any], results_path: Path, worktree: Path) -> dict[str, str]:
        env = self.base_env()
        env.update(suite_env(job))  # the suite's own variables; the PARALLAX_* ones below win
        env.update(PARALLAX_RESULTS=str(results_path), PARALLAX_PLATFORM=str(job["platform"]),
                   PARALLAX_REPEATS=str(job.get("repeats", 1)), PARALLAX_JOB_ID=str(job["id"]),
                   PARALLAX_ATTEMPT=str(job["attempt"]), PARALLAX_COMMIT=str(job["commit"]),
                   PARALLAX_SUITE=str(job["suite"]), PARALLAX_WORKTREE=str(worktree))
        return env

    def run_job(self, job: dict[str, Any]) -> None:
        assert self.client is not None and self.identity is not None
        state = JobState(job_id=int(job["id"]), attempt=int(job["attempt"]))
        self.running_job = state.job_id
        try:
            self._run_job(job, state)
        finally:
            self.running_job = None

    def _run_job(self, job: dict[str, Any], state: JobState) -> None:
        assert self.client is not None and self.identity is not None
        client = self.client
        log.info("job %d attempt %d: %s %s@%s on %s", state.job_id, state.attempt, job.get("suite"),
                 job.get("repository"), job.get("commit"), job.get("platform"))
        heartbeat = HeartbeatThread(client, state, self.heartbeat_interval(job))
        heartbeat.start()
        shipper = execute.LogShipper(lambda text: client.logs(state.job_id, state.attempt, text, budget_s=60.0))
        results_path = self.work_dir / "results" / f"job-{state.job_id}-{state.attempt}.json"
        try:
            shipper.write(f"[parallax-runner] runner {self.identity.runner_id} ({self.identity.name}) runs job "
                          f"{state.job_id} attempt {state.attempt}: {job.get('suite')} at {job.get('commit')}\n")
            verdict = self.execute_job(job, state, shipper, results_path)
            if verdict[0] == "complete":
                self.upload_artifacts(state, shipper)
            shipper.close(timeout_s=min(30.0, self.upload_budget()))
            self.report(job, state, verdict, shipper)
        except Exception as exc:  # a bug must not kill a runner that has to run for weeks
            log.exception("job %d: unexpected runner error", state.job_id)
            shipper.close(timeout_s=5.0)
            self.report(job, state, ("fail", f"runner error: {type(exc).__name__}: {exc}", True), shipper)
        finally:
            state.held.close()
            heartbeat.stop()
            if state.worktree is not None:
                self.workspace.release(state.mirror, state.worktree)
            results_path.unlink(missing_ok=True)
            if state.output_root is not None:
                shutil.rmtree(state.output_root, ignore_errors=True)
            (self.work_dir / RUNNING_FILE).unlink(missing_ok=True)

    def heartbeat_interval(self, job: dict[str, Any]) -> float:
        if self.config.heartbeat_s:
            return self.config.heartbeat_s
        try:
            left = (parse_time(job["lease_expires_at"]) - datetime.now(timezone.utc)).total_seconds()
        except (KeyError, ValueError, TypeError):
            left = 30.0
        return min(30.0, max(1.0, left / 3.0))

    def execute_job(self, job: dict[str, Any], state: "JobState", shipper: execute.LogShipper,
                    results_path: Path) -> tuple[Any, ...]:
        """Check out, run, validate. Returns the verdict: ("complete", document bytes),
        ("fail", reason, retryable), ("handback", reason) or ("lost",)."""
        try:
            sha = validate_sha(job.get("commit"))
        except CheckoutError as exc:
            return ("fail", str(exc), False)
        if self.stopping():
            return ("handback", f"handed back: runner shutting down ({self.stop_signal}) before the job started")
        try:
            argv = execute.resolve_argv(job.get("command"))  # type: ignore[arg-type]
        except ValueError as exc:
            return ("fail", f"bad suite command: {exc}", False)
        simulated = self.is_simulated(job)
        timeout_s = float(job.get("timeout_s") or 1800)
        if self.config.host_lock is not None and simulated:
            # A simulated job holds the host (shared) from its checkout until it has reported
            # (`_run_job` lets go): its git work, its timeline and results documents and the
            # service storing them are work on this machine, which a real job measuring beside them
            # would time too.
            given_up = self.take_host(state, shipper, exclusive=False, timeout_s=timeout_s)
            if given_up is not None:
                return given_up
        try:
            worktree = self.workspace.prepare(state.job_id, state.attempt, str(job.get("repository") or ""),
                                              job.get("repository_url"), sha)  # type: ignore[arg-type]
        except CheckoutError as exc:
            shipper.write(f"[parallax-runner] checkout failed: {exc}\n")
            return ("fail", f"checkout failed: {exc}", exc.retryable)
        state.worktree = worktree
        state.mirror = self.workspace.mirror_path(str(job.get("repository") or ""), job["repository_url"])
        shipper.write(f"[parallax-runner] checked out {sha} in {worktree}\n")
        if self.stopping():
            return ("handback", f"handed back: runner shutting down ({self.stop_signal}) before the job started")
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.unlink(missing_ok=True)
        env = self.job_env(job, results_path, worktree)
        output_root = self.work_dir / "outputs" / f"job-{state.job_id}-{state.attempt}"
        shutil.rmtree(output_root, ignore_errors=True)
        state.output_root = output_root
        if job.get("adapter") and self.is_simulated(job):
            return ("fail", f"suite {job.get('suite')!r} reads a real engine's output through adapter "
                            f"{job.get('adapter')!r}; it cannot run on the simulated platform {job.get('platform')!r}",
                    False)
        if job.get("setup"):
            failed = self.run_setup(job, state, shipper, worktree, env)
            if failed is not None:
                return failed
        if self.config.host_lock is None or simulated:
            return self.measure(job, argv, state, shipper, worktree, env, timeout_s, output_root)
        given_up = self.take_host(state, shipper, exclusive=True, timeout_s=timeout_s)
        if given_up is not None:
            return given_up
        try:
            return self.measure(job, argv, state, shipper, worktree, env, timeout_s, output_root)
        finally:
            state.held.close()  # a real job measures alone; its uploads need not keep others waiting

    def take_host(self, state: "JobState", shipper: execute.LogShipper, exclusive: bool,
                  timeout_s: float) -> tuple[Any, ...] | None:
        """Hold the host lock in `state.held`: exclusive for a real job's measurement, shared for a
        simulated job. None, or the verdict when the wait was given up (a shutdown, a cancel, a lost
        lease)."""
        assert self.config.host_lock is not None

        def waiting() -> None:
            shipper.write(f"[parallax-runner] waiting for the host lock {self.config.host_lock} "
                          f"({'alone: a real platform' if exclusive else 'shared: a simulated platform'}); "
                          "another job on this machine is measuring\n")
        try:
            state.held.enter_context(HostLock(self.config.host_lock).hold(
                exclusive, lambda: self.interrupt_reason(state), waiting))
        except Interrupted as exc:
            if exc.reason == "shutdown":
                return ("handback", f"handed back: runner shutting down ({self.stop_signal}) while the job waited "
                                    "for the host lock")
            verdict = self.outcome_verdict(execute.Outcome(None, exc.reason, 0.0), timeout_s, shipper,
                                           "wait for the host lock")
            assert verdict is not None
            return verdict
        return None

    def measure(self, job: dict[str, Any], argv: list[str], state: "JobState", shipper: execute.LogShipper,
                worktree: Path, env: dict[str, str], timeout_s: float, output_root: Path) -> tuple[Any, ...]:
        """Run the suite's command (or its adapter's tool) on the checked-out commit; the verdict."""
        results_path = Path(env["PARALLAX_RESULTS"])
        if job.get("adapter"):
            return self.run_adapter_job(job, state, shipper, worktree, env, timeout_s)
        output_dir = output_root / "run-1"
        output_dir.mkdir(parents=True)
        env.update(PARALLAX_OUTPUT_DIR=str(output_dir), PARALLAX_RUN="1")
        argv = execute.substitute(argv, env)
        warm = self.warm_for(argv, env, shipper)
        outcome = self.run_command(argv, worktree, env, timeout_s, state, shipper, "command", warm=warm)
        failed = self.outcome_verdict(outcome, timeout_s, shipper, "command")
        if failed is not None:
            return failed
        return self.verdict(job, results_path, shipper)

    def warm_for(self, argv: list[str], env: dict[str, str], shipper: execute.LogShipper) -> WarmInterpreter | None:
        """The warm interpreter if it may run this command; the job log says which start it got."""
        if self.warm is None:
            return None
        reason = self.warm.mismatch(argv, env)
        if reason is None:
            shipper.write(f"[parallax-runner] the command runs in the warm interpreter "
                          f"({', '.join(self.warm.modules)} imported ahead)\n")
            return self.warm
        shipper.write(f"[parallax-runner] the command starts cold, not in the warm interpreter: {reason}\n")
        return None

    def is_simulated(self, job: dict[str, Any]) -> bool:
        return str(job.get("platform", "")).endswith("-sim") or self.config.sim_device is not None

    def run_command(self, argv: list[str], worktree: Path, env: dict[str, str], timeout_s: float,
                    state: "JobState", shipper: execute.LogShipper, what: str,
                    output: Any = None, warm: WarmInterpreter | None = None) -> execute.Outcome:
        def started(proc: Any) -> None:
            record = {"pgid": proc.pid, "job_id": state.job_id, "attempt": state.attempt,
                      "create_time": _create_time(proc.pid)}
            write_private(self.work_dir / RUNNING_FILE, json.dumps(record))

        # Recorded before the start too: a runner killed before `started` has run (a loaded
        # machine can take that long) still leaves the next start a record to clean up after.
        write_private(self.work_dir / RUNNING_FILE,
                      json.dumps({"pgid": None, "job_id": state.job_id, "attempt": state.attempt}))

        outcome = execute.run(argv, cwd=worktree, env=env, timeout_s=timeout_s, output=output or shipper.write,
                              interrupt=lambda: self.interrupt_reason(state),
                              kill_grace_s=self.config.kill_grace_s, on_start=started, warm=warm)
        shipper.write(f"\n[parallax-runner] {what} ended after {outcome.duration_s:.1f} s: "
                      f"{outcome.stopped_by or f'exit status {outcome.exit_code}'}\n")
        return outcome

    def run_setup(self, job: dict[str, Any], state: "JobState", shipper: execute.LogShipper, worktree: Path,
                  env: dict[str, str]) -> tuple[Any, ...] | None:
        """The suite's `setup` argv, once per job before measuring, with its own time limit. Its
        output goes to the job log and to logs/job-<id>-<attempt>-setup.log; a failure is a build
        failure: the commit could not be prepared, nothing was measured."""
        try:
            argv = execute.substitute(execute.resolve_argv(job["setup"]), env)
        except ValueError as exc:
            return ("fail", f"bad suite setup: {exc}", False)
        limit_s = float(job.get("setup_timeout_s") or 1800)
        log_dir = self.work_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"job-{state.job_id}-{state.attempt}-setup.log"
        shipper.write(f"[parallax-runner] setup (limit {limit_s:.0f} s): {' '.join(argv)}\n")
        with open(log_path, "wb") as kept:
            def tee(data: bytes) -> None:
                kept.write(data)
                shipper.write(data)
            outcome = self.run_command(argv, worktree, env, limit_s, state, shipper, "setup", output=tee)
        failed = self.outcome_verdict(outcome, limit_s, shipper, "setup")
        if failed is None:
            return None
        if failed[0] != "fail":
            return failed
        return ("fail", f"build failed: {failed[1]} (setup log kept in {log_path})", False, BUILD_FAILURE)

    def run_adapter_job(self, job: dict[str, Any], state: "JobState", shipper: execute.LogShipper, worktree: Path,
                        env: dict[str, str], timeout_s: float) -> tuple[Any, ...]:
        """Run the measured command `repeats` times, each into its own $PARALLAX_OUTPUT_DIR, then
        let the suite's adapter turn the runs' output files into one results document."""
        from runners.adapters.base import AdapterError
        from runners.adapters.registry import build_document, get
        try:
            get(str(job["adapter"]))
        except KeyError as exc:
            return ("fail", f"bad suite: {exc.args[0]} (this runner is older or newer than the service?)", False)
        repeats = max(1, int(job.get("repeats") or 1))
        deadline = time.monotonic() + timeout_s
        run_dirs: list[Path] = []
        assert state.output_root is not None
        for run in range(1, repeats + 1):
            run_dir = state.output_root / f"run-{run}"
            run_dir.mkdir(parents=True)
            run_dirs.append(run_dir)
            run_env = dict(env, PARALLAX_OUTPUT_DIR=str(run_dir), PARALLAX_RUN=str(run), PARALLAX_REPEATS=str(repeats))
            argv = execute.substitute(execute.resolve_argv(job["command"]), run_env)
            shipper.write(f"[parallax-runner] run {run} of {repeats}\n")
            left = max(0.0, deadline - time.monotonic())
            outcome = self.run_command(argv, worktree, run_env, left, state, shipper, f"run {run} of {repeats}")
            failed = self.outcome_verdict(outcome, timeout_s, shipper, f"run {run} of {repeats}")
            if failed is not None:
                return failed
        context = {"outputs": list(job.get("outputs") or []), "repeats": repeats, "env": suite_env(job),
                   "command": list(job["command"])}
        try:
            raw = build_document(str(job["adapter"]), run_dirs, list(job.get("outputs") or []),
                                 suite=str(job["suite"]), context=context,
                                 environment=self.environment_block(job, worktree))
        except (AdapterError, ResultsError) as exc:
            shipper.write(f"[parallax-runner] adapter {job['adapter']} refused the output: {exc}\n")
            return ("fail", f"adapter {job['adapter']}: {exc}", False)
        shipper.write(f"[parallax-runner] adapter {job['adapter']} made a results document of {len(raw)} bytes "
                      f"from {repeats} run(s)\n")
        return ("complete", raw)

    def environment_block(self, job: dict[str, Any], worktree: Path) -> dict[str, Any]:
        """Facts for an adapter's document; torch is probed again, as setup may have replaced it."""
        assert self.facts is not None
        fresh = probe_torch() if job.get("setup") else {}
        return environment_facts(self.facts, str(job["platform"]), engine_version(worktree),
                                 torch_version=fresh.get("torch") if fresh else None)

    def outcome_verdict(self, outcome: execute.Outcome, timeout_s: float, shipper: execute.LogShipper,
                        what: str) -> tuple[Any, ...] | None:
        """None when the command exited 0, else the verdict its ending calls for."""
        tail = shipper.tail_text()
        with_tail = f"\n--- last lines of the log ---\n{tail}" if tail.strip() else ""
        if outcome.stopped_by == "lease_lost":
            return ("lost",)
        if outcome.stopped_by == "cancelled":
            return ("fail", "cancelled by the service", False)
        if outcome.stopped_by == "shutdown":
            return ("handback", f"handed back: runner shutting down ({self.stop_signal}); the job did not finish "
                                f"within the {self.config.grace_s:.0f} s grace period")
        if outcome.stopped_by == "timeout":
            return ("fail", f"timeout: the {what} ran longer than {timeout_s:.0f} s; its process group was "
                            f"killed{with_tail}", False)
        if outcome.exit_code != 0:
            code = outcome.exit_code
            # Killed by a signal (OOM killer, a reboot) is worth another try; a non-zero exit is not.
            described = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
            return ("fail", f"{what} {described}{with_tail}", code is not None and code < 0)
        return None

    def verdict(self, job: dict[str, Any], results_path: Path, shipper: execute.LogShipper) -> tuple[Any, ...]:
        """The results document a command without an adapter wrote, checked."""
        tail = shipper.tail_text()
        with_tail = f"\n--- last lines of the log ---\n{tail}" if tail.strip() else ""
        if not results_path.is_file():
            return ("fail", f"command exited 0 but wrote no results document to $PARALLAX_RESULTS{with_tail}", False)
        raw = results_path.read_bytes()
        try:
            document = loads(raw)
        except ResultsError as exc:
            return ("fail", f"invalid results document: {exc}", False)
        if document.suite != job.get("suite"):
            return ("fail", f"invalid results document: suite is {document.suite!r} but the job runs "
                            f"{job.get('suite')!r}", False)
        simulated_platform = self.is_simulated(job)
        if simulated_platform and document.environment.get("simulated") is not True:
            return ("fail", f"invalid results document: environment.simulated must be true on the simulated "
                            f"platform {job.get('platform')!r}; simulated numbers are never reported as measured", False)
        if not simulated_platform and document.simulated:
            return ("fail", f"invalid results document: environment.simulated is true but platform "
                            f"{job.get('platform')!r} is a real one", False)
        if suite_env(job):
            data = to_json(document)
            data["context"] = {**document.context, "env": suite_env(job)}
            raw = json.dumps(data, allow_nan=False).encode()
        return ("complete", raw)

    def upload_artifacts(self, state: "JobState", shipper: execute.LogShipper) -> int:
        """Upload the files the job left under $PARALLAX_OUTPUT_DIR/artifacts/ (a simulator
        timeline, a profiler trace) before its results. A file the service refuses (over its
        size cap: 413) is named in the job log and skipped; the results go up regardless.
        With several repeats, each run's files are named run-<n>-<name>."""
        assert self.client is not None
        if state.output_root is None:
            return 0
        runs = sorted((d for d in state.output_root.glob("run-*") if (d / ARTIFACTS_DIR).is_dir()),
                      key=lambda d: int(d.name.split("-")[1]) if d.name.split("-")[1].isdigit() else 0)
        files = [(run, path) for run in runs for path in sorted((run / ARTIFACTS_DIR).iterdir())
                 if path.is_file() and not path.is_symlink()]
        kept = 0
        for run, path in files[:MAX_ARTIFACTS]:
            name = path.name if len(runs) == 1 else f"{run.name}-{path.name}"
            if not ARTIFACT_NAME_RE.match(name):
                shipper.write(f"[parallax-runner] artifact {path.name!r} skipped: use letters, digits, '.', '_' or '-'\n")
                continue
            content_type = "application/json" if name.endswith(".json") else "application/octet-stream"
            try:
                self.client.upload_artifact(state.job_id, state.attempt, name, path.read_bytes(), content_type,
                                            budget_s=min(120.0, self.upload_budget()))
                kept += 1
                shipper.write(f"[parallax-runner] artifact {name} uploaded ({path.stat().st_size} bytes)\n")
            except LeaseLost:
                raise
            except (ServiceError, OSError) as exc:
                shipper.write(f"[parallax-runner] artifact {name} not kept: {exc}\n")
        if len(files) > MAX_ARTIFACTS:
            shipper.write(f"[parallax-runner] {len(files) - MAX_ARTIFACTS} more artifact(s) not uploaded "
                          f"(at most {MAX_ARTIFACTS} per job)\n")
        return kept

    def report(self, job: dict[str, Any], state: "JobState", verdict: tuple[Any, ...],
               shipper: execute.LogShipper) -> None:
        assert self.client is not None
        kind = verdict[0]
        try:
            if kind == "lost":
                log.warning("job %d: lease lost; another runner may have it, nothing reported", state.job_id)
            elif kind == "complete":
                status = self.client.complete(state.job_id, state.attempt, verdict[1], budget_s=self.upload_budget())
                log.info("job %d: results stored (%s)", state.job_id,
                         "new" if status == 201 else "already stored; retry acknowledged")
            elif kind == "handback":
                # A shutdown is not the job's fault: the service requeues it without using an attempt.
                answer = self.client.fail(state.job_id, state.attempt, verdict[1], True, handback=True,
                                          budget_s=self.upload_budget())
                log.info("job %d: handed back (job now %s)", state.job_id, answer.get("state"))
            else:
                reason, retryable = verdict[1], verdict[2]
                kind = verdict[3] if len(verdict) > 3 else None
                answer = self.client.fail(state.job_id, state.attempt, reason, retryable, kind=kind,
                                          budget_s=self.upload_budget())
                log.info("job %d: reported failure (%s; job now %s): %s", state.job_id,
                         "retryable" if retryable else "final", answer.get("state"), reason.splitlines()[0])
        except LeaseLost as exc:
            log.warning("job %d: %s", state.job_id, exc)
        except ServiceError as exc:
            if kind == "complete" and exc.status == 422:
                # The service's rules refused what local validation let through (e.g. its size limit).
                self.report(job, state, ("fail", f"the service refused the results document: {exc}", False), shipper)
                return
            log.error("job %d: could not report %s: %s (the lease will expire and the job be retried)",
                      state.job_id, kind, exc)


def _create_time(pid: int) -> float:
    try:
        import psutil
        return psutil.Process(pid).create_time()
    except Exception:  # psutil missing or the process already gone
        return 0.0


@dataclass
class JobState:
    job_id: int
    attempt: int
    cancel: threading.Event = field(default_factory=threading.Event)
    lease_lost: threading.Event = field(default_factory=threading.Event)
    worktree: Path | None = None
    mirror: Path | None = None
    output_root: Path | None = None  # outputs/job-<id>-<attempt>: one run-<n> directory per repeat
    held: ExitStack = field(default_factory=ExitStack)  # a host lock kept until the job has reported


class HeartbeatThread(threading.Thread):
    """Renews the lease every `interval_s`; learns about cancellation and lost leases."""

    def __init__(self, client: Client, state: JobState, interval_s: float) -> None:
        super().__init__(name=f"heartbeat-{state.job_id}", daemon=True)
        self.client = client
        self.state = state
        self.interval_s = interval_s
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            try:
                reply = self.client.heartbeat(self.state.job_id, self.state.attempt,
                                              budget_s=max(self.interval_s, 5.0))
            except LeaseLost as exc:
                if not self.done.is_set():
                    log.warning("job %d: %s", self.state.job_id, exc)
                    self.state.lease_lost.set()
                return
            except ServiceError as exc:
                if not self.done.is_set():
                    log.warning("job %d: heartbeat failed: %s", self.state.job_id, exc)
                continue
            if reply.cancel and not self.state.cancel.is_set():
                log.info("job %d: the service asked to cancel", self.state.job_id)
                self.state.cancel.set()

    def stop(self) -> None:
        self.done.set()
        self.join(5.0)
