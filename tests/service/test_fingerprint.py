"""One benchmark configuration forms one series across commits, whatever the code under test
decided at each commit."""
from app.jobs.measurements import context_fingerprint

ENVIRONMENT = {"platform": "rocm-sim", "device": "simulated", "simulated": True}
CONTEXT = {"model": "tiny-random-8l", "batch_size": 8, "sync_preset": None,
           "sync_policy": {"war_barrier": False, "copy_stream": False, "fwd_prepare_d2h": False},
           "sim_stream_busy": {"forward": 0.967}, "sim_hazard_kinds": {}}


def test_a_commit_that_changes_the_sync_policy_stays_in_the_same_series():
    changed = {**CONTEXT, "sync_policy": {"war_barrier": True, "copy_stream": False, "fwd_prepare_d2h": True},
               "sim_stream_busy": {"forward": 0.87, "fwd_prepare_d2h": 0.012},
               "sim_hazard_kinds": {"write-after-read on req_to_token": 60}, "commit": "a" * 40}
    assert context_fingerprint(changed, ENVIRONMENT) == context_fingerprint(CONTEXT, ENVIRONMENT)


def test_a_different_benchmark_configuration_is_another_series():
    assert context_fingerprint({**CONTEXT, "batch_size": 32}, ENVIRONMENT) != context_fingerprint(CONTEXT, ENVIRONMENT)
    assert context_fingerprint({**CONTEXT, "sync_preset": "sglang-26380"}, ENVIRONMENT) != \
        context_fingerprint(CONTEXT, ENVIRONMENT)
