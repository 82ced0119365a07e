"""A suite's noise floor per platform (`min_change = { cpu = 0.10 }`): validated at load, kept in
the suite's row, and the smallest change reported on that platform, by the detector's alerts, by
the classification of the other platforms, and by a pull request's verdict."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from app.cli.suites import suites
from app.core.config import ConfigError, parse_catalogue
from app.core.models import AlertChange, Suite
from app.detection.service import scan_dirty
from app.jobs.catalogue import sync_catalogue
from app.pulls.verdicts import compare_levels
from tests.detection.builder import SUITE, Builder, step


def _catalogue(**suite_keys: object) -> dict:
    return {"suites": [{"name": "decode", "command": ["true"], "platforms": ["cpu", "rocm-sim"], **suite_keys}]}


def test_a_floor_per_platform_is_read_from_the_suite() -> None:
    spec = parse_catalogue(_catalogue(min_change={"cpu": 0.1}))["suites"][0]
    assert spec.min_change == {"cpu": 0.1}
    assert parse_catalogue(_catalogue())["suites"][0].min_change == {}


@pytest.mark.parametrize(("value", "named"), [
    ({"rocm": 0.1}, "'rocm' is not one of the suite's platforms (cpu, rocm-sim)"),
    ({"cpu": 10}, "min_change.cpu must be a fraction above 0 and below 1 (0.10 is 10 %), got 10"),
    ({"cpu": 0}, "must be a fraction above 0 and below 1"),
    ({"cpu": "5%"}, "got '5%'"),
    ({"cpu": True}, "got True"),
    (0.1, "min_change must be a table of platform = fraction"),
])
def test_a_bad_floor_is_refused_naming_the_key_and_the_problem(value: object, named: str) -> None:
    with pytest.raises(ConfigError, match=r"suites\[0\]\.min_change") as refused:
        parse_catalogue(_catalogue(min_change=value))
    assert named in str(refused.value)


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


def set_floor(db, floors: dict[str, float]) -> None:  # type: ignore[no-untyped-def]
    with db.session() as session:
        session.scalar(select(Suite).where(Suite.name == SUITE)).min_change = floors
        session.commit()


def alerted(db) -> list[AlertChange]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return list(session.scalars(select(AlertChange).order_by(AlertChange.id)))


def test_the_catalogue_keeps_the_floor_in_the_suite_row(app, db, settings):
    suite = next(s for s in settings.suites if s.name == SUITE)
    changed = replace(settings, suites=tuple(replace(s, min_change={"cpu": 0.08}) if s is suite else s
                                             for s in settings.suites))
    with db.session() as session:
        assert sync_catalogue(session, changed) == [f"suite {SUITE} updated"]
        session.commit()
        assert session.scalar(select(Suite.min_change).where(Suite.name == SUITE)) == {"cpu": 0.08}


def test_a_change_below_the_platform_s_floor_raises_no_alert(build, db):
    shas = build.branch(40)
    build.history(shas, "cpu", step(40, 30, 1000.0, -0.05), seed=1)
    set_floor(db, {"cpu": 0.10})
    scan_dirty(db)
    assert alerted(db) == []


def test_the_same_change_without_a_floor_is_an_alert(build, db):
    shas = build.branch(40)
    build.history(shas, "cpu", step(40, 30, 1000.0, -0.05), seed=1)
    scan_dirty(db)
    (change,) = alerted(db)
    assert change.platform == "cpu" and change.relative_change == pytest.approx(-0.05, abs=0.01)


def test_a_floor_on_one_platform_leaves_the_others_at_the_metric_s_minimum(build, db):
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, -0.05), seed=1)
    set_floor(db, {"cpu": 0.10})
    scan_dirty(db)
    (change,) = alerted(db)
    assert change.platform == "rocm"


def test_another_platform_s_change_below_its_floor_does_not_make_a_change_common(build, db):
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, -0.08), seed=1)
    build.history(shas, "cpu", step(40, 30, 3000.0, -0.06), seed=2)
    set_floor(db, {"cpu": 0.10})
    scan_dirty(db)
    (change,) = alerted(db)
    assert change.platform == "rocm" and change.details["platforms"] == ["rocm"], change.details
    assert change.classification != "common"


def test_without_the_floor_that_change_counts_on_both_platforms(build, db):
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, -0.08), seed=1)
    build.history(shas, "cpu", step(40, 30, 3000.0, -0.06), seed=2)
    scan_dirty(db)
    rows = alerted(db)
    assert {c.platform for c in rows} == {"rocm", "cpu"} and {c.classification for c in rows} == {"common"}


def rounds(level: float, n: int = 6, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(level * (1 + 0.004 * rng.standard_normal(3))) for _ in range(n)]


def test_a_pull_request_s_change_below_the_floor_is_not_worse_and_reads_unchanged_inside_it():
    base, head = rounds(1000.0, seed=1), rounds(950.0, seed=2)
    plain = compare_levels("cpu", "decode", "decode_throughput", "higher_is_better", base, head)
    floored = compare_levels("cpu", "decode", "decode_throughput", "higher_is_better", base, head, floor=0.10)
    assert plain.verdict == "worse" and plain.change == pytest.approx(-0.05, abs=0.01)
    assert floored.verdict == "unchanged"


def down_then_most_of_the_way_back() -> list[float]:
    return [1000.0] * 20 + [800.0] * 20 + [920.0] * 20


def regression_state(db) -> str:  # type: ignore[no-untyped-def]
    with db.session() as session:
        (regression,) = session.scalars(select(AlertChange).where(AlertChange.is_regression.is_(True)))
        return regression.alert.state.value


def test_within_the_floor_of_the_old_level_a_regression_counts_as_fixed(build, db):
    shas = build.branch(60)
    build.history(shas, "cpu", down_then_most_of_the_way_back(), seed=3)
    set_floor(db, {"cpu": 0.10})
    scan_dirty(db)
    assert regression_state(db) == "fixed"


def test_without_the_floor_eight_percent_short_of_the_old_level_is_not_fixed(build, db):
    shas = build.branch(60)
    build.history(shas, "cpu", down_then_most_of_the_way_back(), seed=3)
    scan_dirty(db)
    assert regression_state(db) != "fixed"


def test_suites_check_prints_the_floor_and_names_a_bad_one(tmp_path):
    path = tmp_path / "parallax.toml"
    suite = '[[suites]]\nname = "s"\ncommand = ["true"]\nplatforms = ["cpu", "rocm"]\n'
    path.write_text(suite + "min_change = { cpu = 0.10 }\n")
    result = CliRunner().invoke(suites, ["check", str(path)])
    assert result.exit_code == 0 and "noise floor (no smaller change reported there): cpu 10%" in result.output
    path.write_text(suite + "min_change = { cpu = 10 }\n")
    result = CliRunner().invoke(suites, ["check", str(path)])
    assert result.exit_code != 0 and "suites[0].min_change.cpu must be a fraction above 0 and below 1" in result.output


def commit_cell(app, sha: str) -> str:  # type: ignore[no-untyped-def]
    body = app.test_client().get(f"/commits/{sha}").get_data(as_text=True)
    start = body.index('data-platform="cpu"')
    return body[start:start + 80]


def test_the_commit_page_does_not_shade_a_change_below_the_floor(app, build, db):
    shas = build.branch(12)
    build.history(shas, "cpu", [1000.0] * 11 + [950.0], seed=5)
    assert 'data-verdict="worse-unconfirmed"' in commit_cell(app, shas[-1])
    set_floor(db, {"cpu": 0.10})
    assert 'data-verdict="unchanged"' in commit_cell(app, shas[-1])
