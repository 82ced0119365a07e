"""ci_tokens and ci_uploads: results uploaded from existing CI jobs (issue 29)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 15:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'ci_tokens',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('repository_id', sa.Integer(), nullable=False),
        sa.Column('platform', sa.String(length=64), nullable=True),
        sa.Column('note', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('revoked', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'],
                                name=op.f('fk_ci_tokens_repository_id_repositories'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_ci_tokens')),
        sa.UniqueConstraint('token_hash', name=op.f('uq_ci_tokens_token_hash')),
    )
    op.create_index(op.f('ix_ci_tokens_repository_id'), 'ci_tokens', ['repository_id'], unique=False)
    op.create_table(
        'ci_uploads',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('repository_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('ci_token_id', sa.Integer(), nullable=True),
        sa.Column('idempotency_key', sa.String(length=255), nullable=True),
        sa.Column('request_sha256', sa.String(length=64), nullable=False),
        sa.Column('provider', sa.String(length=64), nullable=True),
        sa.Column('run_url', sa.String(length=1000), nullable=True),
        sa.Column('adapter', sa.String(length=64), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['ci_token_id'], ['ci_tokens.id'],
                                name=op.f('fk_ci_uploads_ci_token_id_ci_tokens'), ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'],
                                name=op.f('fk_ci_uploads_repository_id_repositories'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_ci_uploads_run_id_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_ci_uploads')),
        sa.UniqueConstraint('repository_id', 'idempotency_key', name=op.f('uq_ci_uploads_repository_id')),
        sa.UniqueConstraint('run_id', name=op.f('uq_ci_uploads_run_id')),
    )


def downgrade() -> None:
    op.drop_table('ci_uploads')
    op.drop_index(op.f('ix_ci_tokens_repository_id'), table_name='ci_tokens')
    op.drop_table('ci_tokens')
