"""bisect search: effect sought, stages, result, reason, updated_at

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 10:20:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('bisects', schema=None) as batch_op:
        batch_op.add_column(sa.Column('effect', sa.Float(), nullable=False, server_default='0.05'))
        batch_op.add_column(sa.Column('stages', sa.JSON(), nullable=False, server_default='[]'))
        batch_op.add_column(sa.Column('result', sa.JSON(), nullable=False, server_default='{}'))
        batch_op.add_column(sa.Column('reason', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False,
                                      server_default=sa.func.now()))
        batch_op.create_index(batch_op.f('ix_bisects_alert_id'), ['alert_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('bisects', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bisects_alert_id'))
        batch_op.drop_column('updated_at')
        batch_op.drop_column('reason')
        batch_op.drop_column('result')
        batch_op.drop_column('stages')
        batch_op.drop_column('effect')
