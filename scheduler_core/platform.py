"""Platform detection and the per-platform stream-synchronisation policy of the overlap scheduler.

The overlap scheduler has three synchronisation choices whose cost depends on the vendor. They are
kept here as data, so the scheduler asks the policy and never the platform:

- ``war_barrier``: ``schedule_stream.wait_stream(forward_stream)`` after launching a batch, so the
  scheduler does not overwrite request->token rows the in-flight forward still reads. Free on
  CUDA; cost ~20 % throughput and timeouts on ROCm, so it is CUDA-only.
- ``copy_stream``: the sampled tokens' device->host copy runs on a dedicated copy stream (gated by
  ``copy_stream.wait_stream(forward_stream)`` and a ``copy_done`` event) instead of the forward
  stream. Cost ROCm 10-20 % decode throughput, so ROCm copies on the forward stream.
- ``fwd_prepare_d2h``: a forward-prepare D2H stream with pinned host buffers, which compensates for
  the barrier's occupancy cost on CUDA; other platforms use the plain ``.cpu()`` path. Outside
  speculative decoding no platform blocks on a per-step sequence-length copy.
- ``war_barrier_read_gated``: with the barrier on, the schedule stream waits on the forward's
  *shared-read-done* event (recorded right after its last read of ``req_to_token`` / ``seq_lens``)
  instead of ``wait_stream(forward)``, as upstream after #28363; off is the forced-coarse barrier.
- ``hip_publish_sync``: the HIP workaround of #26672: the host synchronises on the forward's
  ``publish_ready`` event before the speculative sequence-length copy, instead of a device-side wait.

``PARALLAX_DEVICE`` picks the platform (``auto``/unset, ``cpu``, ``cuda``, ``rocm`` or
``sim:<profile>``); ``PARALLAX_SYNC_PRESET`` replays the switches SGLang had right after a pull
request (``sglang-26380``: the WAR barrier and the forward-prepare D2H stream on every platform;
``sglang-29075``: the decode-result copy on a dedicated copy stream on every platform;
``sglang-28363``: the read-gated barrier; ``sglang-36054``: the open proposal to turn the read-gated
barrier on for ROCm too); ``PARALLAX_WAR_BARRIER``, ``PARALLAX_COPY_STREAM``,
``PARALLAX_FWD_PREPARE_D2H``, ``PARALLAX_WAR_BARRIER_READ_GATED`` and ``PARALLAX_HIP_PUBLISH_SYNC``
(``0`` or ``1``) then override one switch each for experiments. See docs/sync_policy.md.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, cast

import torch

Vendor = Literal["cuda", "rocm", "cpu"]
PlatformKind = Literal["cuda", "rocm", "cpu", "sim"]

DEVICE_ENV = "PARALLAX_DEVICE"
# Profile prefix -> the vendor whose policy a simulated platform follows.
SIM_VENDOR_PREFIXES: Mapping[str, Vendor] = {"cuda": "cuda", "rocm": "rocm", "hip": "rocm"}
_PROFILE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class PlatformError(ValueError):
    """A platform or sync-policy setting that cannot be honoured; the message names the cause."""


@dataclass(frozen=True)
class Platform:
    """Where the engine runs: a real vendor, or the simulator with a named timing profile."""

    kind: PlatformKind
    profile: str | None = None  # only for kind == "sim", e.g. "rocm-mi300x"

    def __post_init__(self) -> None:
        if self.kind not in ("cuda", "rocm", "cpu", "sim"):
            raise PlatformError(f"unknown platform kind {self.kind!r}")
        if (self.kind == "sim") != (self.profile is not None):
            raise PlatformError("a simulated platform needs a profile, and only it has one")
        if self.kind == "sim":
            _sim_vendor(self.profile or "")  # validates the profile name

    @property
    def vendor(self) -> Vendor:
        """The vendor whose sync policy applies (a simulated profile follows its vendor)."""
        if self.kind == "sim":
            return _sim_vendor(self.profile or "")
        return cast(Vendor, self.kind)

    @property
    def simulated(self) -> bool:
        return self.kind == "sim"

    @property
    def name(self) -> str:
        """``cuda``, ``rocm``, ``cpu`` or ``sim:<profile>`` (the PARALLAX_DEVICE spelling)."""
        return f"sim:{self.profile}" if self.kind == "sim" else self.kind

    @property
    def label(self) -> str:
        """The runner ``platform`` label: ``cuda``, ``rocm``, ``cpu``, ``cuda-sim``, ``rocm-sim``."""
        return f"{self.vendor}-sim" if self.kind == "sim" else self.kind

    def environment(self) -> dict[str, Any]:
        """The results document's ``environment`` section for this platform."""
        device_name = "simulated" if self.simulated else "cpu"
        if self.kind in ("cuda", "rocm") and torch.cuda.is_available():
            device_name = torch.cuda.get_device_name(0)
        return {
            "platform": self.label,
            "device": device_name,
            "torch": torch.__version__.split("+")[0],
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "simulated": self.simulated,
            "sim_profile": self.profile,
        }


