"""The KDA decode op (`kernel.py`: variants v1, v2, v3) and ReplaySSM (`replay_ssm.py`,
variant "replay"): partition adapter, bench cases, work counts and per-sequence state memory. The
static counts themselves follow the kernels' launch plans in `work_counts.py`.

Torch and triton are imported inside the functions (this module is imported by the registry)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from infralab.errors import InputError
from infralab.kernels.kernel_op import KernelOp, Shape, shape_of, lazy
from infralab.work_formulas import F32, WorkCounts

if TYPE_CHECKING:  # torch-free at run time
    import torch

    from infralab.kernels.bench_cases import BenchCase
    from infralab.kernels.partition import Split

DECODE_VARIANTS = ("v1", "v2", "v3")  # `kda_decode.VARIANTS` (checked by a test)
VARIANTS = (*DECODE_VARIANTS, "replay")
CHECK_RING_LEN = 2
"""ReplaySSM ring length of `kernels check` (3 steps: one flush, then a partly filled ring)."""
DEFAULT_RING_LEN = 8
"""ReplaySSM ring length where a shape does not give L (work metrics)."""


class KdaDecodePartition:
    """KDA decode (and ReplaySSM, variant "replay") over `steps` tokens, under head and batch splits.

    Inputs per step are stacked on a leading step axis: q, k, g [S,B,H,K], v [S,B,H,V], b [S,B,H];
    A_log [H], dt_bias [H,K] and the starting state [B,H,K,V] are shared by all steps (S defaults to
    1). Outputs: o [S,B,H,V] and the final state. Every (sequence, head) is its own program, so head
    and batch splits must be bitwise equal. Shards are views into the unsplit inputs (strided kernels).
    """

    name = "kda_decode"

    def __init__(self, ring_len: int = 4) -> None:
        self.ring_len = ring_len  # ReplaySSM ring length for variant "replay"

    def make_inputs(self, dims: Mapping[str, int], variant: str, seed: int) -> dict[str, Any]:
        import torch

        from infralab.kernels.interpreter import kernel_device

        gen = torch.Generator().manual_seed(seed)
        s, b, h, k, v = dims.get("S", 1), dims["B"], dims["H"], dims["K"], dims["V"]
        tensors = {
            "q": torch.randn(s, b, h, k, generator=gen), "k": torch.randn(s, b, h, k, generator=gen),
            "v": torch.randn(s, b, h, v, generator=gen), "g": torch.randn(s, b, h, k, generator=gen),
            "b": torch.randn(s, b, h, generator=gen),
            # decays of roughly 0.5..0.95 per step, so the state remembers several steps
            "A_log": torch.log(torch.rand(h, generator=gen) * 0.9 + 0.1),
            "dt_bias": torch.randn(h, k, generator=gen) * 0.5 - 1.0,
            "state": torch.randn(b, h, k, v, generator=gen) * 0.1,
        }
        return {name: t.to(kernel_device()) for name, t in tensors.items()}

    def run(self, inputs: dict, variant: str) -> dict:
        import torch

        from infralab.kernels.ops.kda_decode.kernel import kda_decode
        from infralab.kernels.ops.kda_decode.replay_ssm import ReplaySSMState

        steps = inputs["q"].shape[0]
        per_step = [[inputs[n][t] for n in ("q", "k", "v", "g", "b")] for t in range(steps)]
        if variant == "replay":
            replay = ReplaySSMState(inputs["A_log"], inputs["dt_bias"], inputs["state"].clone(), self.ring_len)
            outs = [replay.step(*args) for args in per_step]
            return {"o": torch.stack(outs), "state": replay.materialize()}
        state = inputs["state"].clone()
        outs = [kda_decode(*args, inputs["A_log"], inputs["dt_bias"], state, variant=variant) for args in per_step]
        return {"o": torch.stack(outs), "state": state}

    def float64(self, inputs: dict, variant: str) -> dict:
        import torch

        from infralab.kernels.ops.kda_decode.kernel import kda_decode_ref

        x = {name: t.double() for name, t in inputs.items()}
        state, outs = x["state"], []
        for t in range(x["q"].shape[0]):
            o, state = kda_decode_ref(x["q"][t], x["k"][t], x["v"][t], x["g"][t], x["b"][t],
                                      x["A_log"], x["dt_bias"], state)
            outs.append(o)
        return {"o": torch.stack(outs), "state": state}

    def shards(self, inputs: dict, split: Split) -> list[dict]:
        from infralab.kernels.partition import chunks

        if split.kind == "none":
            return [inputs]
        if split.kind == "head":  # step tensors: axis 2; A_log, dt_bias: axis 0; state: axis 1
            axes = {"q": 2, "k": 2, "v": 2, "g": 2, "b": 2, "A_log": 0, "dt_bias": 0, "state": 1}
        elif split.kind == "batch":
            axes = {"q": 1, "k": 1, "v": 1, "g": 1, "b": 1, "A_log": None, "dt_bias": None, "state": 0}
        else:
            raise InputError("split.kind", f"{split.kind!r} does not apply to kda_decode", "none, head or batch")
        pieces = {n: chunks(t, axes[n], split.parts) if axes[n] is not None else [t] * split.parts
                  for n, t in inputs.items()}
        return [{n: pieces[n][i] for n in inputs} for i in range(split.parts)]

    def combine(self, outputs: list[dict], split: Split) -> dict:
        import torch

        o_axis, state_axis = (2, 1) if split.kind == "head" else (1, 0)
        return {"o": torch.cat([x["o"] for x in outputs], o_axis),
                "state": torch.cat([x["state"] for x in outputs], state_axis)}

    def expects_bitwise(self, split: Split, dims: Mapping[str, int]) -> bool:
        return split.kind in ("none", "head", "batch")


def partition_adapter() -> KdaDecodePartition:
    return KdaDecodePartition(CHECK_RING_LEN)


# ---- bench ----------------------------------------------------------------------------------------


def bench_cases(shapes: tuple[Shape, ...], on_gpu: bool) -> list[BenchCase]:
    """v1, v2, v3 per shape of `shapes` (B, H, K, V), and a ReplaySSM row at the shape's ring
    length L (`DEFAULT_RING_LEN` where the shape gives none)."""
    from infralab.kernels.bench_cases import BenchCase

    out = []
    for shape in shapes:
        decode = tuple((letter, value) for letter, value in shape if letter != "L")
        out += [BenchCase("kda_decode", v, "fp32", decode, "fp32", "kda_ref") for v in DECODE_VARIANTS]
        ring = decode + (("L", dict(shape).get("L", DEFAULT_RING_LEN)),)
        out.append(BenchCase("kda_decode", "replay", "fp32", ring, "fp32", "replay_ref"))
    return out


def kda_inputs(dims: Mapping[str, int], device: str, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """q, k, v, g_raw, b, A_log, dt_bias, state for one decode step at dims B, H, K, V (float32)."""
    import torch

    from infralab.kernels.bench_cases import randn

    b, h, k, v = dims["B"], dims["H"], dims["K"], dims["V"]
    q, key, g = (randn((b, h, k), device, gen) for _ in range(3))
    val = randn((b, h, v), device, gen)
    beta = randn((b, h), device, gen)
    # decays around 0.5..0.95, as in the kernel tests, so the state stays bounded over many steps
    a_log = torch.log(torch.rand(h, device=device, generator=gen) * 0.9 + 0.1)
    dt_bias = randn((h, k), device, gen) * 0.5 - 1.0
    state = randn((b, h, k, v), device, gen) * 0.1
    return q, key, val, g, beta, a_log, dt_bias, state


def prepare(case: BenchCase, device: str, gen: torch.Generator, use_triton: bool) -> Callable[[], object]:
    import torch

    dims = case.dims()
    q, k, v, g, b, a_log, dt_bias, state = kda_inputs(dims, device, gen)
    if case.variant == "replay":
        return _prepare_replay(dims, (q, k, v, g, b, a_log, dt_bias, state), use_triton)
    from infralab.kernels.ops.kda_decode.kernel import kda_decode, kda_decode_ref

    if not use_triton:
        return lambda: kda_decode_ref(q, k, v, g, b, a_log, dt_bias, state)
    out = torch.empty_like(v)
    # the state is updated in place: repeated calls are consecutive decode steps (bounded by the decay)
    return lambda: kda_decode(q, k, v, g, b, a_log, dt_bias, state, variant=case.variant, out=out)


class ReplayCycle:
    """One ReplaySSM ring cycle: `ring_len` decode steps and the flush that ends it. The benchmark
    divides the cycle's time by `ring_len` (`calls_per_run`), so a row is the amortised cost of
    one decode step, flush included."""

    def __init__(self, step: Callable[[], object], ring_len: int) -> None:
        self.step = step
        self.calls_per_run = ring_len

    def __call__(self) -> None:
        for _ in range(self.calls_per_run):
            self.step()


def _prepare_replay(dims: Mapping[str, int], inputs: tuple, use_triton: bool) -> ReplayCycle:
    import torch

    q, k, v, g, b, a_log, dt_bias, state = inputs
    ring_len = dims["L"]
    if use_triton:
        from infralab.kernels.ops.kda_decode.replay_ssm import ReplaySSMState

        replay = ReplaySSMState(a_log, dt_bias, state, ring_len)  # flushes itself every ring_len steps
        return ReplayCycle(lambda: replay.step(q, k, v, g, b), ring_len)
    from infralab.kernels.ops.kda_decode.replay_ssm import replay_state_ref, replay_step_ref

    batch, heads, head_k, head_v = state.shape
    checkpoint = state.clone()
    ring_k = torch.zeros(batch, heads, ring_len, head_k, device=state.device)
    ring_g = torch.zeros_like(ring_k)
    ring_d = torch.zeros(batch, heads, ring_len, head_v, device=state.device)
    slot = [0]

    def step() -> None:
        _, k_hat, g_t, d_t = replay_step_ref(checkpoint, ring_k, ring_g, ring_d, slot[0], q, k, v, g, b, a_log, dt_bias)
        ring_k[:, :, slot[0]], ring_g[:, :, slot[0]], ring_d[:, :, slot[0]] = k_hat, g_t, d_t
        slot[0] += 1
        if slot[0] == ring_len:
            checkpoint.copy_(replay_state_ref(checkpoint, ring_k, ring_g, ring_d, ring_len))
            slot[0] = 0

    return ReplayCycle(step, ring_len)


# ---- work and memory --------------------------------------------------------------------------------


def work_counts(variant: str, dtype: str, dims: Mapping[str, int]) -> WorkCounts:
    """One decode step (v1/v2/v3), or one ReplaySSM cycle of L steps (`steps` = L; L defaults to
    `DEFAULT_RING_LEN`), from the kernels' launch plans (`work_counts.py`)."""
    from infralab.kernels.ops.kda_decode.work_counts import work_counts as counts

    shape = {"batch": dims["B"], "heads": dims["H"], "head_k": dims["K"], "head_v": dims["V"]}
    if variant == "replay":
        shape["ring_len"] = dims.get("L", DEFAULT_RING_LEN)
    return counts("kda_decode", variant, **shape)


