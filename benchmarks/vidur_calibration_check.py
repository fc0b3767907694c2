"""How close is the cost model to real GPU operator timings? Vidur's public profiles as the yardstick.

Three predictors per operator call (one layer, one rank), against Vidur's measured median:
- `roofline`: the plain roofline (efficiencies only; the extras off);
- `extras`: the roofline with the extras (launch floor, small ops, decode-attention floor) whose
  constants this script FITS on the fit part below;
- `calibrated`: the cost model reading the fit part's profile rows as its calibration table
  (`infralab.sim.calibration`: exact, interpolated along one field, or scaled), extras beneath.

The split the profiles' coverage allows (stated in docs/sim.md):
- per-layer MLP-side operators (GEMMs, norms, RoPE, activation, add): FIT on Llama-2-7B and
  Llama-2-70B on A100; EVALUATE on Llama-3-8B and Llama-3-70B on A100 (other GEMM shapes for 8B,
  the same layer shapes for 70B, and 8x more tokens: up to 32,768) and, for the fitted constants
  only, on Llama-2 on H100 (another GPU: no A100 row calibrates it);
- each part's memory efficiency (`AcceleratorSpec.memory_efficiency`): FIT on Llama-2-70B's decode
  GEMMs on that part (A100 and H100; `fit_memory_efficiency`), so Llama-2-70B's H100 GEMMs are no
  longer held out; Llama-3 on A100 and Llama-2-7B on H100 are;
- attention (only Llama-2-70B, TP 2, A100): FIT on rows whose KV size is a multiple of 128 (and,
  for prefill, whose chunk is too), EVALUATE on the others (interpolation between measured sizes);
- all-reduce: curves FIT on 2 and 4 GPUs of a DGX node, EVALUATED on 8;
- host (vLLM v0 on A100): per-step + per-sequence FIT on Llama-2-7B (TP 1), EVALUATED on the other
  five models of the file; the same fit again without the output-processing phase (the host time
  left on a step's path once output processing overlaps the next forward: vLLM >= 0.6.0 and V1;
  agent/public_points/engines.py).

    .venv/bin/python benchmarks/vidur_calibration_check.py [--out results/vidur_calibration]

prints the fitted constants and the tables, and writes `vidur_calibration.csv` (every evaluated
call) and `vidur_calibration.png` (predicted vs measured). Needs the shared data folder
(`INFRALAB_DATA`, docs/architecture.md); about 30 s on one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import csv
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from infralab import locations
from infralab.calibration_table import CalibrationRow
from infralab.sim.calibration import CalibrationTable
from infralab.sim.config import DEFAULT_MEMORY_EFFICIENCY, CostConfig, EfficiencyConfig, RooflineExtrasConfig
from infralab.sim.cost import CostModel
from infralab.sim.specs import ModelSpec, load_accelerator, load_link, load_model
from infralab.vidur_profile import HOST_PHASES_BEFORE_OUTPUTS, read_vidur_profile
from infralab.vidur_profile import host_rows as host_phase_rows

# The plain roofline; the norm and the residual add unfused, as the profiles time them.
PLAIN = RooflineExtrasConfig(kernel_launch_s=0.0, small_ops=False, decode_attention_floor_s=0.0, sampler=False,
                             ridge_sharpness=None, eager_launch_s=0.0, graph_launch_s=0.0, fused_add_norm=False)
MEMORY_FIT_MODEL = "Llama-2-70b-hf"  # each part's memory efficiency: its decode GEMMs (fit_memory_efficiency)
DECODE_TOKENS = 16  # a GEMM of at most this many rows streams its weights (decode)
STREAMING_BYTES = 32 * 2**20  # and of at least this many bytes, where a fixed per-call time is negligible
FIT_MODELS = ("Llama-2-7b-hf", "Llama-2-70b-hf")
# (profile folder under compute/, catalog model, accelerator) evaluated
HOLDOUT = (
    ("a100/meta-llama/Meta-Llama-3-8B", "llama-3-8b", "A100"),
    ("a100/meta-llama/Meta-Llama-3-70B", "llama-3-70b", "A100"),
    ("h100/meta-llama/Llama-2-7b-hf", "llama-2-7b", "H100"),
    ("h100/meta-llama/Llama-2-70b-hf", "llama-2-70b", "H100"),
)
SMALL = ("rms_norm", "rope", "silu_mul", "residual_add")
TOKENS_SHOWN = (1, 16, 128, 1024, 4096, 32768)


@dataclass(frozen=True)
class Call:
    """One measured call and the three predictions (seconds)."""

    operator: str
    model: str
    gpu: str
    tp: int
    size: str
    profile_s: float
    roofline_s: float
    extras_s: float
    calibrated_s: float | None


# ---- fitting -----------------------------------------------------------------------------------


def fit_extras(rows: list[CalibrationRow], attention_fit: list[CalibrationRow], hbm_bandwidth: float) -> RooflineExtrasConfig:
    """The extras' constants from the fit part (A100, Llama-2), two significant digits:
    - kernel_launch_s: the median time of the small ops (norms, RoPE, activation, add) at one token,
      whose work is then negligible (a few kB): what is left is the cost of a kernel;
    - <kernel>_memory: per small op, bytes / time / HBM bandwidth over its calls of >= 1024 tokens
      (their bandwidth-bound regime);
    - decode_attention_floor_s: the median time of decode calls of <= 4 sequences of <= 256 tokens
      (work far below a microsecond at HBM speed: what is left is the floor)."""
    small = [r for r in rows if r.kernel in SMALL]
    launch = statistics.median(r.median_s for r in small if r.shape_dict["T"] == 1)
    fractions = {}
    for kernel in SMALL:
        large = [r for r in small if r.kernel == kernel and r.shape_dict["T"] >= 1024]
        fractions[kernel] = min(sum(r.bytes for r in large) / sum(r.median_s for r in large) / hbm_bandwidth, 1.0)
    tiny = [r.median_s for r in attention_fit
            if r.kernel == "paged_decode_attention" and r.shape_dict["B"] <= 4 and r.shape_dict["T"] <= 256]
    two = lambda x: float(f"{x:.2g}")  # noqa: E731
    return RooflineExtrasConfig(
        kernel_launch_s=two(launch),
        rms_norm_memory=two(fractions["rms_norm"]),
        rope_memory=two(fractions["rope"]),
        activation_memory=two(fractions["silu_mul"]),
        residual_add_memory=two(fractions["residual_add"]),
        decode_attention_floor_s=two(statistics.median(tiny)),
        fused_add_norm=False,  # the profile times the norm and the residual add as separate kernels
    )


def fit_memory_efficiency(rows: list[CalibrationRow], hbm_bandwidth: float) -> float:
    """One part's memory efficiency (`AcceleratorSpec.memory_efficiency`), two significant digits:
    the bytes over the time of its decode-shaped GEMMs (<= DECODE_TOKENS rows, >= STREAMING_BYTES:
    weights streamed once, the per-call fixed time negligible) over the part's HBM bandwidth."""
    streaming = [r for r in rows if r.kernel == "matmul" and r.shape_dict["M"] <= DECODE_TOKENS
                 and r.bytes >= STREAMING_BYTES]
    return float(f"{sum(r.bytes for r in streaming) / sum(r.median_s for r in streaming) / hbm_bandwidth:.2g}")


