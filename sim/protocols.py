"""The simulator's seams, in one place: what the engine, the cluster and the KV transfer need from
a cost model, a request, a router, a scheduler policy, a link spec and a step listener. Anything with these methods
plugs in (the shipped `CostModel`, `Request`, routers, schedulers and `LinkSpec` are one choice
each; tests pass fakes). Units: seconds, tokens, bytes, KV blocks, step numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import simpy

    from infralab.sim.cost import StepWork
    from infralab.sim.engine.instance import Instance
    from infralab.sim.engine.request_state import Seq
    from infralab.sim.engine.step import StepPlan, StepResult


class ServedRequest(Protocol):
    """A request as the simulator reads it (`infralab.workload.request.Request`)."""

    @property
    def id(self) -> int: ...
    @property
    def arrival_s(self) -> float: ...  # s from the workload's start
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def block_hashes(self) -> tuple[int, ...]: ...  # one per prefix block of the prompt


class StepTime(Protocol):
    """The part of a step's cost the engine reads."""

    @property
    def total_s(self) -> float: ...


class StepCostModel(Protocol):
    """What the cluster, the engine and the KV transfer ask of a cost model (`CostModel`)."""

    def step(self, work: StepWork) -> StepTime:
        """Cost of one engine step doing `work`; the engine holds `total_s` seconds."""
        ...

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        """Seconds of a decode-only step: exactly `step(StepWork.decode(seqs, context_tokens)).total_s`
        (bit for bit: the fast scheduler times runs of such steps with it)."""
        ...

    def decode_run_ends(
        self, seqs: int, context_tokens: int, start_s: float, steps: int, horizon_s: float
    ) -> list[float]:
        """End times (s) of up to `steps` decode-only steps from `start_s` (context grows by `seqs`
        per step), none after the first at or after `horizon_s`: exactly
        `cost.decode_run_ends_stepwise(self.decode_step_s, ...)` (`sim/cost/model.py`)."""
        ...

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        """Tokens of KV cache one instance holds (after the activations of a step of
        `max_batched_tokens` tokens)."""
        ...

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes to move one sequence's cache of `tokens` tokens to another instance."""
        ...

    def kv_bytes_per_token(self) -> int:
        """KV bytes one token takes on the whole instance (all TP ranks, replicas included)."""
        ...

    def linear_state_bytes_per_seq(self) -> int:
        """Linear-attention (recurrent) state bytes one sequence holds on the whole instance."""
        ...


class LinkRate(Protocol):
    """A link's figures (`infralab.sim.specs.LinkSpec`): bytes/s per direction, s per message."""

    @property
    def bandwidth(self) -> float: ...
    @property
    def latency(self) -> float: ...


class RoutedInstance(Protocol):
    """What routers read of an instance (`infralab.sim.engine.instance.Instance`)."""

    @property
    def index(self) -> int: ...  # position in its pool: ties go to the lowest
    @property
    def outstanding_tokens(self) -> int: ...  # queued + running work left, tokens

    def cached_prefix_tokens(self, request: ServedRequest) -> int:
        """Prompt tokens of `request` its prefix cache holds now."""
        ...


InstanceT = TypeVar("InstanceT", bound=RoutedInstance)


class Router(Protocol):
    """Picks the instance of a pool that serves a request (`infralab.sim.routers`)."""

    def choose(self, request: ServedRequest, instances: Sequence[InstanceT]) -> InstanceT: ...


class SchedulerPolicy(Protocol):
    """The decisions of one instance, step by step, without SimPy: queues, KV blocks, admission,
    chunking, preemption (`infralab.sim.engine.scheduler` documents the rules).

    The instance calls `plan(now)`, holds the step's cost, then `finish(plan, ends_s)`. `repeats`
    is optional speed: a policy may say that the steps after `plan` repeat its decode-only work
    exactly, so the instance times them together; a per-step policy returns None (see
    `reference_scheduler.ReferenceScheduler`, the executable specification)."""

    @property
    def outstanding(self) -> int:
        """Tokens of work left here (prefill tokens + decode steps); a step's work counts as done
        when the step finishes."""
        ...

    def add_waiting(self, seq: Seq) -> None:
        """Queue a request for prefill (and decode, if `seq.decodes_here`)."""
        ...

    def add_reservation(self, seq: Seq, granted: simpy.Event) -> None:
        """Ask for KV blocks for `seq.target` tokens that will arrive; `granted` succeeds then."""
        ...

    def deliver(self, seq: Seq) -> None:
        """The KV of a granted reservation arrived: `seq` decodes from the next step on."""
        ...

    def release(self, seq: Seq) -> None:
        """Free the blocks of a handed-off request (its KV transfer ended)."""
        ...

    def cached_prefix_tokens(self, hashes: tuple[int, ...], prompt: int) -> int:
        """Prompt tokens the prefix cache would serve now to a prompt of `prompt` tokens."""
        ...

    def plan(self, now: float) -> StepPlan | None:
        """Decide the next step, starting at `now` (s); None when there is nothing to run."""
        ...

    def repeats(self, plan: StepPlan) -> Callable[[int], bool] | None:
        """None, or `allows(m)`: may step m (asked for m = plan.step_no + 1, + 2, ... in turn)
        repeat `plan`'s decode-only work with nothing else happening? `finish` then applies them."""
        ...

    def finish(self, plan: StepPlan, ends_s: list[float]) -> StepResult:
        """Apply `plan` (ending at `ends_s[0]`) and the repeats allowed after it (one more end
        time each, s): emit tokens, complete prefills and requests."""
        ...

    def counters(self) -> tuple[int, int, int, int]:
        """(waiting requests incl. reservations not granted, running requests, KV blocks used,
        KV blocks held by the prefix cache)."""
        ...

    def check_invariants(self) -> None:
        """Recount aggregates from scratch (tests); AssertionError on a mismatch."""
        ...


class StepListener(Protocol):
    """Told about an instance's prefill work (`infralab.sim.kv_transfer.KVTransfer` listens on
    prefill-pool instances)."""

    def step_started(self, instance: Instance, plan: StepPlan, start_s: float, duration_s: float) -> None:
        """A step with prefill chunks started at `start_s` and lasts `duration_s` (s)."""
        ...

    def prefill_done(self, instance: Instance, seq: Seq) -> None:
        """`seq`'s prompt is complete on a prefill-pool instance: its KV may move."""
        ...
