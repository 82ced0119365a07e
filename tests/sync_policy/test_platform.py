"""Platform detection, the default sync-policy table, environment overrides and the context."""
from __future__ import annotations

import dataclasses
import json

import pytest

from runners import results
from scheduler_core.platform import (
    DEFAULT_POLICIES,
    OVERRIDE_ENV,
    Platform,
    PlatformError,
    SyncPolicy,
    default_policy,
    detect_hardware,
    detect_platform,
    resolve_policy,
)

ALL_VENDORS = ["cuda", "rocm", "cpu"]


# --- detection ---------------------------------------------------------------------------------

def test_cuda_build_with_a_gpu_is_cuda(fake_torch):
    fake_torch(cuda="12.4", gpu=True)
    assert detect_platform({}) == Platform("cuda")


def test_hip_build_with_a_gpu_is_rocm(fake_torch):
    fake_torch(hip="6.3.42131", gpu=True)
    assert detect_platform({}) == Platform("rocm")


def test_cpu_build_is_cpu(fake_torch):
    fake_torch()
    assert detect_platform({}) == Platform("cpu")


@pytest.mark.parametrize("build", [{"cuda": "12.4"}, {"hip": "6.3"}])
def test_gpu_build_without_a_visible_gpu_is_cpu(fake_torch, build):
    fake_torch(gpu=False, **build)
    assert detect_hardware() == "cpu"


def test_auto_means_detect(fake_torch):
    fake_torch(cuda="12.4", gpu=True)
    assert detect_platform({"PARALLAX_DEVICE": "auto"}) == Platform("cuda")


def test_cpu_can_be_forced_on_a_gpu_machine(fake_torch):
    fake_torch(cuda="12.4", gpu=True)
    assert detect_platform({"PARALLAX_DEVICE": "cpu"}) == Platform("cpu")


def test_asking_for_a_vendor_the_machine_lacks_is_an_error(fake_torch):
    fake_torch(cuda="12.4", gpu=True)
    with pytest.raises(PlatformError, match=r"PARALLAX_DEVICE=rocm.*'cuda'"):
        detect_platform({"PARALLAX_DEVICE": "rocm"})


def test_unknown_device_value_is_an_error_naming_the_variable(fake_torch):
    fake_torch()
    with pytest.raises(PlatformError, match="PARALLAX_DEVICE='gpu'"):
        detect_platform({"PARALLAX_DEVICE": "gpu"})


# --- simulator profiles ------------------------------------------------------------------------

@pytest.mark.parametrize("profile, vendor, label", [
    ("rocm-mi300x", "rocm", "rocm-sim"),
    ("hip-mi250", "rocm", "rocm-sim"),
    ("cuda-h100", "cuda", "cuda-sim"),
])
def test_sim_profile_follows_its_vendor(fake_torch, profile, vendor, label):
    fake_torch()  # the simulator needs no GPU
    platform = detect_platform({"PARALLAX_DEVICE": f"sim:{profile}"})
    assert (platform.kind, platform.profile, platform.vendor, platform.label, platform.name) == (
        "sim", profile, vendor, label, f"sim:{profile}")
    assert resolve_policy(platform, {}).sync == DEFAULT_POLICIES[vendor]


def test_unknown_sim_profile_is_an_error_naming_it():
    with pytest.raises(PlatformError, match=r"PARALLAX_DEVICE: unknown simulator profile 'tpu-v5'"):
        detect_platform({"PARALLAX_DEVICE": "sim:tpu-v5"})


@pytest.mark.parametrize("value", ["sim:", "sim:ROCM-MI300X", "sim:rocm mi300x"])
def test_malformed_sim_profile_is_an_error(value):
    with pytest.raises(PlatformError, match="not a valid name"):
        detect_platform({"PARALLAX_DEVICE": value})


def test_only_sim_platforms_have_a_profile():
    with pytest.raises(PlatformError):
        Platform("cuda", "cuda-h100")
    with pytest.raises(PlatformError):
        Platform("sim")


def test_sim_environment_says_simulated():
    env = Platform("sim", "rocm-mi300x").environment()
    assert (env["platform"], env["simulated"], env["sim_profile"]) == ("rocm-sim", True, "rocm-mi300x")


# --- the default table -------------------------------------------------------------------------

def test_cuda_keeps_every_switch_on_with_the_read_gated_barrier():
    assert default_policy(Platform("cuda")) == SyncPolicy(
        war_barrier=True, copy_stream=True, fwd_prepare_d2h=True, war_barrier_read_gated=True)


def test_only_rocm_takes_the_hip_publish_ready_synchronisation():
    assert {v: p.hip_publish_sync for v, p in DEFAULT_POLICIES.items()} == {"cuda": False, "rocm": True, "cpu": False}


def test_rocm_has_no_war_barrier_and_no_forward_prepare_d2h_stream():
    # The first upstream fix: the barrier (and the D2H stream compensating for it) is CUDA-only.
    policy = default_policy(Platform("rocm"))
    assert (policy.war_barrier, policy.fwd_prepare_d2h) == (False, False)


def test_rocm_copies_results_on_the_forward_stream():
    # The second upstream fix: no dedicated copy stream on ROCm.
    assert default_policy(Platform("rocm")).copy_stream is False


def test_cpu_has_every_switch_off():
    assert default_policy(Platform("cpu")) == SyncPolicy(
        war_barrier=False, copy_stream=False, fwd_prepare_d2h=False)


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_no_environment_means_the_default(vendor):
    active = resolve_policy(Platform(vendor), {})
    assert (active.sync, active.overrides) == (DEFAULT_POLICIES[vendor], ())


def test_resolve_detects_the_platform_when_not_given(fake_torch):
    fake_torch(hip="6.3", gpu=True)
    assert resolve_policy(environ={}).platform == Platform("rocm")


