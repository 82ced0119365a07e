"""a suite's noise floor per platform (`min_change = { cpu = 0.10 }`): the smallest relative
change reported on that platform (issue 31: the demo's shared cpu runner)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 17:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('suites') as batch_op:
        batch_op.add_column(sa.Column('min_change', sa.JSON(), nullable=False, server_default='{}'))


def downgrade() -> None:
    with op.batch_alter_table('suites') as batch_op:
        batch_op.drop_column('min_change')
