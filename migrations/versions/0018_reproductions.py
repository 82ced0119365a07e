"""alert reproductions: an alert's good and bad commits measured again, A/B on one runner
(`reproductions`, `reproduction_jobs`)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 23:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'reproductions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('alert_id', sa.Integer(), nullable=False),
        sa.Column('suite_id', sa.Integer(), nullable=False),
        sa.Column('platform', sa.String(length=64), nullable=False),
        sa.Column('good_commit_id', sa.Integer(), nullable=False),
        sa.Column('bad_commit_id', sa.Integer(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('rounds', sa.Integer(), nullable=False),
        sa.Column('runner_id', sa.Integer(), nullable=True),
        sa.Column('verdicts', sa.JSON(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['alert_id'], ['alerts.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['suite_id'], ['suites.id']),
        sa.ForeignKeyConstraint(['good_commit_id'], ['commits.id']),
        sa.ForeignKeyConstraint(['bad_commit_id'], ['commits.id']),
        sa.ForeignKeyConstraint(['runner_id'], ['runners.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_reproductions_alert_id', 'reproductions', ['alert_id'])
    op.create_index('ix_reproductions_state', 'reproductions', ['state'])
    op.create_table(
        'reproduction_jobs',
        sa.Column('reproduction_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('side', sa.String(length=8), nullable=False),
        sa.Column('round', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['reproduction_id'], ['reproductions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('reproduction_id', 'job_id'),
    )
    op.create_index('ix_reproduction_jobs_job_id', 'reproduction_jobs', ['job_id'])


def downgrade() -> None:
    op.drop_index('ix_reproduction_jobs_job_id', table_name='reproduction_jobs')
    op.drop_table('reproduction_jobs')
    op.drop_index('ix_reproductions_state', table_name='reproductions')
    op.drop_index('ix_reproductions_alert_id', table_name='reproductions')
    op.drop_table('reproductions')
