"""suite adapters, outputs, setup, env; job failure kind

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.add_column(sa.Column('adapter', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('outputs', sa.JSON(), nullable=False, server_default='[]'))
        batch_op.add_column(sa.Column('setup', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('setup_timeout_s', sa.Integer(), nullable=False, server_default='1800'))
        batch_op.add_column(sa.Column('env', sa.JSON(), nullable=False, server_default='{}'))
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failure_kind', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('failure_kind')
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.drop_column('env')
        batch_op.drop_column('setup_timeout_s')
        batch_op.drop_column('setup')
        batch_op.drop_column('outputs')
        batch_op.drop_column('adapter')
