"""Vidur's public GPU profiles (microsoft/vidur, MIT licence) read as calibration rows.

Vidur's profiling data (`../shared/data/profiles/vidur/`, README there) is read in its own CSV
format and converted, at load, into `CalibrationRow`s of the one calibration format
(docs/calibration.md), so that the simulator reads it through the same lookup as the kernels'
bench tables (and, later, a real engine's step profile). Plain Python (csv only): every part of
infralab may import it.

What is read, from any folder of the profile tree (the folder and everything under it):

| Vidur file | Vidur column | row `kernel` | shape |
|---|---|---|---|
| `compute/<gpu>/<org>/<model>/mlp.csv` | attn_pre_proj, attn_post_proj, mlp_up_proj, mlp_down_proj | `matmul` | M tokens, N, K per rank |
| same | input_layernorm, post_attention_layernorm | `rms_norm` | T tokens, D hidden |
| same | attn_rope | `rope` | T, H, HKV (heads per rank), D head dim |
| same | mlp_act | `silu_mul` | T, D (MLP width per rank) |
| same | add | `residual_add` | T, D hidden |
| `compute/<gpu>/.../attention.csv` (decode rows) | attn_decode (+ its input/output reshapes) | `paged_decode_attention` | B, H, HKV, D, T context per sequence |
| same (prefill rows) | attn_prefill (+ reshapes) | `prefill_attention` | Q new tokens, T total context, H, HKV, D |
| `network/<node>/all_reduce.csv` (one node only) | all_reduce | `all_reduce` | W ranks, N elements |
| `network/<node>/send_recv.csv` (one node only) | send_recv | `send_recv` | N elements |
| `cpu_overhead/<gpu>/cpu_overheads.csv` | schedule + sampler_e2e + prepare_inputs_e2e + process_model_outputs | `engine_host` | B batch, W TP |

Conventions: `median_s` is Vidur's `time_stats.<op>.median` in seconds (Vidur writes ms);
`dtype` is `fp16` (Vidur profiles in float16); `device` is the name torch reports for the GPU
of the folder (`VIDUR_DEVICES`); `variant` is `vidur` for compute rows, the node name
(`a100_dgx`, ...) for network rows, the Hugging Face model name for host rows; `bytes` and
`flops` are the operator's work (`infralab.work_formulas`) at 2 bytes per element. Repeated
measurements of a shape stay as rows (the table keeps the fastest). Rows of sizes Vidur measured
as 0 (an empty KV cache in a decode row) are skipped: shapes are positive. `host_rows` reads
the host rows of one file summed over some of the phases only (e.g. without output processing).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from infralab.calibration_table import CalibrationRow, Shape
from infralab.errors import InputError
from infralab.input_files import csv_error, read_text
from infralab.work_formulas import scaling_work

#: The names torch reports for the GPUs Vidur profiled (80 GB SXM parts), by Vidur's folder name.
VIDUR_DEVICES: dict[str, str] = {"a100": "NVIDIA A100-SXM4-80GB", "h100": "NVIDIA H100 80GB HBM3"}

VIDUR_DTYPE = "fp16"
_ELEMENT_BYTES = 2
_MS = 1e-3
_EXPECTED = "a folder of Vidur's profile tree (compute/, network/, cpu_overhead/; see its README)"

# mlp.csv operators that are GEMMs: (n, k) per rank from the model's shape columns.
_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# The host phases of one vLLM (v0) step that run on the CPU before/after the model's kernels.
HOST_PHASES = ("schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs")
# The phases left on a step's critical path once output processing overlaps the next forward
# (vLLM PR #7049, default from v0.6.0) or runs in the front-end process (the V1 engine).
HOST_PHASES_BEFORE_OUTPUTS = HOST_PHASES[:3]


def read_vidur_profile(folder: str | Path) -> list[CalibrationRow]:
    """Every row Vidur's profile files under `folder` give, in a fixed order (files sorted by
    path). InputError when the folder does not exist or holds no profile file, or a file is
    malformed (naming the file, line and column)."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(str(root), "is not a folder", _EXPECTED)
    rows: list[CalibrationRow] = []
    files = sorted(path for path in root.rglob("*.csv") if path.name in _READERS)
    if not files:
        raise InputError(str(root), "holds no Vidur profile file (mlp.csv, attention.csv, ...)", _EXPECTED)
    for path in files:
        rows.extend(_READERS[path.name](path))
    return rows


