"""operator first hour: why a webhook delivery failed (so a missing commit never blocks later
deliveries) and an optional per-repository webhook secret

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 15:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failure_kind', sa.String(length=32), nullable=True))
    with op.batch_alter_table('repositories', schema=None) as batch_op:
        batch_op.add_column(sa.Column('webhook_secret', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('repositories', schema=None) as batch_op:
        batch_op.drop_column('webhook_secret')
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_column('failure_kind')