def state_bytes_per_seq(variant: str, dims: Mapping[str, int]) -> int:
    """Recurrent memory one sequence keeps: K*V float32 per head, or ReplaySSM's checkpoint + ring."""
    if variant == "replay":
        from infralab.kernels.ops.kda_decode.replay_ssm import replay_ssm_memory

        return replay_ssm_memory(dims["K"], dims["V"], dims.get("L", DEFAULT_RING_LEN), dims["H"]).total_bytes
    return dims["H"] * dims["K"] * dims["V"] * F32


OP = KernelOp(
    name="kda_decode",
    table_order=30,
    shapes={
        "small": (shape_of(B=8, H=4, K=64, V=64), shape_of(B=8, H=8, K=128, V=128)),
        "full": (
            shape_of(B=1, H=32, K=128, V=128),
            shape_of(B=16, H=32, K=128, V=128),
            shape_of(B=64, H=32, K=128, V=128),
            shape_of(B=256, H=32, K=128, V=128),
        ),
    },
    variants=VARIANTS,
    splits=("none", "head", "batch"),
    shape_dims=("B", "H", "K", "V"),
    optional_dims=(("S", "decode steps of a partition check (default 1)"),
                   ("L", f"ReplaySSM ring length (variant replay; default {DEFAULT_RING_LEN})")),
    kernel="infralab.kernels.ops.kda_decode.kernel:kda_decode",
    reference="infralab.kernels.ops.kda_decode.kernel:kda_decode_ref",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
    partition_adapter=partition_adapter,
    check_suite=lazy("infralab.kernels.ops.kda_decode.check:suite"),
    state_bytes_per_seq=state_bytes_per_seq,
)