def fit_line(points: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + b x."""
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fit_all_reduce(rows: list[CalibrationRow], workers: tuple[int, ...]) -> tuple[float, float]:
    """(floor s, bus bandwidth bytes/s) of a node's all-reduce from calls on `workers` GPUs:
    the median time of messages <= 128 KiB; the median bus bandwidth, 2(n-1)/n x bytes / time,
    of messages >= 32 MiB (2-byte elements)."""
    chosen = [r for r in rows if r.shape_dict["W"] in workers]
    floor = statistics.median(r.median_s for r in chosen if r.shape_dict["N"] * 2 <= 128 * 1024)
    large = [r for r in chosen if r.shape_dict["N"] * 2 >= 32 * 2**20]
    bus = statistics.median(2 * (r.shape_dict["W"] - 1) / r.shape_dict["W"] * 2 * r.shape_dict["N"] / r.median_s for r in large)
    return floor, bus


# ---- evaluating --------------------------------------------------------------------------------


def cost_models(model: str, accel: str, tp: int, extras: RooflineExtrasConfig, table: CalibrationTable | None,
                link: str = "nvlink4") -> tuple[CostModel, CostModel, CostModel | None]:
    m, a = load_model(model), load_accelerator(accel)
    tp_link = load_link(link) if tp > 1 else None

    def build(cfg: CostConfig, calibration: CalibrationTable | None = None) -> CostModel:
        return CostModel(m, a, cfg, tp=tp, tp_link=tp_link, calibration=calibration)

    fp16 = dict(dtype="fp16", kv_dtype="fp16", efficiency=EfficiencyConfig())
    calibrated = build(CostConfig(extras=extras, **fp16), table) if table is not None else None
    return build(CostConfig(extras=PLAIN, **fp16)), build(CostConfig(extras=extras, **fp16)), calibrated


def mlp_calls(rows: list[CalibrationRow], model: str, accel: str, extras: RooflineExtrasConfig,
              table: CalibrationTable | None) -> list[Call]:
    """Each measured GEMM and small op of a hold-out mlp.csv against the three predictions."""
    spec = load_model(model)
    index = shape_index(spec)
    part = load_accelerator(accel)
    rate = part.hbm_bandwidth * (part.memory_efficiency or DEFAULT_MEMORY_EFFICIENCY)
    calls = []
    by_tp: dict[int, tuple[CostModel, CostModel, CostModel | None]] = {}
    for row in rows:
        shape = row.shape_dict
        token_field = "M" if row.kernel == "matmul" else "T"
        tokens = shape[token_field]
        tp, name = index[(row.kernel, tuple(sorted((k, v) for k, v in shape.items() if k != token_field)))]
        if tp not in by_tp:
            by_tp[tp] = cost_models(model, accel, tp, extras, table)
        if row.kernel == "matmul":
            preds = [None if cm is None else cm.gemm_call_s(name, tokens) for cm in by_tp[tp]]
            operator = f"gemm {name}"
        else:
            preds = [None if cm is None else cm.small_op_call_s(row.kernel, tokens) for cm in by_tp[tp]]
            preds[0] = _traffic_s(row, rate)  # the plain roofline counts no small op: its traffic time
            operator = row.kernel
        calls.append(Call(operator, model, accel, tp, f"{tokens} tokens", row.median_s, *preds))
    return calls


def _traffic_s(row: CalibrationRow, rate: float) -> float:
    return row.bytes / rate


def shape_index(spec: ModelSpec) -> dict[tuple[str, tuple[tuple[str, int], ...]], tuple[int, str]]:
    """(kernel, shape without the token field) -> (TP degree, operator name) for the shapes a
    model's layer has at TP 1, 2, 4, 8 (TP 1 wins where a shape does not depend on TP)."""
    h, heads, kv, d, width = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.intermediate_size
    index = {}
    for tp in (8, 4, 2, 1):
        gemms = {"qkv": ((heads + 2 * kv) * d // tp, h), "attn_o": (h, heads * d // tp),
                 "mlp_gate_up": (2 * width // tp, h), "mlp_down": (h, width // tp)}
        for name, (n, k) in gemms.items():
            index[("matmul", (("K", k), ("N", n)))] = (tp, name)
        index[("rope", (("D", d), ("H", heads // tp), ("HKV", max(1, kv // tp))))] = (tp, "rope")
        index[("silu_mul", (("D", width // tp),))] = (tp, "silu_mul")
        for kernel in ("rms_norm", "residual_add"):
            index[(kernel, (("D", h),))] = (tp, kernel)
    return index


def attention_calls(rows: list[CalibrationRow], extras: RooflineExtrasConfig, table: CalibrationTable) -> list[Call]:
    models = cost_models("llama-2-70b", "A100", 2, extras, table)
    calls = []
    for row in rows:
        shape = row.shape_dict
        if row.kernel == "paged_decode_attention":
            preds = [cm.decode_attention_layer_s(shape["B"], shape["T"]) for cm in models]
            calls.append(Call("attention decode", "llama-2-70b", "A100", 2, f"B={shape['B']} T={shape['T']}", row.median_s, *preds))
        else:
            new, total = shape["Q"], shape["T"]
            preds = [cm.prefill_attention_layer_s(new, total - new) for cm in models]
            calls.append(Call("attention prefill", "llama-2-70b", "A100", 2, f"Q={new} T={total}", row.median_s, *preds))
    return calls


def all_reduce_calls(rows: list[CalibrationRow], node: str, floor: float, bus: float) -> list[Call]:
    """Held-out all-reduce calls (8 GPUs) against the link's nominal roofline and the fitted curve."""
    link = load_link("nvlink4") if node.startswith("h100") else load_link("nvlink3")
    calls = []
    for row in rows:
        w, n = row.shape_dict["W"], row.shape_dict["N"]
        moved = 2 * (w - 1) / w * 2 * n
        nominal = moved / (link.bandwidth * EfficiencyConfig().collective) + 2 * (w - 1) * link.latency
        fitted = floor + moved / bus
        calls.append(Call(f"all_reduce {node}", "-", node, w, f"{2 * n} bytes", row.median_s, nominal, fitted, None))
    return calls


# ---- reporting ---------------------------------------------------------------------------------


def errors(calls: list[Call], pick: Callable[[Call], float | None]) -> tuple[float, float]:
    """(mean absolute relative error, median of predicted / measured) over calls with a prediction."""
    pairs = [(pick(c), c.profile_s) for c in calls if pick(c) is not None]
    if not pairs:
        return float("nan"), float("nan")
    return (statistics.fmean(abs(p - m) / m for p, m in pairs), statistics.median(p / m for p, m in pairs))


def summary_table(calls: list[Call]) -> str:
    groups: dict[tuple[str, str, str], list[Call]] = defaultdict(list)
    for c in calls:
        groups[(c.operator, c.model, c.gpu)].append(c)
    lines = ["| operator | model | GPU | calls | roofline: mean abs err, median ratio | + extras | calibrated |",
             "|---|---|---|---|---|---|---|"]
    for (op, model, gpu), group in sorted(groups.items()):
        cells = []
        for pick in (lambda c: c.roofline_s, lambda c: c.extras_s, lambda c: c.calibrated_s):
            err, ratio = errors(group, pick)
            cells.append("—" if err != err else f"{err:.0%}, x{ratio:.2f}")
        lines.append(f"| {op} | {model} | {gpu} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sizes_table(calls: list[Call], wanted: Callable[[Call], bool]) -> str:
    lines = ["| operator | model | GPU | TP | size | profile (us) | roofline (us) | + extras (us) | calibrated (us) |",
             "|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for c in sorted(calls, key=lambda c: (c.operator, c.model, c.gpu, c.tp, int(c.size.split()[0].split("=")[-1]))):
        key = (c.operator, c.model, c.gpu, c.tp, c.size)
        if not wanted(c) or key in seen:
            continue
        seen.add(key)
        cal = "—" if c.calibrated_s is None else f"{c.calibrated_s * 1e6:.1f}"
        lines.append(f"| {c.operator} | {c.model} | {c.gpu} | {c.tp} | {c.size} | {c.profile_s * 1e6:.1f} | "
                     f"{c.roofline_s * 1e6:.1f} | {c.extras_s * 1e6:.1f} | {cal} |")
    return "\n".join(lines)


def attention_examples(calls: list[Call]) -> list[Call]:
    """A spread of held-out attention calls to show: per decode batch of 1, 8, 32 and 128 the
    shortest, middle and longest context; prefill calls at 8 evenly spaced ranks of measured time."""
    shown = []
    for batch in (1, 8, 32, 128):
        group = sorted((c for c in calls if c.size.startswith(f"B={batch} ")), key=lambda c: c.profile_s)
        if group:
            shown += [group[0], group[len(group) // 2], group[-1]]
    prefill = sorted((c for c in calls if c.operator == "attention prefill"), key=lambda c: c.profile_s)
    shown += [prefill[i * (len(prefill) - 1) // 7] for i in range(8)] if prefill else []
    return shown


def write_csv(calls: list[Call], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(Call.__dataclass_fields__)
        for c in calls:
            writer.writerow([c.operator, c.model, c.gpu, c.tp, c.size, f"{c.profile_s:.6g}", f"{c.roofline_s:.6g}",
                             f"{c.extras_s:.6g}", "" if c.calibrated_s is None else f"{c.calibrated_s:.6g}"])


def plot(calls: list[Call], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 5), sharex=True, sharey=True)
    names = sorted({c.operator.split()[0] for c in calls})
    colors = {name: f"C{i}" for i, name in enumerate(names)}  # one colour per family in every panel
    for ax, (title, pick) in zip(axes, (("roofline", lambda c: c.roofline_s), ("roofline + extras", lambda c: c.extras_s),
                                        ("calibrated (fit part's rows)", lambda c: c.calibrated_s))):
        families = defaultdict(list)
        for c in calls:
            if pick(c) is not None:
                families[c.operator.split()[0]].append((c.profile_s * 1e6, pick(c) * 1e6))
        for family, points in sorted(families.items()):
            xs, ys = zip(*points)
            ax.scatter(xs, ys, s=4, alpha=0.4, label=family, color=colors[family])
        ax.plot([1, 1e5], [1, 1e5], color="black", linewidth=0.8)
        ax.set(xscale="log", yscale="log", title=title, xlabel="Vidur profile (us)")
    axes[0].set_ylabel("predicted (us)")
    axes[0].legend(markerscale=3, fontsize=8)
    fig.suptitle("Held-out operator calls: predicted vs measured (Vidur profiles)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# ---- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/vidur_calibration"))
    args = parser.parse_args(argv)
    root = locations.resolve_path("@data/profiles/vidur", Path.cwd())
    a100 = load_accelerator("A100")

    fit_rows = [r for name in FIT_MODELS for r in read_vidur_profile(root / "compute/a100/meta-llama" / name)
                if r.kernel not in ("paged_decode_attention", "prefill_attention")]
    attention = [r for r in read_vidur_profile(root / "compute/a100/meta-llama/Llama-2-70b-hf")
                 if r.kernel in ("paged_decode_attention", "prefill_attention")]
    in_fit = lambda r: r.shape_dict["T"] % 128 == 0 and r.shape_dict.get("Q", 128) % 128 == 0  # noqa: E731
    attention_fit = [r for r in attention if in_fit(r)]
    attention_eval = [r for r in attention if not in_fit(r)]
    extras = fit_extras(fit_rows, attention_fit, a100.hbm_bandwidth)
    print(f"fitted extras (A100, Llama-2 + attention fit part): {extras}")
    shipped = dataclasses.replace(RooflineExtrasConfig(), kernel_launch_s=a100.kernel_launch_s,
                                  decode_attention_floor_s=a100.decode_attention_floor_s)  # A100.toml carries these
    fitted = ("kernel_launch_s", "rms_norm_memory", "rope_memory", "activation_memory", "residual_add_memory",
              "decode_attention_floor_s")
    same = "equal" if all(getattr(extras, f) == getattr(shipped, f) for f in fitted) else "DIFFERENT from"
    print(f"the fit is {same} the shipped defaults (sim/config.py RooflineExtrasConfig)")

    for folder, part in (("a100", a100), ("h100", load_accelerator("H100"))):
        fitted_eff = fit_memory_efficiency(read_vidur_profile(root / "compute" / folder / "meta-llama" / MEMORY_FIT_MODEL),
                                           part.hbm_bandwidth)
        verdict = "equal to" if fitted_eff == part.memory_efficiency else "DIFFERENT from"
        print(f"memory efficiency {part.name} (decode GEMMs of {MEMORY_FIT_MODEL}): {fitted_eff}, {verdict} "
              f"{part.name}.toml's ({part.memory_efficiency})")

    table = CalibrationTable([*fit_rows, *attention_fit], source="fit part")
    calls: list[Call] = []
    for folder, model, accel in HOLDOUT:
        rows = read_vidur_profile(root / "compute" / folder)
        calls += mlp_calls(rows, model, accel, extras, table if accel == "A100" else None)
    calls += attention_calls(attention_eval, extras, table)

    for node, fit_w, eval_w in (("a100_dgx", (2, 4), 8), ("h100_dgx", (2, 4), 8)):
        rows = read_vidur_profile(root / "network" / node)
        rows = [r for r in rows if r.kernel == "all_reduce"]
        floor, bus = fit_all_reduce(rows, fit_w)
        print(f"all-reduce {node} (fit on {fit_w} GPUs): floor {floor * 1e6:.1f} us, bus bandwidth {bus / 1e9:.0f} GB/s")
        calls += all_reduce_calls([r for r in rows if r.shape_dict["W"] == eval_w], node, floor, bus)

    host_rows = read_vidur_profile(root / "cpu_overhead/a100")
    fit_host = [r for r in host_rows if r.variant == "meta-llama/Llama-2-7b-hf"]
    per_step, per_seq = fit_line((r.shape_dict["B"], r.median_s) for r in fit_host)
    print(f"host (vLLM v0, A100; fit on Llama-2-7B TP1): per_step_s {per_step:.3g}, per_request_s {per_seq:.3g}")
    before_outputs = [r for r in host_phase_rows(root / "cpu_overhead/a100/cpu_overheads.csv", HOST_PHASES_BEFORE_OUTPUTS)
                      if r.variant == "meta-llama/Llama-2-7b-hf"]
    sync_step, sync_seq = fit_line((r.shape_dict["B"], r.median_s) for r in before_outputs)
    print(f"host without output processing (the same rows, {' + '.join(HOST_PHASES_BEFORE_OUTPUTS)}): "
          f"per_step_s {sync_step:.3g}, per_request_s {sync_seq:.3g}")
    for r in host_rows:
        if r not in fit_host:
            predicted = per_step + per_seq * r.shape_dict["B"]
            calls.append(Call("host step", r.variant, "A100", r.shape_dict["W"], f"{r.shape_dict['B']} seqs",
                              r.median_s, predicted, predicted, None))

    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(calls, args.out / "vidur_calibration.csv")
    plot([c for c in calls if not c.operator.startswith("host")], args.out / "vidur_calibration.png")
    print("\n## Errors on the held-out part\n")
    print(summary_table(calls))
    print("\n## Per operator and size (held out)\n")
    print(sizes_table(calls, lambda c: (c.operator.startswith(("gemm", "rms", "rope", "silu", "residual"))
                                        and c.tp == (1 if c.operator in ("rms_norm", "residual_add") else 2)
                                        and c.model in ("llama-3-8b", "llama-2-70b")
                                        and int(c.size.split()[0]) in TOKENS_SHOWN)))
    print()
    shown = attention_examples([c for c in calls if c.operator.startswith("attention")])
    print(sizes_table(calls, lambda c: c in shown))
    print(f"\nwrote {args.out / 'vidur_calibration.csv'} and {args.out / 'vidur_calibration.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
