"""A PostgreSQL server of one's own: `initdb` in a temporary directory, another port, run as the
`postgres` user (PostgreSQL refuses to run as root), stopped and started at will, and a
streaming replica of it made with `pg_basebackup`. The fault and replica tests stage outages on
these, and bench/history_scale.py seeds millions of rows into one, never the machine's shared
server."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.ports import reserve_port

BIN = Path(os.environ.get("PARALLAX_PG_BIN", "/usr/local/bin"))
PG_BASEBACKUP = shutil.which("pg_basebackup") or "/usr/bin/pg_basebackup"


def available() -> str | None:
    """None when an own instance can be started here, else why not (for a skip message)."""
    for tool in (BIN / "initdb", BIN / "pg_ctl", Path(PG_BASEBACKUP)):
        if not tool.exists():
            return f"{tool} is missing"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as the postgres user"
    return None


def scratch_root() -> Path:
    """A fresh directory the postgres user can enter (pytest's tmp_path is root's alone); the
    caller removes it (`PgInstance.destroy` removes its own part)."""
    root = Path(tempfile.mkdtemp(prefix="parallax-pg-"))
    root.chmod(0o755)
    return root


def _as_postgres(argv: list[str]) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr or result.stdout}")
    return result


class PgInstance:
    """One cluster in `root`: `start()`, `stop()`, `url(database)`."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.data = root / "data"
        self._port_lock: int | None = None
        if port is None:
            port, self._port_lock = reserve_port()
        self.port = port
        self.log = root / "server.log"

    @classmethod
    def create(cls, root: Path) -> "PgInstance":
        instance = cls(root)
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        _as_postgres([str(BIN / "initdb"), "-D", str(instance.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-sync"])
        with open(instance.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {instance.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{root}'\n"
                       "fsync = off\nwal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
                       "max_connections = 200\nshared_buffers = 32MB\n")
        with open(instance.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        return instance

    def start(self) -> None:
        _as_postgres([str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", "start"])

    def stop(self, mode: str = "fast") -> None:
        _as_postgres([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop"])

    def running(self) -> bool:
        result = subprocess.run(["runuser", "-u", "postgres", "--", str(BIN / "pg_ctl"), "-D", str(self.data), "status"]
                                if os.geteuid() == 0 else [str(BIN / "pg_ctl"), "-D", str(self.data), "status"],
                                capture_output=True, text=True)
        return result.returncode == 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname={database}",
                             autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self, name: str) -> str:
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def replica(self, root: Path) -> "PgInstance":
        """A streaming replica of this (running) primary: pg_basebackup -R into `root`, started."""
        replica = PgInstance(root)
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        _as_postgres([PG_BASEBACKUP, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-D", str(replica.data),
                      "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        conf = (replica.data / "postgresql.conf").read_text()
        conf = conf.replace(f"port = {self.port}", f"port = {replica.port}").replace(
            f"unix_socket_directories = '{self.root}'", f"unix_socket_directories = '{root}'")
        (replica.data / "postgresql.conf").write_text(conf)
        replica.start()
        return replica

    def wait_replayed(self, primary: "PgInstance", timeout_s: float = 120) -> None:
        """Until this replica has replayed everything the primary has written so far."""
        with psycopg.connect(f"host=127.0.0.1 port={primary.port} user=postgres dbname=postgres", autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        deadline = time.monotonic() + timeout_s
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as conn:
            while time.monotonic() < deadline:
                done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0]  # type: ignore[index]
                if done:
                    return
                time.sleep(0.1)
        raise AssertionError(f"the replica did not replay {target} in {timeout_s} s")

    def destroy(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        if self._port_lock is not None:
            os.close(self._port_lock)  # the port may go to another instance now
            self._port_lock = None