def _sim_vendor(profile: str) -> Vendor:
    if not _PROFILE_RE.match(profile):
        raise PlatformError(
            f"{DEVICE_ENV}: simulator profile {profile!r} is not a valid name "
            "(lowercase letters, digits, '.', '_', '-'; e.g. sim:rocm-mi300x)")
    for prefix, vendor in SIM_VENDOR_PREFIXES.items():
        if profile.startswith(prefix):
            return vendor
    raise PlatformError(
        f"{DEVICE_ENV}: unknown simulator profile {profile!r}: its name must start with one of "
        f"{sorted(SIM_VENDOR_PREFIXES)} to say which vendor's sync policy it follows "
        "(e.g. sim:cuda-h100, sim:rocm-mi300x)")


def detect_hardware() -> Vendor:
    """The vendor of the local torch build and GPU: CUDA, HIP (reported as ``rocm``) or CPU.

    CUDA needs ``torch.cuda.is_available()`` and ``torch.version.cuda``; HIP needs
    ``torch.version.hip`` and a visible GPU (``torch.cuda`` is HIP on ROCm builds). A GPU build
    without a visible GPU runs on the CPU.
    """
    if not torch.cuda.is_available():
        return "cpu"
    if getattr(torch.version, "hip", None):
        return "rocm"
    if torch.version.cuda:
        return "cuda"
    return "cpu"


def detect_platform(environ: Mapping[str, str] | None = None) -> Platform:
    """The platform named by ``PARALLAX_DEVICE``, or the detected hardware when unset/``auto``."""
    env = os.environ if environ is None else environ
    requested = env.get(DEVICE_ENV, "").strip()
    if requested in ("", "auto"):
        return Platform(detect_hardware())
    if requested.startswith("sim:"):
        return Platform("sim", requested[len("sim:"):])
    if requested == "cpu":
        return Platform("cpu")
    if requested in ("cuda", "rocm"):
        found = detect_hardware()
        if found != requested:
            raise PlatformError(
                f"{DEVICE_ENV}={requested} but this machine's torch provides {found!r} "
                f"(torch.version.cuda={torch.version.cuda!r}, "
                f"torch.version.hip={getattr(torch.version, 'hip', None)!r}, "
                f"torch.cuda.is_available()={torch.cuda.is_available()})")
        return Platform(requested)
    raise PlatformError(
        f"{DEVICE_ENV}={requested!r} is not understood: use auto, cpu, cuda, rocm or sim:<profile>")


@dataclass(frozen=True)
class SyncPolicy:
    """The synchronisation switches of the overlap loops (see the module docstring)."""

    war_barrier: bool
    copy_stream: bool
    fwd_prepare_d2h: bool
    war_barrier_read_gated: bool = False  # False: the coarse wait_stream(forward) barrier
    hip_publish_sync: bool = False


# Defaults encode the upstream fixes: the WAR barrier (read-gated since #28363) and its
# forward-prepare D2H stream are CUDA-only, ROCm copies results on the forward stream and takes the
# HIP publish_ready synchronisation (#26672). The CPU's work is synchronous, so every switch would
# only add bookkeeping there.
DEFAULT_POLICIES: Mapping[Vendor, SyncPolicy] = {
    "cuda": SyncPolicy(war_barrier=True, copy_stream=True, fwd_prepare_d2h=True, war_barrier_read_gated=True),
    "rocm": SyncPolicy(war_barrier=False, copy_stream=False, fwd_prepare_d2h=False),
    "cpu": SyncPolicy(war_barrier=False, copy_stream=False, fwd_prepare_d2h=False),
}
# The HIP publish_ready workaround is ROCm's alone; kept off the line above, which the demo's story
# edits as text (app/demo/story.py).
DEFAULT_POLICIES = {**DEFAULT_POLICIES, "rocm": dataclasses.replace(DEFAULT_POLICIES["rocm"], hip_publish_sync=True)}

PRESET_ENV = "PARALLAX_SYNC_PRESET"


@dataclass(frozen=True)
class Preset:
    """The switches SGLang's overlap scheduler had right after one pull request, on every platform."""

    name: str
    description: str
    switches: Mapping[str, bool]


