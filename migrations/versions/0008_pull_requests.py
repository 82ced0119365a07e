"""pull requests: comparisons, A/B jobs, GitHub writes, installations

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 14:57:39.037078
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('github_installations',
    sa.Column('repository_id', sa.Integer(), nullable=False),
    sa.Column('installation_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_github_installations_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('repository_id', name=op.f('pk_github_installations'))
    )
    op.create_table('pull_comparisons',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pull_request_id', sa.Integer(), nullable=False),
    sa.Column('head_commit_id', sa.Integer(), nullable=False),
    sa.Column('base_commit_id', sa.Integer(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('conclusion', sa.String(length=16), nullable=True),
    sa.Column('title', sa.String(length=500), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('verdicts', sa.JSON(), nullable=False),
    sa.Column('classification', sa.JSON(), nullable=False),
    sa.Column('accepted_by', sa.String(length=128), nullable=True),
    sa.Column('check_run_id', sa.String(length=32), nullable=True),
    sa.Column('dirty', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['base_commit_id'], ['commits.id'], name=op.f('fk_pull_comparisons_base_commit_id_commits')),
    sa.ForeignKeyConstraint(['head_commit_id'], ['commits.id'], name=op.f('fk_pull_comparisons_head_commit_id_commits')),
    sa.ForeignKeyConstraint(['pull_request_id'], ['pull_requests.id'], name=op.f('fk_pull_comparisons_pull_request_id_pull_requests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pull_comparisons'))
    )
    with op.batch_alter_table('pull_comparisons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pull_comparisons_dirty'), ['dirty'], unique=False)
        batch_op.create_index(batch_op.f('ix_pull_comparisons_pull_request_id'), ['pull_request_id'], unique=False)

    op.create_table('pull_request_github',
    sa.Column('pull_request_id', sa.Integer(), nullable=False),
    sa.Column('comment_id', sa.String(length=32), nullable=True),
    sa.ForeignKeyConstraint(['pull_request_id'], ['pull_requests.id'], name=op.f('fk_pull_request_github_pull_request_id_pull_requests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('pull_request_id', name=op.f('pk_pull_request_github'))
    )
    op.create_table('pull_request_writes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pull_request_id', sa.Integer(), nullable=False),
    sa.Column('comparison_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('body', sa.JSON(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['comparison_id'], ['pull_comparisons.id'], name=op.f('fk_pull_request_writes_comparison_id_pull_comparisons'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['pull_request_id'], ['pull_requests.id'], name=op.f('fk_pull_request_writes_pull_request_id_pull_requests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pull_request_writes'))
    )
    with op.batch_alter_table('pull_request_writes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pull_request_writes_next_attempt_at'), ['next_attempt_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_pull_request_writes_pull_request_id'), ['pull_request_id'], unique=False)

    op.create_table('pull_comparison_jobs',
    sa.Column('comparison_id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('suite_id', sa.Integer(), nullable=False),
    sa.Column('platform', sa.String(length=64), nullable=False),
    sa.Column('side', sa.String(length=8), nullable=False),
    sa.Column('round', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['comparison_id'], ['pull_comparisons.id'], name=op.f('fk_pull_comparison_jobs_comparison_id_pull_comparisons'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_pull_comparison_jobs_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['suite_id'], ['suites.id'], name=op.f('fk_pull_comparison_jobs_suite_id_suites')),
    sa.PrimaryKeyConstraint('comparison_id', 'job_id', name=op.f('pk_pull_comparison_jobs'))
    )
    with op.batch_alter_table('pull_comparison_jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pull_comparison_jobs_job_id'), ['job_id'], unique=False)

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pinned_runner_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_jobs_pinned_runner_id_runners'), 'runners', ['pinned_runner_id'], ['id'])

    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pull_requests', sa.Boolean(), nullable=False, server_default=sa.true()))
        batch_op.add_column(sa.Column('pr_max_rounds', sa.Integer(), nullable=False, server_default='12'))
        batch_op.add_column(sa.Column('pr_platforms', sa.JSON(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.drop_column('pr_platforms')
        batch_op.drop_column('pr_max_rounds')
        batch_op.drop_column('pull_requests')

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_jobs_pinned_runner_id_runners'), type_='foreignkey')
        batch_op.drop_column('pinned_runner_id')

    with op.batch_alter_table('pull_comparison_jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pull_comparison_jobs_job_id'))

    op.drop_table('pull_comparison_jobs')
    with op.batch_alter_table('pull_request_writes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pull_request_writes_pull_request_id'))
        batch_op.drop_index(batch_op.f('ix_pull_request_writes_next_attempt_at'))

    op.drop_table('pull_request_writes')
    op.drop_table('pull_request_github')
    with op.batch_alter_table('pull_comparisons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pull_comparisons_pull_request_id'))
        batch_op.drop_index(batch_op.f('ix_pull_comparisons_dirty'))

    op.drop_table('pull_comparisons')
    op.drop_table('github_installations')
