"""What the queue announces after a state change, as synchronous blinker signals.

Receivers run inside the sender's transaction (the `session` is the sender's) and must stay
cheap: mark work for the background duties, never call out over the network. `run_stored` is
sent by the queue's delivery of stored runs (`app.jobs.queue.deliver_stored_runs`, a duty), in
the transaction that marks the run delivered, not by the completing request. Detection and
GitHub statuses subscribe in `app.wiring.connect`; the queue imports neither.
"""
from __future__ import annotations

from blinker import Namespace

_signals = Namespace()

job_queued = _signals.signal("job-queued", doc="sender: Session; job=Job just queued")
run_stored = _signals.signal("run-stored", doc="sender: Session; run=Run stored (delivered once, after its commit)")
job_failed = _signals.signal("job-failed", doc="sender: Session; job=Job failed for good")
pull_request_verdict = _signals.signal("pull-request-verdict", doc="sender: Session; pull=PullRequest whose verdict changed")
alert_opened = _signals.signal("alert-opened", doc="sender: Session; alert=Alert a new regression opened")
alert_fixed = _signals.signal("alert-fixed", doc="sender: Session; alert=Alert whose regressions were all restored")
alert_withdrawn = _signals.signal("alert-withdrawn", doc="sender: Session; alert=Alert withdrawn (invalid) by the "
                                                         "detector or because it did not reproduce")
bisect_done = _signals.signal("bisect-done", doc="sender: Session; bisect=Bisect that finished with an answer")
job_claimed = _signals.signal("job-claimed", doc="sender: Session; job=Job just claimed (runner_id set)")
