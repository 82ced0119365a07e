"""What every process the runner starts for a job gets between fork and exec: death with the
runner (`PR_SET_PDEATHSIG`), so a crashed runner does not leave a benchmark holding the GPU."""
from __future__ import annotations

import ctypes
import signal
from typing import Callable

PR_SET_PDEATHSIG = 1

try:  # resolved here, not in the forked child, where loading a library could deadlock
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def die_with_parent() -> None:
    """A `preexec_fn`: if the agent is SIGKILLed, the kernel kills this child too."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
