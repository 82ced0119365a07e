"""job_artifacts (files jobs upload beside their results) and notification_deliveries (outbox)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 15:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_artifacts',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('content_type', sa.String(length=128), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('sha256', sa.String(length=64), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_artifacts_job_id_jobs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_job_artifacts')),
        sa.UniqueConstraint('job_id', 'attempt', 'name', name=op.f('uq_job_artifacts_job_id')),
    )
    op.create_index(op.f('ix_job_artifacts_job_id'), 'job_artifacts', ['job_id'])
    op.create_index(op.f('ix_job_artifacts_created_at'), 'job_artifacts', ['created_at'])
    op.create_table(
        'notification_deliveries',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('dedupe_key', sa.String(length=255), nullable=False),
        sa.Column('target', sa.String(length=128), nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('event', sa.String(length=64), nullable=False),
        sa.Column('repository_id', sa.Integer(), nullable=True),
        sa.Column('alert_id', sa.Integer(), nullable=True),
        sa.Column('bisect_id', sa.Integer(), nullable=True),
        sa.Column('subject', sa.JSON(), nullable=False),
        sa.Column('body', sa.Text(), nullable=True),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'],
                                name=op.f('fk_notification_deliveries_repository_id_repositories'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['alert_id'], ['alerts.id'],
                                name=op.f('fk_notification_deliveries_alert_id_alerts'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['bisect_id'], ['bisects.id'],
                                name=op.f('fk_notification_deliveries_bisect_id_bisects'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_deliveries')),
        sa.UniqueConstraint('dedupe_key', name=op.f('uq_notification_deliveries_dedupe_key')),
    )
    op.create_index(op.f('ix_notification_deliveries_state'), 'notification_deliveries', ['state'])


def downgrade() -> None:
    op.drop_index(op.f('ix_notification_deliveries_state'), table_name='notification_deliveries')
    op.drop_table('notification_deliveries')
    op.drop_index(op.f('ix_job_artifacts_created_at'), table_name='job_artifacts')
    op.drop_index(op.f('ix_job_artifacts_job_id'), table_name='job_artifacts')
    op.drop_table('job_artifacts')
