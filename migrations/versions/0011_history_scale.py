"""history scale and retention: per-run sample summaries beside the raw samples, and an index on
runs.created_at for the retention scan (issue 30)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 15:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs of nullable columns: no table rewrite on PostgreSQL or SQLite, so this is
    # quick on a table of millions of rows. Rows stored earlier get their summary when pruned.
    op.add_column('measurements', sa.Column('sample_count', sa.Integer(), nullable=True))
    op.add_column('measurements', sa.Column('sample_median', sa.Float(), nullable=True))
    op.add_column('measurements', sa.Column('sample_min', sa.Float(), nullable=True))
    op.add_column('measurements', sa.Column('sample_max', sa.Float(), nullable=True))
    op.add_column('measurements', sa.Column('samples_pruned_at', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_runs_created_at', 'runs', ['created_at'])
    # A bisect's jobs are read by bisect_id on every GET of it: without an index that is a scan
    # of the whole jobs table (178 ms at 360,000 jobs, bench/history_scale.py).
    op.create_index('ix_jobs_bisect_id', 'jobs', ['bisect_id'])


def downgrade() -> None:
    op.drop_index('ix_jobs_bisect_id', table_name='jobs')
    op.drop_index('ix_runs_created_at', table_name='runs')
    with op.batch_alter_table('measurements') as batch:
        for column in ('samples_pruned_at', 'sample_max', 'sample_min', 'sample_median', 'sample_count'):
            batch.drop_column(column)
