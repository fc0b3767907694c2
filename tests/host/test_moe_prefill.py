"""The MoE prefill step and the KV-transfer scenario: closed forms and the GIL telltales."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.agent.studies import load_hook

_STUDY = Path(__file__).resolve().parents[2] / "experiments" / "gil_kv_transfer"
all_to_all_bytes = load_hook(_STUDY / "moe_prefill.py").all_to_all_bytes
attribution = load_hook(_STUDY / "attribution.py")
_scenario = load_hook(_STUDY / "scenario.py")
CaseSetup, HostProfile, Scenario, build, run = (_scenario.CaseSetup, _scenario.HostProfile, _scenario.Scenario,
                                                _scenario.build, _scenario.run)

SETUP = CaseSetup()
SMALL = Scenario("small", prompt_tokens=2048, ep=8, layers=4, steps=3, page_tokens=1, granularity="after_prefill")


def test_all_to_all_bytes_split_by_node() -> None:
    intra, inter = all_to_all_bytes(tokens=10, hidden=100, experts=256, top_k=8, ep=8, bytes_per_elem=1.0)
    hit = 8 * (1 - (7 / 8) ** 8)
    assert intra == pytest.approx(10 * hit * 7 / 8 * 100) and inter == 0
    intra, inter = all_to_all_bytes(tokens=10, hidden=100, experts=256, top_k=8, ep=32, bytes_per_elem=2.0)
    hit = 32 * (1 - (31 / 32) ** 8)
    assert intra == pytest.approx(10 * hit * 7 / 32 * 200)
    assert inter == pytest.approx(10 * hit * 24 / 32 * 200)
    assert all_to_all_bytes(10, 100, 256, 8, 1, 1.0) == (0.0, 0.0)


def test_prefill_without_host_costs_is_the_device_chain() -> None:
    # Zero host costs: the host never delays the device, so a step is the dependency chain
    # attention -> notify -> dispatch -> experts -> combine per layer, then the LM head.
    host = HostProfile(launch_s=0, native_call_s=0, chunk_python_s=0, descriptor_s=0, handoff_s=0)
    built = build(SETUP, host, SMALL)
    w = built.plan.layer
    nv = built.ep_link
    dispatch = nv.latency + w.dispatch_intra_bytes / nv.bandwidth
    combine = nv.latency + w.combine_intra_bytes / nv.bandwidth
    per_layer = w.attention_s + w.notify_s + dispatch + w.experts_s + combine
    result = run(built, SMALL, holds_gil=True, with_transfer=False)
    assert result.prefill_s == pytest.approx(SMALL.steps * (SMALL.layers * per_layer + built.plan.lm_head_s), rel=1e-9)


def test_held_dispatch_combine_never_overlap_transfer_python_released_do() -> None:
    built = build(SETUP, HostProfile(), SMALL)
    held = attribution.overlaps(run(built, SMALL, holds_gil=True, with_transfer=True).record.intervals)
    released = attribution.overlaps(run(built, SMALL, holds_gil=False, with_transfer=True).record.intervals)
    assert held.kv_python_over_comm == 0.0 and held.kv_python_inside_comm == 0.0
    assert released.kv_python_inside_comm > 0.0


def test_transfer_sends_every_layer_of_every_step() -> None:
    built = build(SETUP, HostProfile(), SMALL)
    result = run(built, SMALL, holds_gil=False, with_transfer=True)
    kv = [iv for iv in result.record.intervals if iv.track == "link/nic0" and dict(iv.args)["label"].startswith("kv ")]
    assert len(kv) == SMALL.steps * SMALL.layers
    assert sum(dict(iv.args)["bytes"] for iv in kv) == pytest.approx(SMALL.steps * sum(built.chunk_bytes), rel=1e-9)


def test_attribution_accounts_for_the_extra_time() -> None:
    built = build(SETUP, HostProfile(), SMALL)
    without = run(built, SMALL, holds_gil=True, with_transfer=False)
    with_ = run(built, SMALL, holds_gil=True, with_transfer=True)
    blame = attribution.attribute(without.record.intervals, without.prefill_s, with_.record.intervals, with_.prefill_s)
    assert blame.extra_s == pytest.approx(with_.prefill_s - without.prefill_s)
    assert blame.gil_wait_s["main"] == pytest.approx(with_.gil_wait_s["main"])
    assert blame.kv_slot_wait_s == pytest.approx(blame.link_critical_s + blame.transfer_late_s)
    # The prefill thread's extra time is spent somewhere it can be seen: GIL waits or KV slots.
    assert blame.extra_s <= blame.main_gil_wait_s + blame.kv_slot_wait_s + 1e-9


def test_same_scenario_same_result() -> None:
    built = build(SETUP, HostProfile(), SMALL)
    a = run(built, SMALL, holds_gil=True, with_transfer=True)
    b = run(built, SMALL, holds_gil=True, with_transfer=True)
    assert a.record.intervals == b.record.intervals


@pytest.mark.parametrize("ep", [3, 64, 512])
def test_an_ep_that_does_not_fit_the_experts_is_one_input_error(ep: int) -> None:
    with pytest.raises(InputError, match=r"scenario small: ep"):
        build(SETUP, HostProfile(), dataclasses.replace(SMALL, ep=ep))
