"""queued uploads: an upload of a commit the service has not seen answers 202 and the `uploads`
duty reads the commit from git, outside the request (issue 30)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 01:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'queued_uploads',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('repository_id', sa.Integer(), nullable=False),
        sa.Column('ci_token_id', sa.Integer(), nullable=True),
        sa.Column('idempotency_key', sa.String(length=255), nullable=True),
        sa.Column('request_sha256', sa.String(length=64), nullable=False),
        sa.Column('sha', sa.String(length=40), nullable=False),
        sa.Column('suite', sa.String(length=128), nullable=False),
        sa.Column('platform', sa.String(length=64), nullable=False),
        sa.Column('document', sa.Text(), nullable=False),
        sa.Column('provider', sa.String(length=64), nullable=True),
        sa.Column('run_url', sa.String(length=1000), nullable=True),
        sa.Column('adapter', sa.String(length=64), nullable=True),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=True),
        sa.Column('created', sa.Boolean(), nullable=False),
        sa.Column('error_status', sa.Integer(), nullable=True),
        sa.Column('error', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['ci_token_id'], ['ci_tokens.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('repository_id', 'idempotency_key'),
    )
    op.create_index('ix_queued_uploads_state', 'queued_uploads', ['state'])


def downgrade() -> None:
    op.drop_index('ix_queued_uploads_state', table_name='queued_uploads')
    op.drop_table('queued_uploads')
