"""Service configuration: `PARALLAX_*` environment variables plus the `parallax.toml` catalogue.

The environment holds secrets and deployment settings; `parallax.toml` declares what is tracked
(repositories, platforms, suites). Both are read once into a frozen `Settings`.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar
from urllib.parse import urlsplit

from runners.adapters.registry import ADAPTERS

log = logging.getLogger(__name__)
DEFAULT_DATABASE_URL = "sqlite:///var/parallax.db"
KNOWN_PLATFORMS = ("cuda", "rocm", "cpu", "cuda-sim", "rocm-sim")
N = TypeVar("N", int, float)
D = TypeVar("D")


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message names the setting."""


@dataclass(frozen=True)
class RepositorySpec:
    name: str
    url: str
    default_branch: str = "main"


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    command: tuple[str, ...]
    platforms: tuple[str, ...]
    timeout_s: int = 1800
    repeats: int = 5
    # "every": measure every commit of a push; "head": only the head, the range kept for bisect.
    commit_policy: str = "every"
    labels: Mapping[str, str] = field(default_factory=dict)
    max_attempts: int = 3
    # A tool's own output turned into a results document (runners.adapters.registry); `outputs`
    # are paths or globs relative to $PARALLAX_OUTPUT_DIR.
    adapter: str | None = None
    outputs: tuple[str, ...] = ()
    # Run once per job before measuring (e.g. install the checked-out engine); failing is a build failure.
    setup: tuple[str, ...] | None = None
    setup_timeout_s: int = 1800
    env: Mapping[str, str] = field(default_factory=dict)
    # Pull requests: measure base against head (A/B rounds on one runner), at most this many rounds.
    pull_requests: bool = True
    pr_max_rounds: int = 12
    # The platforms a pull request is compared on; None: all of `platforms`.
    pr_platforms: tuple[str, ...] | None = None
    # A noise floor per platform: the smallest relative change that is reported there (an alert,
    # a platform counted as changed, a pull request's worse/better), for a runner whose level
    # wanders (a shared machine). The metric's own minimum (2 %) still applies where it is larger.
    min_change: Mapping[str, float] = field(default_factory=dict)


RETENTION_KINDS = ("superseded-pr-head", "bisect-probe", "other-branch", "default-branch")


@dataclass(frozen=True)
class RetentionRule:
    """`[[retention]]` in parallax.toml: raw samples of runs of this kind may be dropped once the
    run is `after_days` old (its per-run summary stays). Without a rule, nothing is dropped."""
    kind: str
    after_days: float


NOTIFICATION_EVENTS = ("alert.opened", "alert.fixed", "alert.withdrawn", "bisect.done", "pull_request.verdict")
NOTIFICATION_KINDS = ("webhook", "slack")
NOTIFICATION_KEYS = frozenset({"name", "kind", "url", "events", "repository", "platforms", "secret"})


