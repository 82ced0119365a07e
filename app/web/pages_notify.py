"""The notifications page (`/notifications`): the outbox, newest first, with each delivery's
target, event, state, attempts and, for a dead or skipped one, the reason."""
from __future__ import annotations

from flask import render_template
from sqlalchemy import func, select

from app.core.models import NotificationDelivery
from app.web.dash_common import arg_choice
from app.web.session import request_session

STATES = ["pending", "sent", "skipped", "dead"]


def notifications_page() -> str:
    session = request_session()
    state = arg_choice("state", STATES)
    query = select(NotificationDelivery).order_by(NotificationDelivery.id.desc()).limit(200)
    if state:
        query = query.where(NotificationDelivery.state == state)
    counts = dict(session.execute(select(NotificationDelivery.state, func.count())
                                  .group_by(NotificationDelivery.state)).all())
    return render_template("notifications.html", deliveries=list(session.scalars(query)), state=state,
                           states=STATES, counts=counts)