# --- overrides ---------------------------------------------------------------------------------

@pytest.mark.parametrize("vendor", ALL_VENDORS)
@pytest.mark.parametrize("variable", list(OVERRIDE_ENV))
def test_each_override_flips_exactly_one_field(vendor, variable):
    field = OVERRIDE_ENV[variable]
    default = DEFAULT_POLICIES[vendor]
    flipped_value = not getattr(default, field)
    active = resolve_policy(Platform(vendor), {variable: "1" if flipped_value else "0"})
    changed = {f.name for f in dataclasses.fields(SyncPolicy)
               if getattr(active.sync, f.name) != getattr(default, f.name)}
    assert changed == {field}
    assert getattr(active, field) is flipped_value


def test_override_is_recorded_with_its_default():
    active = resolve_policy(Platform("rocm"), {"PARALLAX_WAR_BARRIER": "1"})
    assert [o.as_dict() for o in active.overrides] == [
        {"variable": "PARALLAX_WAR_BARRIER", "field": "war_barrier", "value": True, "default": False}]


def test_override_equal_to_the_default_changes_nothing_but_is_recorded():
    active = resolve_policy(Platform("cuda"), {"PARALLAX_COPY_STREAM": "1"})
    assert active.sync == DEFAULT_POLICIES["cuda"]
    assert [o.variable for o in active.overrides] == ["PARALLAX_COPY_STREAM"]


def test_overrides_combine():
    active = resolve_policy(Platform("cuda"), {"PARALLAX_WAR_BARRIER": "0",
                                               "PARALLAX_FWD_PREPARE_D2H": "0"})
    assert active.sync == SyncPolicy(war_barrier=False, copy_stream=True, fwd_prepare_d2h=False,
                                     war_barrier_read_gated=True)


def test_empty_override_counts_as_unset():
    assert resolve_policy(Platform("cuda"), {"PARALLAX_WAR_BARRIER": ""}).overrides == ()


@pytest.mark.parametrize("variable", list(OVERRIDE_ENV))
@pytest.mark.parametrize("value", ["true", "2", "on", "-1", "0x1"])
def test_bad_override_value_is_rejected_naming_the_variable(variable, value):
    with pytest.raises(PlatformError, match=rf"{variable}='{value}'.*0 \(off\) or 1 \(on\)"):
        resolve_policy(Platform("cuda"), {variable: value})


def test_overrides_are_read_from_the_process_environment(monkeypatch):
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:cuda-h100")
    monkeypatch.setenv("PARALLAX_WAR_BARRIER", "0")
    active = resolve_policy()
    assert (active.platform.name, active.war_barrier, active.copy_stream) == (
        "sim:cuda-h100", False, True)


# --- presets: the regressions, reachable by configuration alone ------------------------------------

@pytest.mark.parametrize("platform", [Platform("rocm"), Platform("cuda"), Platform("sim", "rocm-mi300x")])
def test_preset_26380_puts_the_war_barrier_and_prepare_d2h_on_every_platform(platform):
    active = resolve_policy(platform, {"PARALLAX_SYNC_PRESET": "sglang-26380"})
    assert active.sync == SyncPolicy(war_barrier=True, copy_stream=False, fwd_prepare_d2h=True)
    assert active.preset == "sglang-26380" and active.as_context()["sync_preset"] == "sglang-26380"


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_preset_29075_puts_the_copy_stream_on_every_platform_and_keeps_the_fixed_barrier(vendor):
    active = resolve_policy(Platform(vendor), {"PARALLAX_SYNC_PRESET": "sglang-29075"})
    assert active.copy_stream is True
    assert active.war_barrier == DEFAULT_POLICIES[vendor].war_barrier


def test_a_switch_override_applies_on_top_of_a_preset():
    active = resolve_policy(Platform("rocm"), {"PARALLAX_SYNC_PRESET": "sglang-26380", "PARALLAX_WAR_BARRIER": "0"})
    assert (active.war_barrier, active.fwd_prepare_d2h) == (False, True)
    assert [o.default for o in active.overrides] == [True]


def test_an_unknown_preset_is_refused_by_name():
    with pytest.raises(PlatformError, match="PARALLAX_SYNC_PRESET='sglang-1'.*sglang-26380, sglang-29075"):
        resolve_policy(Platform("cpu"), {"PARALLAX_SYNC_PRESET": "sglang-1"})


# --- the results document's context ------------------------------------------------------------

def test_context_names_platform_policy_and_overrides():
    active = resolve_policy(Platform("sim", "rocm-mi300x"), {"PARALLAX_COPY_STREAM": "1"})
    assert active.as_context() == {
        "platform": "rocm-sim",
        "sync_policy": {"war_barrier": False, "copy_stream": True, "fwd_prepare_d2h": False,
                        "war_barrier_read_gated": False, "hip_publish_sync": True},
        "sync_policy_overrides": [{"variable": "PARALLAX_COPY_STREAM", "field": "copy_stream",
                                   "value": True, "default": False}],
        "sync_preset": None,
    }


def test_context_is_accepted_by_the_results_document_schema():
    active = resolve_policy(Platform("cuda"), {"PARALLAX_WAR_BARRIER": "0"})
    document = results.validate({
        "schema": "parallax.results/1", "suite": "decode-throughput",
        "metrics": [{"name": "output_throughput", "unit": "tok/s",
                     "direction": "higher_is_better", "samples": [1.0]}],
        "context": json.loads(json.dumps(active.as_context())),
        "environment": Platform("cuda").environment() | {"device": "test"},
    })
    assert document.context["sync_policy"]["war_barrier"] is False


def test_platform_and_device_import_nothing_from_app_or_runners():
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys, scheduler_core.platform, scheduler_core.device; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('app', 'runners')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