@dataclass(frozen=True)
class NotificationSpec:
    """One `[[notifications]]` target (contract in DESIGN.md); `name` defaults to notifications[i]."""

    name: str
    kind: str
    url: str
    events: tuple[str, ...]
    repository: str | None = None
    platforms: tuple[str, ...] = ()
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str = "dev-only-insecure"
    admin_token: str | None = None
    github_webhook_secret: str | None = None
    github_token: str | None = None
    # GitHub App mode (check runs need it): the app's id and its private key (PEM file).
    github_app_id: str | None = None
    github_app_private_key_file: str | None = None
    github_api_url: str = "https://api.github.com"
    public_url: str = "http://127.0.0.1:8000"
    config_path: str | None = None
    lease_s: int = 120
    claim_max_wait_s: float = 30.0
    log_cap_bytes: int = 1_000_000
    max_document_bytes: int = 8_000_000
    max_webhook_bytes: int = 25_000_000
    max_metrics_per_document: int = 256
    max_samples_per_metric: int = 100_000
    max_items_per_document: int = 1_000_000
    max_string_chars: int = 4096  # free-form strings: document context/environment, runner facts
    read_requires_token: bool = False
    data_dir: str = "var"  # git mirrors live under <data_dir>/mirrors
    repositories: tuple[RepositorySpec, ...] = ()
    suites: tuple[SuiteSpec, ...] = ()
    platforms: tuple[str, ...] = KNOWN_PLATFORMS
    testing: bool = False
    # False: every dashboard page asks for a signed-in user (the API keeps its own tokens).
    dashboard_public: bool = True
    # Capacity per route class and worker process (app.web.capacity, docs/scaling.md).
    webhook_concurrency: int = 4
    runner_concurrency: int = 8
    dashboard_concurrency: int = 4
    longpoll_limit: int = 1000
    claim_concurrency: int = 2
    capacity_wait_s: float = 5.0
    claim_poll_s: float | None = None  # None: 5 s on PostgreSQL (NOTIFY wakes), 1 s on SQLite
    claim_notify: bool = True  # off: waiters poll (e.g. behind a pooler that cannot LISTEN)
    # The dashboard home page's content is a per-process snapshot at most this old (0: fresh).
    home_max_age_s: float = 5.0
    retention: tuple[RetentionRule, ...] = ()  # issue 30: app.retention
    # A streaming replica for dashboard pages and read APIs (app.web.session); None: the primary.
    read_database_url: str | None = None
    # Notifications and job artifacts (docs/notify.md).
    notifications: tuple[NotificationSpec, ...] = ()
    max_artifact_bytes: int = 16_000_000
    artifact_retention_days: float = 30.0
    # A/B rounds at most when an alert's good and bad commits are measured again (app.reproduce);
    # 0: alerts are not re-measured.
    reproduce_max_rounds: int = 6

    def suite(self, name: str) -> SuiteSpec | None:
        return next((s for s in self.suites if s.name == name), None)


def _number_env(env: Mapping[str, str], name: str, default: D, parse: Callable[[str], N], kind: str,
                positive: bool, minimum: float | None = None) -> N | D:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from exc
    if positive and not value > 0:  # `not >` also refuses nan
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    if minimum is not None and not minimum <= value < float("inf"):
        raise ConfigError(f"{name} must be a finite number of at least {minimum:g}, got {raw!r}")
    return value


def _int_env(env: Mapping[str, str], name: str, default: int, *, positive: bool = False) -> int:
    return _number_env(env, name, default, int, "an integer", positive)


def _float_env(env: Mapping[str, str], name: str, default: D, *, positive: bool = False,
               minimum: float | None = None) -> float | D:
    return _number_env(env, name, default, float, "a number", positive, minimum)


REPRODUCE_START_ROUNDS = 3  # A/B rounds a reproduction queues at once (app.reproduce)


def _reproduce_rounds(env: Mapping[str, str]) -> int:
    name = "PARALLAX_REPRODUCE_MAX_ROUNDS"
    value = _int_env(env, name, 6)
    if value != 0 and value < REPRODUCE_START_ROUNDS:
        raise ConfigError(f"{name} must be 0 (alerts are not measured again) or at least {REPRODUCE_START_ROUNDS} "
                          f"(the A/B rounds queued at once), got {value}")
    return value


