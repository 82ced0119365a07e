"""when a series was last marked for detection (`detection_state.marked_at`): the detection duty
runs on arrivals, on series marked since its last pass

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 18:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('detection_state') as batch_op:
        batch_op.add_column(sa.Column('marked_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('detection_state') as batch_op:
        batch_op.drop_column('marked_at')
