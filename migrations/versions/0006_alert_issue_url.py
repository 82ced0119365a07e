"""alerts.issue_url: the tracker issue a maintainer linked while triaging

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 09:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('issue_url', sa.String(length=1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_column('issue_url')