def _bool_env(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _require(table: Mapping[str, Any], key: str, where: str, kind: type) -> Any:
    if key not in table:
        raise ConfigError(f"{where}: missing required key {key!r}")
    value = table[key]
    if not isinstance(value, kind):
        raise ConfigError(f"{where}.{key} must be {kind.__name__}, got {type(value).__name__}")
    return value


SUITE_KEYS = frozenset({"name", "command", "platforms", "timeout_s", "repeats", "commit_policy", "labels",
                        "max_attempts", "adapter", "outputs", "setup", "setup_timeout_s", "env",
                        "pull_requests", "pr_max_rounds", "pr_platforms", "min_change"})


def _adapter_keys(table: Mapping[str, Any], where: str, known_platforms: tuple[str, ...]) -> dict[str, Any]:
    """`adapter`, `outputs`, `setup`, `setup_timeout_s`, `env` of one suite, checked; also any
    misspelled key and platform, since a typo there silently measures nothing."""
    unknown = sorted(set(table) - SUITE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(SUITE_KEYS))}")
    for platform in table.get("platforms", ()):
        if platform not in known_platforms:
            raise ConfigError(f"{where}.platforms: unknown platform {platform!r}; known: {', '.join(known_platforms)}")
    adapter = table.get("adapter")
    outputs = table.get("outputs", [])
    if adapter is not None and adapter not in ADAPTERS:
        raise ConfigError(f"{where}.adapter: unknown adapter {adapter!r}; known: {', '.join(sorted(ADAPTERS))}")
    if not isinstance(outputs, list) or not all(isinstance(o, str) and o.strip() for o in outputs):
        raise ConfigError(f"{where}.outputs must be a list of paths or globs (strings)")
    if adapter is not None and not outputs:
        raise ConfigError(f"{where}.outputs: adapter {adapter!r} needs the files it reads, relative to $PARALLAX_OUTPUT_DIR")
    if outputs and adapter is None:
        raise ConfigError(f"{where}.outputs is set but no adapter reads them; add adapter = ...")
    for output in outputs:
        if output.startswith("/") or ".." in output.split("/"):
            raise ConfigError(f"{where}.outputs: {output!r} must be relative to $PARALLAX_OUTPUT_DIR and stay inside it")
    setup = table.get("setup")
    if setup is not None and (not isinstance(setup, list) or not setup
                              or not all(isinstance(part, str) and part for part in setup)):
        raise ConfigError(f"{where}.setup must be a non-empty list of strings (an argv)")
    setup_timeout_s = table.get("setup_timeout_s", 1800)
    if not isinstance(setup_timeout_s, int) or isinstance(setup_timeout_s, bool) or setup_timeout_s <= 0:
        raise ConfigError(f"{where}.setup_timeout_s must be a positive integer, got {setup_timeout_s!r}")
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{where}.env must be a table of strings, e.g. env = {{ CUDA_VISIBLE_DEVICES = \"0\" }}")
    reserved = sorted(k for k in env if k.startswith("PARALLAX_"))
    if reserved:
        raise ConfigError(f"{where}.env: {', '.join(reserved)} belong to the runner and cannot be set per suite")
    return {"adapter": adapter, "outputs": tuple(outputs), "setup": tuple(setup) if setup else None,
            "setup_timeout_s": setup_timeout_s, "env": dict(env)}


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    """A TOML list of strings; a bare string (`platforms = "cpu"`) is named as the mistake it is."""
    if isinstance(value, str):
        raise ConfigError(f"{where} must be a list of strings: write [{json.dumps(value)}], not {json.dumps(value)}")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _min_change(value: Any, where: str, suite_platforms: tuple[str, ...]) -> dict[str, float]:
    """`min_change = { cpu = 0.10 }`: a fraction above 0 and below 1 for some of the suite's platforms."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table of platform = fraction, e.g. {{ cpu = 0.10 }}, got {value!r}")
    floors = {}
    for platform, fraction in value.items():
        if platform not in suite_platforms:
            raise ConfigError(f"{where}: {platform!r} is not one of the suite's platforms ({', '.join(suite_platforms)})")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise ConfigError(f"{where}.{platform} must be a fraction above 0 and below 1 (0.10 is 10 %), "
                              f"got {fraction!r}")
        floors[str(platform)] = float(fraction)
    return floors


def parse_catalogue(data: Mapping[str, Any], source: str = "parallax.toml") -> dict[str, Any]:
    """Validate the `[[repositories]]`, `[[suites]]` and `platforms` tables of parallax.toml."""
    repositories = []
    for i, table in enumerate(data.get("repositories", [])):
        where = f"{source}: repositories[{i}]"
        repositories.append(RepositorySpec(
            name=_require(table, "name", where, str),
            url=_require(table, "url", where, str),
            default_branch=table.get("default_branch", "main"),
        ))
    platforms = _string_list(data.get("platforms", KNOWN_PLATFORMS), f"{source}: platforms")
    suites = []
    for i, table in enumerate(data.get("suites", [])):
        where = f"{source}: suites[{i}]"
        command = _require(table, "command", where, list)
        if not command or not all(isinstance(part, str) for part in command):
            raise ConfigError(f"{where}.command must be a non-empty list of strings (an argv)")
        suite_platforms = _string_list(table.get("platforms", platforms), f"{where}.platforms")
        policy = table.get("commit_policy", "every")
        if policy not in ("every", "head"):
            raise ConfigError(f"{where}.commit_policy must be 'every' or 'head', got {policy!r}")
        timeout_s = table.get("timeout_s", 1800)
        repeats = table.get("repeats", 5)
        pr_max_rounds = table.get("pr_max_rounds", 12)
        pull_requests = table.get("pull_requests", True)
        if not isinstance(pull_requests, bool):
            raise ConfigError(f"{where}.pull_requests must be true or false, got {pull_requests!r}")
        pr_platforms = None
        if "pr_platforms" in table:
            pr_platforms = _string_list(table["pr_platforms"], f"{where}.pr_platforms")
            strangers = [p for p in pr_platforms if p not in suite_platforms]
            if not pr_platforms or strangers:
                raise ConfigError(f"{where}.pr_platforms must name some of the suite's platforms "
                                  f"({', '.join(suite_platforms)}), got {list(pr_platforms)!r}")
        min_change = _min_change(table.get("min_change", {}), f"{where}.min_change", suite_platforms)
        for key, value in (("timeout_s", timeout_s), ("repeats", repeats), ("pr_max_rounds", pr_max_rounds)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}.{key} must be a positive integer, got {value!r}")
        suites.append(SuiteSpec(
            name=_require(table, "name", where, str),
            command=tuple(command),
            platforms=suite_platforms,
            timeout_s=timeout_s,
            repeats=repeats,
            commit_policy=policy,
            labels=dict(table.get("labels", {})),
            max_attempts=int(table.get("max_attempts", 3)),
            pull_requests=pull_requests,
            pr_max_rounds=pr_max_rounds,
            pr_platforms=pr_platforms,
            min_change=min_change,
            **_adapter_keys(table, where, known_platforms=platforms),
        ))
    return {"repositories": tuple(repositories), "suites": tuple(suites), "platforms": platforms,
            "retention": parse_retention(data.get("retention", []), source)}


def parse_retention(tables: Any, source: str) -> tuple[RetentionRule, ...]:
    """`[[retention]]` tables: a known `kind`, once each, and a non-negative `after_days`."""
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: retention must be an array of tables ([[retention]])")
    rules: dict[str, RetentionRule] = {}
    for i, table in enumerate(tables):
        where = f"{source}: retention[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = sorted(set(table) - {"kind", "after_days"})
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key (allowed: kind, after_days)")
        kind = table.get("kind")
        if kind not in RETENTION_KINDS:
            raise ConfigError(f"{where}.kind must be one of {', '.join(RETENTION_KINDS)}, got {kind!r}")
        if kind in rules:
            raise ConfigError(f"{where}.kind: {kind!r} has a rule already")
        days = table.get("after_days")
        if not isinstance(days, (int, float)) or isinstance(days, bool) or not days >= 0 or days == float("inf"):
            raise ConfigError(f"{where}.after_days must be a number of days >= 0, got {days!r}")
        rules[kind] = RetentionRule(kind, float(days))
    return tuple(rules.values())


def parse_notifications(tables: Any, source: str, known_platforms: tuple[str, ...]) -> tuple[NotificationSpec, ...]:
    """The `[[notifications]]` tables, checked: a typo in a URL or an event name would silently
    tell nobody, so each is refused with the entry and key it concerns."""
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: notifications must be an array of tables ([[notifications]])")
    specs: list[NotificationSpec] = []
    for i, table in enumerate(tables):
        where = f"{source}: notifications[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = sorted(set(table) - NOTIFICATION_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; known: "
                              f"{', '.join(sorted(NOTIFICATION_KEYS))}")
        kind = _require(table, "kind", where, str)
        if kind not in NOTIFICATION_KINDS:
            raise ConfigError(f"{where}.kind must be one of {', '.join(NOTIFICATION_KINDS)}, got {kind!r}")
        url = _require(table, "url", where, str)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{where}.url must be an http:// or https:// URL, got {url!r}")
        events = _require(table, "events", where, list)
        if not events:
            raise ConfigError(f"{where}.events must name at least one of {', '.join(NOTIFICATION_EVENTS)}")
        for event in events:
            if event not in NOTIFICATION_EVENTS:
                raise ConfigError(f"{where}.events: unknown event {event!r}; known: {', '.join(NOTIFICATION_EVENTS)}")
        platforms = table.get("platforms", [])
        if not isinstance(platforms, list) or not all(isinstance(p, str) for p in platforms):
            raise ConfigError(f"{where}.platforms must be a list of platform names")
        for platform in platforms:
            if platform not in known_platforms:
                raise ConfigError(f"{where}.platforms: unknown platform {platform!r}; known: {', '.join(known_platforms)}")
        repository = table.get("repository")
        if repository is not None and (not isinstance(repository, str) or not repository):
            raise ConfigError(f"{where}.repository must be a repository name")
        secret = table.get("secret")
        if secret is not None and (kind != "webhook" or not isinstance(secret, str) or not secret):
            raise ConfigError(f"{where}.secret: a non-empty string, for kind = \"webhook\" only "
                              "(a Slack incoming-webhook URL is its own secret)")
        name = table.get("name", f"notifications[{i}]")
        if not isinstance(name, str) or not name or len(name) > 100:
            raise ConfigError(f"{where}.name must be a string of 1 to 100 characters")
        if any(spec.name == name for spec in specs):
            raise ConfigError(f"{where}.name: {name!r} is used by an earlier entry")
        specs.append(NotificationSpec(name=name, kind=kind, url=url, events=tuple(dict.fromkeys(events)),
                                      repository=repository, platforms=tuple(platforms), secret=secret))
    return tuple(specs)


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from the environment (default: os.environ) and the catalogue file."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {
        "database_url": env.get("PARALLAX_DATABASE_URL") or DEFAULT_DATABASE_URL,
        "secret_key": env.get("PARALLAX_SECRET_KEY") or "dev-only-insecure",
        "admin_token": env.get("PARALLAX_ADMIN_TOKEN") or None,
        "github_webhook_secret": env.get("PARALLAX_GITHUB_WEBHOOK_SECRET") or None,
        "github_token": env.get("PARALLAX_GITHUB_TOKEN") or None,
        "github_app_id": env.get("PARALLAX_GITHUB_APP_ID") or None,
        "github_app_private_key_file": env.get("PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE") or None,
        "github_api_url": (env.get("PARALLAX_GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
        "public_url": (env.get("PARALLAX_PUBLIC_URL") or "http://127.0.0.1:8000").rstrip("/"),
        "lease_s": _int_env(env, "PARALLAX_LEASE_S", 120),
        "log_cap_bytes": _int_env(env, "PARALLAX_LOG_CAP_BYTES", 1_000_000),
        "max_document_bytes": _int_env(env, "PARALLAX_MAX_DOCUMENT_BYTES", 8_000_000),
        "max_webhook_bytes": _int_env(env, "PARALLAX_MAX_WEBHOOK_BYTES", 25_000_000),
        "max_metrics_per_document": _int_env(env, "PARALLAX_MAX_METRICS_PER_DOCUMENT", 256),
        "max_samples_per_metric": _int_env(env, "PARALLAX_MAX_SAMPLES_PER_METRIC", 100_000),
        "max_items_per_document": _int_env(env, "PARALLAX_MAX_ITEMS_PER_DOCUMENT", 1_000_000),
        "max_string_chars": _int_env(env, "PARALLAX_MAX_STRING_CHARS", 4096),
        "read_requires_token": _bool_env(env, "PARALLAX_READ_REQUIRES_TOKEN", False),
        "data_dir": env.get("PARALLAX_DATA_DIR") or "var",
        "dashboard_public": _bool_env(env, "PARALLAX_DASHBOARD_PUBLIC", True),
        "webhook_concurrency": _int_env(env, "PARALLAX_WEBHOOK_CONCURRENCY", 4, positive=True),
        "runner_concurrency": _int_env(env, "PARALLAX_RUNNER_CONCURRENCY", 8, positive=True),
        "dashboard_concurrency": _int_env(env, "PARALLAX_DASHBOARD_CONCURRENCY", 4, positive=True),
        "longpoll_limit": _int_env(env, "PARALLAX_LONGPOLL_LIMIT", 1000, positive=True),
        "claim_concurrency": _int_env(env, "PARALLAX_CLAIM_CONCURRENCY", 2, positive=True),
        "capacity_wait_s": _float_env(env, "PARALLAX_CAPACITY_WAIT_S", 5.0, positive=True),
        "claim_poll_s": _float_env(env, "PARALLAX_CLAIM_POLL_S", None, positive=True),
        "claim_notify": _bool_env(env, "PARALLAX_CLAIM_NOTIFY", True),
        "home_max_age_s": _float_env(env, "PARALLAX_HOME_MAX_AGE_S", 5.0, minimum=0.0),
        "read_database_url": env.get("PARALLAX_READ_DATABASE_URL") or None,
        "max_artifact_bytes": _int_env(env, "PARALLAX_MAX_ARTIFACT_BYTES", 16_000_000, positive=True),
        "artifact_retention_days": _float_env(env, "PARALLAX_ARTIFACT_RETENTION_DAYS", 30.0, positive=True),
        "reproduce_max_rounds": _reproduce_rounds(env),
    }
    if bool(values["github_app_id"]) != bool(values["github_app_private_key_file"]):
        missing = "PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE" if values["github_app_id"] else "PARALLAX_GITHUB_APP_ID"
        raise ConfigError(f"GitHub App mode needs both PARALLAX_GITHUB_APP_ID and PARALLAX_GITHUB_APP_PRIVATE_KEY_FILE; "
                          f"{missing} is not set")
    config_path = overrides.pop("config_path", None) or env.get("PARALLAX_CONFIG")
    if config_path is None and Path("parallax.toml").is_file():
        config_path = "parallax.toml"
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            raise ConfigError(f"PARALLAX_CONFIG points to {config_path!r}, which is not a file")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path}: not valid TOML: {exc}") from exc
        values.update(parse_catalogue(data, source=str(config_path)))
        values["notifications"] = parse_notifications(data.get("notifications", []), str(config_path),
                                                      values["platforms"])
        values["config_path"] = str(path)
    values.update(overrides)
    return Settings(**values)


# ---------------------------------------------------------------- the settings in force

_settings_var: contextvars.ContextVar[Settings | None] = contextvars.ContextVar("parallax_settings", default=None)
_providers: list[Callable[[], Settings | None]] = []


@contextmanager
def use_settings(settings: Settings) -> Iterator[None]:
    """Settings for code that runs outside a request (background duties, the CLI, tests)."""
    token = _settings_var.set(settings)
    try:
        yield
    finally:
        _settings_var.reset(token)


def add_settings_provider(provider: Callable[[], Settings | None]) -> None:
    """Let an entry point say where its settings live (the web layer: the current Flask app),
    without this module knowing of it."""
    if provider not in _providers:
        _providers.append(provider)


@lru_cache(maxsize=1)
def _env_settings() -> Settings:
    try:
        return load_settings()
    except ConfigError:
        # A hook must never break ingestion; without readable settings there is no token, so no
        # commit statuses are recorded (the service itself reports the configuration error).
        log.warning("settings unreadable; falling back to defaults in this process", exc_info=True)
        return Settings()


def current_settings() -> Settings:
    """`use_settings` first, then a registered provider, then the environment."""
    explicit = _settings_var.get()
    if explicit is not None:
        return explicit
    for provider in _providers:
        found = provider()
        if found is not None:
            return found
    return _env_settings()
