"""`GET /metrics` in the Prometheus text format (prometheus_client).

Service-wide numbers are read from the database at scrape time, so every instance and every
worker process reports the same values: queue depth and oldest queued job age per platform,
claims, completes and failures (from `job_attempts`), webhook deliveries by state, notification outbox rows by state, and how long
ago each background duty last ran. Per-process numbers (long-polls waiting, requests rejected
for capacity, request latency by route class) live in prometheus_client's multiprocess files
when `parallax serve` runs several workers (`PROMETHEUS_MULTIPROC_DIR`, set by `app.web.serve`),
and are summed over the workers of the instance that answers.
"""
from __future__ import annotations

import os
from typing import Iterator

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.core.clock import as_utc, utcnow
from app.core.db import Database
from app.core.models import Job, JobAttempt, JobState, NotificationDelivery, WebhookDelivery, WorkerLease
from app.web.session import get_db

bp = Blueprint("metrics", __name__)

LATENCY = Histogram("parallax_request_duration_seconds", "HTTP request latency by route class",
                    ["route_class"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
REJECTED = Counter("parallax_requests_rejected", "Requests answered 503 because their route class was full",
                   ["route_class"])
WAITING = Gauge("parallax_longpolls_waiting", "Claim long-polls in progress, by runner platform", ["platform"],
                multiprocess_mode="livesum")
FAILURE_OUTCOMES = ("failed", "retry", "lease_expired", "handed_back")


class DatabaseCollector(Collector):
    """The service-wide numbers, read when scraped."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        now = utcnow()
        depth = GaugeMetricFamily("parallax_queue_depth", "Queued jobs", labels=["platform"])
        oldest = GaugeMetricFamily("parallax_queue_oldest_age_seconds", "Age of the oldest queued job",
                                   labels=["platform"])
        claims = CounterMetricFamily("parallax_job_claims", "Job attempts claimed")
        completes = CounterMetricFamily("parallax_job_completes", "Job attempts completed with results")
        failures = CounterMetricFamily("parallax_job_failures", "Job attempts that ended without results",
                                       labels=["outcome"])
        deliveries = CounterMetricFamily("parallax_webhook_deliveries", "Webhook deliveries received, by state",
                                         labels=["state"])
        notifications = GaugeMetricFamily("parallax_notification_deliveries",
                                          "Notification outbox rows by state (dead: gave up, see /notifications)",
                                          labels=["state"])
        lag = GaugeMetricFamily("parallax_duty_seconds_since_run", "Seconds since each background duty last ran",
                                labels=["duty"])
        with self.db.session() as session:
            for platform, count, first in session.execute(
                    select(Job.platform, func.count(), func.min(Job.created_at))
                    .where(Job.state == JobState.queued).group_by(Job.platform)):
                depth.add_metric([platform], count)
                oldest.add_metric([platform], (now - as_utc(first)).total_seconds())
            outcomes = dict(session.execute(select(JobAttempt.outcome, func.count()).group_by(JobAttempt.outcome)).all())
            claims.add_metric([], sum(outcomes.values()))
            completes.add_metric([], outcomes.get("succeeded", 0))
            for outcome in FAILURE_OUTCOMES:
                failures.add_metric([outcome], outcomes.get(outcome, 0))
            for state, count in session.execute(select(WebhookDelivery.state, func.count())
                                                .group_by(WebhookDelivery.state)):
                deliveries.add_metric([state], count)
            counted = dict(session.execute(select(NotificationDelivery.state, func.count())
                                           .group_by(NotificationDelivery.state)).all())
            for state in ("pending", "sent", "skipped", "dead"):
                notifications.add_metric([state], counted.get(state, 0))
            for name, last in session.execute(select(WorkerLease.name, WorkerLease.last_run_at)):
                if last is not None:
                    lag.add_metric([name], (now - as_utc(last)).total_seconds())
        yield from (depth, oldest, claims, completes, failures, deliveries, notifications, lag)


@bp.get("/metrics")
def scrape() -> Response:
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        for collector in (LATENCY, REJECTED, WAITING):
            registry.register(collector)
    registry.register(DatabaseCollector(get_db()))
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)  # it names its charset already

