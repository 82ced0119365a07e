"""The demo's pull-request story, cheaply: its edits apply to the engine copy in order, and the
summary's expectations (failing on rocm-sim only, then green) are checked as written."""
from __future__ import annotations

from pathlib import Path

from app.demo.run import PullVerdict, pull_request_problems
from app.demo.story import POLICY_FILE, ROCM_DEFAULT, ROCM_WAR_BARRIER, Change, EngineRepository, pull_request_story

ROOT = Path(__file__).resolve().parents[2]


def test_the_pull_request_turns_the_barrier_on_for_rocm_and_the_fix_turns_it_off(tmp_path):
    repo = EngineRepository.create(tmp_path / "engine", ROOT)
    _, main_head, _ = repo.push([Change("engine under test", lambda root: None)])
    story = pull_request_story()
    repo.checkout(story.branch, create=True)
    repo.push([story.regression])
    policy = (repo.path / POLICY_FILE).read_text()
    assert ROCM_WAR_BARRIER in policy and ROCM_DEFAULT not in policy
    repo.push([story.fix])
    assert ROCM_DEFAULT in (repo.path / POLICY_FILE).read_text()
    repo.checkout("main")
    assert repo.head() == main_head


def verdict(conclusion: str, title: str) -> PullVerdict:
    return PullVerdict("a" * 40, conclusion, title, "comment", 3)


def test_the_story_expects_a_rocm_sim_only_failure_then_green():
    failing = verdict("failure", "rocm-sim decode_throughput −18.2 %, rocm-sim only")
    assert pull_request_problems([failing, verdict("success", "no change beyond noise")]) == []
    assert pull_request_problems([verdict("failure", "cpu decode_throughput −3.0 %, every platform"),
                                  verdict("success", "")])
    assert pull_request_problems([failing, verdict("neutral", "cpu decode_throughput inconclusive at the round cap")])
    assert pull_request_problems([failing])
