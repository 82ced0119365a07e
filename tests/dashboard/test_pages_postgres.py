"""The dashboard's windowed queries on PostgreSQL: with branch history and, without it, in the
order commits were queued."""
import html
import re

import pytest
from sqlalchemy import delete

from app.core.models import Branch, BranchCommit
from app.detection.service import rescan
from app.web import create_app
from bench.history import Step, seed
from tests.dashboard.conftest import ROCM_ONLY_AT
from tests.support.settings import make_settings

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_app(postgres_url):
    flask_app = create_app(make_settings(postgres_url))
    yield flask_app
    flask_app.extensions["parallax.db"].engine.dispose()


def rocm_change_on_commit_page(client, sha: str) -> float:
    body = client.get(f"/commits/{sha}").get_data(as_text=True)
    match = re.search(r'data-platform="rocm" data-verdict="[\w-]+">\s*<strong>[^<]+</strong>.*?'
                      r'<span class="change">([-+][0-9.]+)%', body, re.S)
    return float(match.group(1))


@pytest.mark.parametrize("with_branch_history", [True, False])
def test_pages_read_the_previous_measured_commit_on_postgres(pg_app, with_branch_history):
    db = pg_app.extensions["parallax.db"]
    with db.session() as session:
        history = seed(session, commits=40, steps=(Step(ROCM_ONLY_AT, ("rocm",), 0.85),))
        if not with_branch_history:
            session.execute(delete(BranchCommit))
            session.execute(delete(Branch))
    rescan(db)
    client = pg_app.test_client()
    assert -20 < rocm_change_on_commit_page(client, history.shas[ROCM_ONLY_AT]) < -10
    assert -3 < rocm_change_on_commit_page(client, history.shas[ROCM_ONLY_AT + 1]) < 3
    home = html.unescape(client.get("/").get_data(as_text=True))
    assert home.count('data-platform="rocm"') == 30
    compare = client.get(f"/compare?repository=demo/engine&a={history.shas[0]}&b={history.shas[-1]}")
    assert compare.status_code == 200 and 'data-platform="rocm" data-metric="output_throughput"' in compare.get_data(as_text=True)
    series = client.get("/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput")
    assert series.status_code == 200 and series.get_data(as_text=True).count('class="point"') == 3 * 40
