"""series cache stamp: `repositories.series_epoch`, bumped when a repository's history changes
under the same runs, and an index on runs (platform, id) so that a platform's run count and
newest run id are one index-only scan (issue 30)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 01:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A NOT NULL column with a constant default: no table rewrite on PostgreSQL 11+ (and the
    # repositories table is a handful of rows anyway).
    with op.batch_alter_table('repositories', schema=None) as batch_op:
        batch_op.add_column(sa.Column('series_epoch', sa.Integer(), nullable=False, server_default='0'))
    op.create_index('ix_runs_platform_id', 'runs', ['platform', 'id'])


def downgrade() -> None:
    op.drop_index('ix_runs_platform_id', table_name='runs')
    with op.batch_alter_table('repositories', schema=None) as batch_op:
        batch_op.drop_column('series_epoch')
