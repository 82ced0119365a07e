"""The GPU stream simulator: virtual streams and events timed by a platform profile, with a race
detector (see docs/sim.md). ``make_sim_device(Platform("sim", "rocm-mi300x"))`` builds the device."""
from __future__ import annotations

from scheduler_core.platform import Platform
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.profile import Profile, ProfileError, available, load_profile
from scheduler_core.sim.race import Hazard, RaceDetector

__all__ = ["Hazard", "Profile", "ProfileError", "RaceDetector", "SimDevice", "available", "load_profile",
           "make_sim_device"]


def make_sim_device(platform: Platform) -> SimDevice:
    return SimDevice(platform)