# ---- reading one file --------------------------------------------------------------------------


def _records(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(where, record) per data line of a Vidur CSV; `where` is `file:line`."""
    text = read_text(path, "table", "a Vidur profile CSV")
    reader = csv.DictReader(text.splitlines())
    try:
        for number, record in enumerate(reader, start=2):
            yield f"{path}:{number}", record
    except csv.Error as exc:  # a field over the csv module's limit, a NUL byte: not a traceback
        raise csv_error(f"{path}:{reader.reader.line_num}", exc) from None  # DictReader counts only rows read


def _number(record: dict[str, str], column: str, where: str) -> float:
    raw = record.get(column)
    try:
        value = float(raw) if raw not in (None, "") else float("nan")
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise InputError(f"{where}: column {column}", f"bad value {raw!r}", "a number >= 0")
    return value


def _int(record: dict[str, str], column: str, where: str) -> int:
    value = _number(record, column, where)
    if value != int(value):
        raise InputError(f"{where}: column {column}", f"bad value {record.get(column)!r}", "an integer")
    return int(value)


def _median_s(record: dict[str, str], op: str, where: str) -> float:
    return _number(record, f"time_stats.{op}.median", where) * _MS


def _device(path: Path, marker: str) -> str:
    """The GPU of a file from the folder after `marker` (compute/<gpu>/..., network/<gpu>_...)."""
    parts = path.parts
    if marker not in parts or parts.index(marker) + 1 >= len(parts):
        raise InputError(str(path), f"not under a {marker}/ folder", _EXPECTED)
    name = parts[parts.index(marker) + 1]
    gpu = name.split("_", 1)[0]
    if gpu not in VIDUR_DEVICES:
        raise InputError(str(path), f"unknown GPU folder {name!r}", f"one of {sorted(VIDUR_DEVICES)}")
    return VIDUR_DEVICES[gpu]


def _row(kernel: str, variant: str, shape: Shape, device: str, median_s: float) -> CalibrationRow:
    flops, elements = scaling_work(kernel, dict(shape))
    return CalibrationRow(
        kernel=kernel,
        variant=variant,
        shape=shape,
        dtype=VIDUR_DTYPE,
        device=device,
        median_s=median_s,
        bytes=int(elements * _ELEMENT_BYTES),
        flops=int(flops),
    )


def _mlp_rows(path: Path) -> Iterator[CalibrationRow]:
    device = _device(path, "compute")
    for where, r in _records(path):
        tokens, tp = _int(r, "num_tokens", where), _int(r, "num_tensor_parallel_workers", where)
        hidden, heads = _int(r, "n_embd", where), _int(r, "n_head", where)
        kv_heads, width = _int(r, "n_kv_head", where), _int(r, "n_expanded_embd", where)
        head_dim = hidden // heads
        gated = r.get("use_gated_mlp", "True").strip().lower() == "true"
        gemm_nk = {
            "attn_pre_proj": ((heads + 2 * kv_heads) * head_dim // tp, hidden),
            "attn_post_proj": (hidden, heads * head_dim // tp),
            "mlp_up_proj": ((2 if gated else 1) * width // tp, hidden),
            "mlp_down_proj": (hidden, width // tp),
        }
        for op in _GEMMS:
            n, k = gemm_nk[op]
            yield _row("matmul", "vidur", (("M", tokens), ("N", n), ("K", k)), device, _median_s(r, op, where))
        for op in ("input_layernorm", "post_attention_layernorm"):
            yield _row("rms_norm", "vidur", (("T", tokens), ("D", hidden)), device, _median_s(r, op, where))
        rope_shape = (("T", tokens), ("H", heads // tp), ("HKV", max(1, kv_heads // tp)), ("D", head_dim))
        yield _row("rope", "vidur", rope_shape, device, _median_s(r, "attn_rope", where))
        yield _row("silu_mul", "vidur", (("T", tokens), ("D", width // tp)), device, _median_s(r, "mlp_act", where))
        yield _row("residual_add", "vidur", (("T", tokens), ("D", hidden)), device, _median_s(r, "add", where))


def _attention_rows(path: Path) -> Iterator[CalibrationRow]:
    device = _device(path, "compute")
    for where, r in _records(path):
        tp = _int(r, "num_tensor_parallel_workers", where)
        hidden, heads, kv_heads = _int(r, "n_embd", where), _int(r, "n_q_head", where), _int(r, "n_kv_head", where)
        head_dim = hidden // heads
        per_rank = (("H", heads // tp), ("HKV", max(1, kv_heads // tp)), ("D", head_dim))
        reshapes = _median_s(r, "attn_input_reshape", where) + _median_s(r, "attn_output_reshape", where)
        context = _int(r, "kv_cache_size", where)
        if r.get("is_prefill", "").strip() == "True":
            new = _int(r, "prefill_chunk_size", where)
            if new == 0:
                continue
            shape = (("Q", new), ("T", context + new), *per_rank)
            yield _row("prefill_attention", "vidur", shape, device, _median_s(r, "attn_prefill", where) + reshapes)
        else:
            if context == 0:
                continue
            shape = (("B", _int(r, "batch_size", where)), *per_rank, ("T", context))
            yield _row("paged_decode_attention", "vidur", shape, device, _median_s(r, "attn_decode", where) + reshapes)


def _network_rows(path: Path) -> Iterator[CalibrationRow]:
    """Collectives inside one node (num_workers = devices_per_node): what tensor parallelism uses."""
    device = _device(path, "network")
    node = path.parent.name
    op = path.stem  # all_reduce or send_recv
    for where, r in _records(path):
        workers, per_node = _int(r, "num_workers", where), _int(r, "devices_per_node", where)
        if op == "all_reduce" and workers != per_node:
            continue
        if op == "send_recv" and per_node != 2:  # both ends on one node
            continue
        size = _int(r, "size", where)
        shape: Shape = (("W", workers), ("N", size)) if op == "all_reduce" else (("N", size),)
        yield _row(op, node, shape, device, _median_s(r, op, where))


def host_rows(path: str | Path, phases: tuple[str, ...] = HOST_PHASES) -> list[CalibrationRow]:
    """The `engine_host` rows of one `cpu_overheads.csv` with each step's time summed over `phases`
    (Vidur's column stems, a subset of HOST_PHASES) instead of all four: e.g. the host time left
    when the engine overlaps output processing (HOST_PHASES_BEFORE_OUTPUTS). Seconds per step."""
    unknown = set(phases) - set(HOST_PHASES)
    if unknown or not phases:
        problem = f"unknown phases {sorted(unknown)}" if unknown else "no phase given"
        raise InputError("phases", problem, f"a non-empty subset of {HOST_PHASES}")
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "is not a file", "a Vidur cpu_overheads.csv")
    return list(_cpu_rows(path, phases))


def _cpu_rows(path: Path, phases: tuple[str, ...] = HOST_PHASES) -> Iterator[CalibrationRow]:
    device = _device(path, "cpu_overhead")
    for where, r in _records(path):
        seconds = sum(_number(r, f"{phase}_median", where) for phase in phases) * _MS
        shape = (("B", _int(r, "batch_size", where)), ("W", _int(r, "tensor_parallel_degree", where)))
        model = r.get("model_name", "").strip() or "unknown"
        yield _row("engine_host", model, shape, device, seconds)


_READERS = {
    "mlp.csv": _mlp_rows,
    "attention.csv": _attention_rows,
    "all_reduce.csv": _network_rows,
    "send_recv.csv": _network_rows,
    "cpu_overheads.csv": _cpu_rows,
}
