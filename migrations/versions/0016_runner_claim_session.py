"""the runner process whose claims the service answers (`runners.claim_session`): a long-poll left
waiting by a runner process that died cannot take a job after the runner started again

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 20:20:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runners') as batch_op:
        batch_op.add_column(sa.Column('claim_session', sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runners') as batch_op:
        batch_op.drop_column('claim_session')
