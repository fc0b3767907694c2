"""One KV-transfer-vs-prefill scenario: build it from specs and the cost model, run it with or
without the KV-transfer thread, with dispatch/combine holding or releasing the GIL.

Where each number comes from:
- kernel times: `CostModel.step` (roofline over the model's operators on the accelerator) for a
  prompt of `prompt_tokens`, as uniform per-layer averages; the experts of one EP rank are costed
  as a model with num_experts / ep experts (a balanced rank receives tokens x top-k expert
  assignments spread over its own experts: the same flops and weights);
- all-to-all bytes: `all_to_all_bytes` (FP8 dispatch, BF16 combine as DeepEP does by default,
  configurable), over the NVLink and NIC link specs; the KV-transfer NIC is shared with the
  inter-node all-to-all;
- KV bytes per layer: the model spec (MLA latent per token for full-attention layers, KDA state
  per sequence for linear layers); descriptors per layer: one per KV page for full-attention
  layers, two (state, conv window) for linear layers;
- host costs (`HostProfile`): given by the experiment, each with its source there; `cores` the
  CPU cores the process's threads share (sim/host/cpu.py; None: a core per thread), and
  `kv_descriptors` where the per-page descriptor work runs: in the transfer thread's Python loop
  (holding the GIL), or inside one native call that releases it (the "next fix" arm).

Prefill throughput = prompt tokens of all steps / time the main thread needs for them.
Times are seconds, sizes bytes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Literal

import simpy
from pydantic import Field
from pydantic.dataclasses import dataclass

from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.metrics.records import Interval, RunRecord
from infralab.sim.config import CostConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.host.cpu import Cpu
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.streams import Stream
from infralab.sim.host.thread import HostThread
from infralab.sim.link import Link
from infralab.sim.specs import LinkSpec, load_accelerator, load_link, load_model

from infralab.agent.studies import load_hook

_transfer = load_hook(Path(__file__).with_name("transfer_thread.py"))
_moe = load_hook(Path(__file__).with_name("moe_prefill.py"))
KvChunk, TransferCosts, kv_transfer_loop = _transfer.KvChunk, _transfer.TransferCosts, _transfer.kv_transfer_loop
EpDevice, HostCosts, LayerWork, MoePrefillPlan = _moe.EpDevice, _moe.HostCosts, _moe.LayerWork, _moe.MoePrefillPlan
all_to_all_bytes, blocks, prefill_step = _moe.all_to_all_bytes, _moe.blocks, _moe.prefill_step

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]

MAIN, TRANSFER = "main", "kv-transfer"


@dataclass(frozen=True, config=STRICT)
class HostProfile:
    """Host-side costs (seconds). The experiment file states the source of each."""

    switch_interval_s: PositiveFloat = 0.005
    handoff_s: NonNegFloat = 10e-6
    handoff_busy_s: NonNegFloat | None = None  # None: as handoff_s (free cores; see GilParams)
    launch_s: NonNegFloat = 10e-6
    launches_attention: PositiveInt = 12
    launches_experts: PositiveInt = 6
    native_call_s: NonNegFloat = 1e-6
    chunk_python_s: NonNegFloat = 50e-6
    descriptor_s: NonNegFloat = 0.2e-6
    notify_s: NonNegFloat = 20e-6  # DeepEP's counts exchange the dispatch waits for
    cores: PositiveInt | None = None  # CPU cores the process may use (None: one per thread)
    quantum_s: PositiveFloat = 4e-3  # the OS's round-robin quantum when threads outnumber cores
    # Where the per-page descriptor work runs: "python" (the transfer thread's loop, holding the
    # GIL) or "native" (one call that takes the page list and releases the GIL; same cost per page).
    kv_descriptors: Literal["python", "native"] = "python"


@dataclass(frozen=True, config=STRICT)
class CaseSetup:
    """What all scenarios share."""

    model: str = "kimi-linear-48b-a3b"
    accelerator: str = "H200"
    ep_link: str = "nvlink4"  # inside a node
    nic: str = "rdma-400g"  # between nodes; also carries the KV transfer
    dispatch_bytes_per_elem: PositiveFloat = 1.0  # FP8 dispatch
    combine_bytes_per_elem: PositiveFloat = 2.0  # BF16 combine
    kv_dtype: Literal["bf16", "fp16", "fp8e4m3", "int8", "fp32"] = "bf16"


@dataclass(frozen=True, config=STRICT)
class Scenario:
    name: str
    prompt_tokens: PositiveInt = 8192
    ep: PositiveInt = 8
    layers: PositiveInt | None = None  # None: the model's
    granularity: Literal["per_layer", "after_prefill"] = "per_layer"
    nic_bandwidth: PositiveFloat | None = None  # bytes/s; None: the NIC spec's
    ep_link_bandwidth: PositiveFloat | None = None  # bytes/s of the intra-node all-to-all; None: the link spec's
    page_tokens: PositiveInt = 16
    steps: PositiveInt = 4
    kv_slots: PositiveInt = 2  # prompts whose KV may wait for transfer before prefill stalls


@dataclasses.dataclass(frozen=True)
class BuiltScenario:
    """A scenario turned into numbers (what a run needs)."""

    plan: MoePrefillPlan
    chunk_bytes: tuple[float, ...]  # per layer
    chunk_descriptors: tuple[int, ...]  # per layer
    ep_link: LinkSpec
    nic: LinkSpec
    transfer: TransferCosts
    gil: GilParams
    cores: int | None = None
    quantum_s: float = 4e-3


@dataclasses.dataclass
class ScenarioRun:
    record: RunRecord
    prefill_s: float  # main thread's time for all steps
    tokens: int
    holds_gil: bool
    with_transfer: bool
    gil_switches: int
    forced_drops: dict[str, int]
    gil_wait_s: dict[str, float]

    @property
    def throughput(self) -> float:
        """Prefill tokens per second."""
        return self.tokens / self.prefill_s


def build(setup: CaseSetup, host: HostProfile, scenario: Scenario) -> BuiltScenario:
    model = load_model(setup.model)
    accel = load_accelerator(setup.accelerator)
    layers = scenario.layers or model.num_layers
    tokens, ep = scenario.prompt_tokens, scenario.ep
    _check_ep(model, scenario)
    cost = CostModel(model, accel, CostConfig(kv_dtype=setup.kv_dtype), tp=1)
    by_op = cost.step(StepWork.prefill(tokens)).by_op
    # One EP rank's experts: a model with num_experts / ep experts (see the module docstring).
    local = dataclasses.replace(model, num_experts=model.num_experts // ep) if ep > 1 else model
    experts = CostModel(local, accel, CostConfig(kv_dtype=setup.kv_dtype), tp=1).step(StepWork.prefill(tokens))
    per_layer = model.num_layers
    d_intra, d_inter = all_to_all_bytes(tokens, model.hidden_size, model.num_experts, model.experts_per_token,
                                        ep, setup.dispatch_bytes_per_elem)
    c_intra, c_inter = all_to_all_bytes(tokens, model.hidden_size, model.num_experts, model.experts_per_token,
                                        ep, setup.combine_bytes_per_elem)
    layer = LayerWork(
        attention_s=(by_op["dense_gemm"] + by_op["attention"] + by_op["linear_attention"]) / per_layer,
        experts_s=experts.by_op["moe_experts"] / per_layer,
        dispatch_intra_bytes=d_intra,
        dispatch_inter_bytes=d_inter,
        combine_intra_bytes=c_intra,
        combine_inter_bytes=c_inter,
        notify_s=host.notify_s,
    )
    plan = MoePrefillPlan(
        num_layers=layers,
        layer=layer,
        lm_head_s=by_op["lm_head"],
        host=HostCosts(host.launch_s, host.launches_attention, host.launches_experts, host.native_call_s),
    )
    kinds = model.layer_types[:layers] if len(model.layer_types) >= layers else ("full",) * layers
    n_full = max(model.num_full_attention_layers, 1)
    n_linear = max(model.num_linear_attention_layers, 1)
    full_bytes = tokens * model.kv_bytes_per_token(setup.kv_dtype) / n_full
    linear_bytes = model.linear_state_bytes_per_seq() / n_linear
    chunk_bytes = tuple(full_bytes if k == "full" else linear_bytes for k in kinds)
    chunk_desc = tuple(blocks(tokens, scenario.page_tokens) if k == "full" else 2 for k in kinds)
    nic = load_link(setup.nic)
    if scenario.nic_bandwidth is not None:
        nic = dataclasses.replace(nic, bandwidth=scenario.nic_bandwidth)
    ep_link = load_link(setup.ep_link)
    if scenario.ep_link_bandwidth is not None:
        ep_link = dataclasses.replace(ep_link, bandwidth=scenario.ep_link_bandwidth)
    return BuiltScenario(
        plan=plan,
        chunk_bytes=chunk_bytes,
        chunk_descriptors=chunk_desc,
        ep_link=ep_link,
        nic=nic,
        transfer=TransferCosts(host.chunk_python_s, host.descriptor_s,
                               descriptors_native=host.kv_descriptors == "native"),
        gil=GilParams(host.switch_interval_s, host.handoff_s, host.handoff_busy_s),
        cores=host.cores,
        quantum_s=host.quantum_s,
    )


def _check_ep(model, scenario: Scenario) -> None:
    # One rank's experts are costed as a model with num_experts / ep experts and the same top-k,
    # which needs ep to divide the experts and leave at least top-k of them per rank.
    e, k, ep = model.num_experts, model.experts_per_token, scenario.ep
    if ep > 1 and (e == 0 or e % ep or e // ep < k):
        raise InputError(
            f"scenario {scenario.name}: ep",
            f"ep={ep} does not fit {model.name} ({e} experts, top-{k})",
            f"a divisor of {e} leaving at least {k} experts per rank" if e else "ep = 1 for a dense model",
        )


def run(built: BuiltScenario, scenario: Scenario, holds_gil: bool, with_transfer: bool) -> ScenarioRun:
    """Simulate `scenario.steps` prefill steps; the transfer thread runs only if `with_transfer`."""
    env = simpy.Environment()
    record = RunRecord()
    cpu = Cpu(env, built.cores, built.quantum_s) if built.cores is not None else None
    gil = Gil(env, built.gil, cpu=cpu)
    main = HostThread(env, MAIN, gil, record.intervals, cpu)
    nvlink = Link(env, built.ep_link, "nvlink0", record)
    nic = Link(env, built.nic, "nic0", record)
    device = EpDevice(
        Stream(env, "gpu0-compute", record.intervals),
        Stream(env, "gpu0-comm", record.intervals),
        intra=lambda n: nvlink.transfer(n, "all-to-all"),
        inter=lambda n: nic.transfer(n, "all-to-all"),
    )
    inbox = simpy.Store(env)
    mover = HostThread(env, TRANSFER, gil, record.intervals, cpu)
    step_sent: list[simpy.Event] = []
    if with_transfer:
        env.process(kv_transfer_loop(mover, inbox, lambda n, label: nic.transfer(n, label), built.transfer))
    finished: dict[str, float] = {}

    def post(step: int, layer: int, ready: simpy.Event) -> None:
        last = layer == built.plan.num_layers - 1
        inbox.put(KvChunk(step, layer, ready, built.chunk_bytes[layer], built.chunk_descriptors[layer],
                          step_sent[step] if last else None))

    def prefill():
        for step in range(scenario.steps):
            if with_transfer:
                step_sent.append(env.event())
                if step >= scenario.kv_slots:  # no memory for another prompt's KV until one is sent
                    yield from main.wait(step_sent[step - scenario.kv_slots], "wait-kv-slot")
            per_layer = with_transfer and scenario.granularity == "per_layer"
            hook = (lambda layer, ready, s=step: post(s, layer, ready)) if per_layer else (lambda layer, ready: None)
            start = env.now
            yield from prefill_step(main, device, built.plan, holds_gil, hook)
            record.intervals.append(Interval("prefill/steps", "prefill-step", start, env.now, (("step", step),)))
            if with_transfer and scenario.granularity == "after_prefill":
                for layer in range(built.plan.num_layers):
                    post(step, layer, device.compute.idle_event())
        finished["prefill"] = env.now
        main.finish()
        inbox.put(None)

    env.process(prefill())
    env.run()
    record.end_s = env.now
    threads = (main, mover) if with_transfer else (main,)
    return ScenarioRun(
        record=record,
        prefill_s=finished["prefill"],
        tokens=scenario.steps * scenario.prompt_tokens,
        holds_gil=holds_gil,
        with_transfer=with_transfer,
        gil_switches=gil.switches,
        forced_drops={t.name: t.forced_drops for t in threads},
        gil_wait_s={t.name: t.gil_wait_s for t in threads},
    )
