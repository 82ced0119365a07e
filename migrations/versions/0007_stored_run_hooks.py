"""stored_run_hooks: runs whose run_stored hooks wait for the background delivery

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 13:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'stored_run_hooks',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id'),
    )


def downgrade() -> None:
    op.drop_table('stored_run_hooks')
