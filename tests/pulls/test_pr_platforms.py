"""`pr_platforms`: a suite compares pull requests on a subset of its platforms, checked at load."""
from __future__ import annotations

import pytest

from app.core.config import ConfigError, parse_catalogue
from app.core.models import Suite
from app.pulls.comparisons import pr_platforms


def _catalogue(**suite_keys: object) -> dict:
    return {"suites": [{"name": "decode", "command": ["true"], "platforms": ["cpu", "cuda-sim", "rocm-sim"],
                        **suite_keys}]}


def test_pr_platforms_default_to_every_platform_of_the_suite() -> None:
    spec = parse_catalogue(_catalogue())["suites"][0]
    assert spec.pr_platforms is None
    assert pr_platforms(Suite(name="decode", platforms=list(spec.platforms), pr_platforms=None)) == \
        ["cpu", "cuda-sim", "rocm-sim"]


def test_pr_platforms_keep_the_suite_order_and_leave_the_others_out() -> None:
    spec = parse_catalogue(_catalogue(pr_platforms=["rocm-sim", "cuda-sim"]))["suites"][0]
    suite = Suite(name="decode", platforms=list(spec.platforms), pr_platforms=list(spec.pr_platforms))
    assert pr_platforms(suite) == ["cuda-sim", "rocm-sim"]


@pytest.mark.parametrize("value", [["rocm"], [], "rocm-sim"])
def test_pr_platforms_outside_the_suite_are_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"suites\[0\]\.pr_platforms"):
        parse_catalogue(_catalogue(pr_platforms=value))
