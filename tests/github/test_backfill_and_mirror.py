"""`parallax backfill` over a real repository, the git mirror's input checks, and the webhook
duty run through the shared background loop."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from app.cli import main
from app.core.models import Branch, BranchCommit, Commit, Job, JobReason
from app.git.mirror import Mirror
from tests.support.github import post_webhook, push_payload


@pytest.fixture
def cli_env(app, settings, tmp_path):  # type: ignore[no-untyped-def]
    config = tmp_path / "empty.toml"
    config.write_text("")
    return {"PARALLAX_DATABASE_URL": settings.database_url, "PARALLAX_CONFIG": str(config),
            "PARALLAX_DATA_DIR": settings.data_dir}


def backfill(env, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["backfill", *args], env=env, catch_exceptions=False)


def test_backfill_stores_history_and_queues_it_newest_first(cli_env, db, tracked, upstream):
    shas = upstream.commits(8)
    result = backfill(cli_env, "Codertocat/Hello-World", "--since", shas[2])
    assert result.exit_code == 0, result.output
    assert "6 commit(s) from" in result.output and "queued 6/6" in result.output
    with db.session() as session:
        series = list(session.scalars(select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
                                      .where(BranchCommit.active.is_(True)).order_by(BranchCommit.position)))
        assert series == shas[2:]
        jobs = list(session.execute(select(Commit.sha, Job.reason, Job.priority).join(Commit, Commit.id == Job.commit_id)))
        assert {sha for sha, _, _ in jobs} == set(shas[2:])
        assert {reason for _, reason, _ in jobs} == {JobReason.backfill}
        best = {sha: p for sha, _, p in jobs}
        assert best[shas[-1]] > best[shas[2]]


def test_backfill_then_push_continues_the_same_positions(client, app, db, cli_env, tracked, upstream):
    from app.github.ingest import process_pending
    shas = upstream.commits(3)
    assert backfill(cli_env, "Codertocat/Hello-World", "--since", shas[0]).exit_code == 0
    more = upstream.commits(2)
    post_webhook(client, "push", push_payload(shas[-1], more[-1], more))
    assert not process_pending(db, app.extensions["parallax.settings"]).failed
    with db.session() as session:
        positions = dict(session.execute(select(Commit.sha, BranchCommit.position)
                                         .join(BranchCommit, BranchCommit.commit_id == Commit.id)).all())
    assert [positions[s] for s in [*shas, *more]] == [0, 1, 2, 3, 4]


def test_backfill_refuses_a_commit_off_the_branch(cli_env, tracked, upstream):
    upstream.commits(2)
    upstream("checkout", "-q", "-b", "side")
    side = upstream.commit()
    upstream("checkout", "-q", "master")
    result = CliRunner().invoke(main, ["backfill", "Codertocat/Hello-World", "--since", side], env=cli_env)
    assert result.exit_code != 0
    assert "not in the first-parent history of master" in result.output


def test_backfill_refuses_a_short_sha(cli_env, tracked):
    result = CliRunner().invoke(main, ["backfill", "Codertocat/Hello-World", "--since", "abc123"], env=cli_env)
    assert result.exit_code != 0 and "40-character" in result.output


def test_backfill_refuses_an_unknown_repository(cli_env):
    result = CliRunner().invoke(main, ["backfill", "nobody/nothing", "--since", "a" * 40], env=cli_env)
    assert result.exit_code != 0 and "unknown repository" in result.output


def test_mirror_refuses_option_like_and_short_shas(tmp_path, upstream):
    upstream.commit()
    mirror = Mirror(tmp_path / "m.git", str(upstream.path))
    mirror.fetch()
    for bad in ("--output=/tmp/x", "HEAD", "a" * 39, "A" * 40):
        with pytest.raises(ValueError, match="40-character"):
            mirror.rev_list(bad)


def test_mirror_refuses_bad_ref_names(tmp_path, upstream):
    upstream.commit()
    mirror = Mirror(tmp_path / "m.git", str(upstream.path))
    for bad in ("refs/heads/../x", "-upload-pack=evil", "refs/heads/a b"):
        with pytest.raises(ValueError, match="not a valid ref name"):
            mirror.fetch(extra=[bad])


def test_mirror_reads_first_parent_order_depth_and_merge_base(tmp_path, upstream):
    shas = upstream.commits(3)
    upstream("checkout", "-q", "-b", "side")
    side = upstream.commit()
    mirror = Mirror(tmp_path / "m.git", str(upstream.path))
    mirror.fetch()
    assert mirror.rev_list(shas[-1], first_parent=True) == shas[::-1]
    assert mirror.first_parent_depth(shas[-1]) == 2
    assert mirror.merge_base(side, shas[-1]) == shas[-1]
    info = mirror.commit_info([shas[1]])[0]
    assert info.parents == (shas[0],) and info.summary == "commit 2"


def test_webhook_duty_runs_in_the_background_loop(client, app, db, tracked, upstream):
    from app.core import duties as background
    from app.core.config import use_settings
    from app.github import ingest as webhooks
    base = upstream.commit()
    head = upstream.commit()
    post_webhook(client, "push", push_payload(base, head, [head]))
    with use_settings(app.extensions["parallax.settings"]):
        done = background.run_due(db, webhooks.DUTIES)
    assert done["webhooks"].processed
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 10  # head, and the first push's before as its baseline
        assert session.scalar(select(Branch.name)) == "master"


def test_backfill_has_help():
    result = CliRunner().invoke(main, ["backfill", "--help"])
    assert result.exit_code == 0 and "--since" in result.output
