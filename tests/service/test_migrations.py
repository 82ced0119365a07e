"""The schema has one source of truth per side: models and migrations must agree."""
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from app.core.db import make_engine
from app.core.migrate import SchemaBehind, current_revision, head_revision, upgrade
from app.core.models import Base
from app.web import create_app
from tests.support.settings import make_settings


def test_models_and_migrations_agree(database_url):
    engine = make_engine(database_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == []


@pytest.mark.parametrize("times", [1, 2])
def test_upgrade_brings_an_empty_database_to_head(tmp_path, times):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    for _ in range(times):
        upgrade(url)
    engine = make_engine(url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_service_refuses_an_unmigrated_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(SchemaBehind, match="parallax db upgrade"):
        create_app(make_settings(url))


def test_service_refuses_a_database_behind_head(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "base")
    with pytest.raises(SchemaBehind, match="Run `parallax db upgrade`"):
        create_app(make_settings(url))