# Fields a preset leaves out keep the platform's default (the code of the time followed it).
PRESETS: Mapping[str, Preset] = {
    "sglang-26380": Preset(
        "sglang-26380",
        "right after SGLang #26380: schedule_stream.wait_stream(forward_stream) on every platform, and the "
        "forward-prepare D2H stream with pinned buffers created for CUDA and HIP (`_is_cuda or _is_hip`); "
        "decode results still copied on the forward stream",
        {"war_barrier": True, "fwd_prepare_d2h": True, "copy_stream": False,
         "war_barrier_read_gated": False, "hip_publish_sync": False}),
    "sglang-29075": Preset(
        "sglang-29075",
        "right after SGLang #29075: the decode-result D2H copy on a dedicated copy stream "
        "(copy_stream.wait_stream(forward_stream) + copy_done event) on every platform; the WAR barrier "
        "and forward-prepare D2H stream already CUDA-only",
        {"copy_stream": True}),
    "sglang-28363": Preset(
        "sglang-28363",
        "SGLang after #28363 (and #31687, #34052, #34916): the WAR barrier waits on the forward's "
        "shared-read-done event instead of the whole forward stream; still CUDA-only",
        {"war_barrier_read_gated": True}),
    "sglang-36054": Preset(
        "sglang-36054",
        "the open proposal #36054: the read-gated WAR barrier on by default on ROCm too (and so on every "
        "platform); Parallax's forecast of what it costs",
        {"war_barrier": True, "war_barrier_read_gated": True}),
}


def parse_preset(environ: Mapping[str, str]) -> Preset | None:
    raw = environ.get(PRESET_ENV, "").strip()
    if raw in ("", "none"):
        return None
    if raw not in PRESETS:
        raise PlatformError(f"{PRESET_ENV}={raw!r} is not a known preset: use one of {', '.join(PRESETS)} (or none)")
    return PRESETS[raw]


# Environment variable -> the one SyncPolicy field it sets.
OVERRIDE_ENV: Mapping[str, str] = {
    "PARALLAX_WAR_BARRIER": "war_barrier",
    "PARALLAX_COPY_STREAM": "copy_stream",
    "PARALLAX_FWD_PREPARE_D2H": "fwd_prepare_d2h",
    "PARALLAX_WAR_BARRIER_READ_GATED": "war_barrier_read_gated",
    "PARALLAX_HIP_PUBLISH_SYNC": "hip_publish_sync",
}


@dataclass(frozen=True)
class Override:
    """One environment override as applied: which variable set which field, and the default."""

    variable: str
    field: str
    value: bool
    default: bool

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ActivePolicy:
    """The sync policy in force: the platform's default with the environment's overrides applied.

    Read the switches as ``policy.war_barrier`` etc.; write ``policy.as_context()`` into every
    results document's ``context``.
    """

    platform: Platform
    sync: SyncPolicy
    overrides: tuple[Override, ...] = ()
    preset: str | None = None

    @property
    def war_barrier(self) -> bool:
        return self.sync.war_barrier

    @property
    def copy_stream(self) -> bool:
        return self.sync.copy_stream

    @property
    def fwd_prepare_d2h(self) -> bool:
        return self.sync.fwd_prepare_d2h

    @property
    def war_barrier_read_gated(self) -> bool:
        return self.sync.war_barrier_read_gated

    @property
    def hip_publish_sync(self) -> bool:
        return self.sync.hip_publish_sync

    def as_context(self) -> dict[str, Any]:
        return {
            "platform": self.platform.label,
            "sync_policy": dataclasses.asdict(self.sync),
            "sync_policy_overrides": [o.as_dict() for o in self.overrides],
            "sync_preset": self.preset,
        }


def default_policy(platform: Platform) -> SyncPolicy:
    """The table's policy for a platform (a simulated one follows its profile's vendor)."""
    return DEFAULT_POLICIES[platform.vendor]


def parse_overrides(environ: Mapping[str, str], base: SyncPolicy) -> tuple[Override, ...]:
    """The overrides set in ``environ`` (``0`` or ``1``; empty counts as unset), in table order."""
    found = []
    for variable, field in OVERRIDE_ENV.items():
        raw = environ.get(variable, "").strip()
        if raw == "":
            continue
        if raw not in ("0", "1"):
            raise PlatformError(f"{variable}={raw!r} is not understood: use 0 (off) or 1 (on)")
        found.append(Override(variable, field, raw == "1", getattr(base, field)))
    return tuple(found)


def resolve_policy(platform: Platform | None = None,
                   environ: Mapping[str, str] | None = None) -> ActivePolicy:
    """The policy in force for ``platform`` (detected when None) under ``environ`` (os.environ)."""
    env = os.environ if environ is None else environ
    platform = detect_platform(env) if platform is None else platform
    base = default_policy(platform)
    preset = parse_preset(env)
    if preset is not None:
        base = dataclasses.replace(base, **preset.switches)
    overrides = parse_overrides(env, base)
    sync = dataclasses.replace(base, **{o.field: o.value for o in overrides})
    return ActivePolicy(platform, sync, overrides, preset.name if preset else None)
