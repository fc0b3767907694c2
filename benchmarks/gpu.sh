#!/usr/bin/env bash
# One command for a GPU machine (written for an H200): every kernel check natively (compiled
# Triton, TRITON_INTERPRET unset), the GPU targets of issue 3 side by side, the full benchmark grid
# (calibration table), whole-model step times, the kernel test suite with the GPU present and the
# real engine on CUDA, in about 5 minutes (251 s on an H200 on 2026-12-04, before the model steps).
#
#   benchmarks/gpu.sh [OUT_DIR]      OUT_DIR defaults to $OUT if set, else results/gpu-<UTC timestamp>
#   ILAB_SKIP="bench real" benchmarks/gpu.sh OUT_DIR     leave steps out (keys below)
#
# It writes into OUT_DIR (when OUT_DIR is the device tool's $OUT, packed at the end into
# gpu-results.tgz beside summary.log and targets.log: the tool brings back 8 files at most):
#   env.log          nvidia-smi, python/torch/triton versions
#   targets.log      the verdict table (benchmarks/gpu_targets.py)   targets.json  its numbers
#   check.log        `infralab kernels check` (verdict per kernel, partition checks)
#   bench.log        benchmark summary and progress               calibration-full.csv  the table
#   model-steps.log  model_steps.json: device time of whole Llama-3-8B steps (benchmarks/gpu_model_steps.py)
#   pytest.log       tests/kernels with the GPU present
#   summary.log      exit status and wall time of each step
# and, when CUDA and the real side's packages are there (step 5; else one SKIPPED line in summary.log):
#   real-profile.log, real-run.log, fidelity.log, and their folders under real/
#
# No install needed: the package is imported from a temporary tree of symlinks
# (/tmp/ilab.*/infralab -> infralab/*.py, kernels/, sim/, agent/) on PYTHONPATH, and the command
# table (infralab/cli.py) imports only the handler a command runs (simpy and pydantic are not on the GPU image).
#
# fla-core (for the "v3 faster than fused_recurrent_kda" target) is never a dependency. To measure
# against it, carry its wheel (pure Python; einops, its one requirement, is on the image). Here,
# in the repo root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl fla-core==0.6.0
# then name `.whl` in the device tool's `carry`. This script installs every .whl/*.whl with
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
# and puts /tmp/site on PYTHONPATH. Without it the fla row reads SKIP ("fla-core not available").
#
# Each step has a time limit (seconds; override with the environment variables below) so the whole
# run stays under 5 minutes even if one step hangs; a step that fails or times out does not stop
# the others. Exit status: 0 when every step passed, else 1.
set -u -o pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${1:-${OUT:-$REPO/results/gpu-$(date -u +%Y%m%dT%H%M%SZ)}}"
# Worst case 60 + 50 + 110 + 90 + 70 = 380 s of steps (Triton's compile cache is shared between them).
LIMIT_TARGETS="${ILAB_LIMIT_TARGETS:-60}"
LIMIT_CHECK="${ILAB_LIMIT_CHECK:-50}"
LIMIT_BENCH="${ILAB_LIMIT_BENCH:-110}"
LIMIT_PYTEST="${ILAB_LIMIT_PYTEST:-70}"
LIMIT_MODEL="${ILAB_LIMIT_MODEL:-90}"
# The real engine on CUDA (step 5): 60 + 60 + 180 + 150 s more when it runs.
LIMIT_REAL_PROFILE="${ILAB_LIMIT_REAL_PROFILE:-60}"
LIMIT_REAL_RUN="${ILAB_LIMIT_REAL_RUN:-60}"
LIMIT_FIDELITY="${ILAB_LIMIT_FIDELITY:-180}"
LIMIT_CONDITIONS="${ILAB_LIMIT_CONDITIONS:-150}"
PYTHON="${PYTHON:-python3}"

mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
SUMMARY="$OUT_DIR/summary.log"
: >"$SUMMARY"
unset TRITON_INTERPRET
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
# `python -m`/`-c` put the working directory (the repo root) first on sys.path, where `infralab/`
# lacks kernels/, sim/, agent/ and real/: the import tree below must win (first device run, 2026-12-04).
export PYTHONSAFEPATH=1

# ---- import tree: infralab without installing it ------------------------------------------------
ILAB="$(mktemp -d /tmp/ilab.XXXXXX)"
trap 'rm -rf "$ILAB"' EXIT
mkdir -p "$ILAB/infralab"
for f in "$REPO"/infralab/*.py "$REPO"/infralab/metrics "$REPO"/infralab/workload; do ln -s "$f" "$ILAB/infralab/"; done
for part in kernels sim agent real; do ln -s "$REPO/$part" "$ILAB/infralab/$part"; done
export PYTHONPATH="$ILAB${PYTHONPATH:+:$PYTHONPATH}"

if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$REPO"/.whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

FAILED=0
START_ALL=$SECONDS

# run_step KEY NAME LIMIT LOG COMMAND...: run with a time limit, log stdout+stderr, record the status;
# skipped (one line) when KEY is in ILAB_SKIP (space-separated: targets check bench model pytest real
# conditions).
run_step() {
    local key="$1" name="$2" limit="$3" log="$4"
    shift 4
    local start=$SECONDS status
    if [[ " ${ILAB_SKIP:-} " == *" $key "* ]]; then
        echo "$name: SKIPPED (ILAB_SKIP)" | tee -a "$SUMMARY"
        return
    fi
    echo "== $name (limit ${limit}s) ==" | tee -a "$SUMMARY"
    (cd "$REPO" && timeout --kill-after=5 "$limit" "$@") >"$log" 2>&1
    status=$?
    tail -n 40 "$log"
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        echo "$name: TIMED OUT after ${limit}s (status $status)" | tee -a "$SUMMARY"
    else
        echo "$name: exit $status in $((SECONDS - start))s" | tee -a "$SUMMARY"
    fi
    [ "$status" -eq 0 ] || FAILED=1
}

{
    date -u
    nvidia-smi || echo "nvidia-smi not available"
    "$PYTHON" -c '
import sys, torch, triton
import infralab.kernels.bench as bench
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
print("infralab.kernels imported from", bench.__file__)
try:
    import fla
    print("fla-core", fla.__version__)
except Exception as exc:
    print("fla-core not available:", exc)
'
} >"$OUT_DIR/env.log" 2>&1
cat "$OUT_DIR/env.log"

# 1. The targets first: the figures that matter most if time runs short.
run_step targets "gpu targets" "$LIMIT_TARGETS" "$OUT_DIR/targets.log" \
    "$PYTHON" benchmarks/gpu_targets.py --out "$OUT_DIR"

# 2. `infralab kernels check` (the command table imports only the kernels' handler).
run_step check "kernels check" "$LIMIT_CHECK" "$OUT_DIR/check.log" "$PYTHON" -m infralab kernels check

# 3. The full benchmark grid -> calibration table.
run_step bench "kernels bench --grid full" "$LIMIT_BENCH" "$OUT_DIR/bench.log" \
    "$PYTHON" -m infralab.kernels.bench --grid full --out "$OUT_DIR/calibration-full.csv"

# 3b. Device time of whole Llama-3-8B steps (decode and prefill, CUDA graphs): the cost model's TP1
#     steps, measured; `benchmarks/gpu_model_steps.py --points` turns them into fidelity-public points.
run_step model "model steps (llama-3-8b, cuda graphs)" "$LIMIT_MODEL" "$OUT_DIR/model-steps.log" \
    "$PYTHON" benchmarks/gpu_model_steps.py --out "$OUT_DIR"

# 4. The kernel tests with the GPU present (parallel when pytest-xdist is there: compiling dominates).
XDIST=()
if "$PYTHON" -c 'import xdist' 2>/dev/null; then XDIST=(-n 8); fi
run_step pytest "pytest tests/kernels" "$LIMIT_PYTEST" "$OUT_DIR/pytest.log" \
    "$PYTHON" -m pytest -q -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} tests/kernels

# 5. The real engine on CUDA (issue 9; first run on an H200 on 2026-12-04, docs/gpu.md):
#    the Llama-3-8B shape with random weights, bf16 (experiments/real/llama3_8b_cuda.toml), profiled
#    and replayed, then a small fidelity study (experiments/fidelity/cuda_small.toml). Skipped, with
#    the reason, when CUDA or the real side's packages (transformers, psutil, pydantic, simpy: carry
#    them as wheels in .whl/ when the image lacks them) are absent. Off with ILAB_SKIP_REAL=1.
REAL_SKIP="$("$PYTHON" -c '
import importlib.util, torch
missing = [m for m in ("transformers", "psutil", "pydantic", "simpy") if importlib.util.find_spec(m) is None]
print("no CUDA device" if not torch.cuda.is_available() else ("missing " + ", ".join(missing)) if missing else "")
' 2>&1 | tail -n 1)"
if [ "${ILAB_SKIP_REAL:-0}" = "1" ]; then REAL_SKIP="ILAB_SKIP_REAL=1"; fi
if [ -n "$REAL_SKIP" ]; then
    echo "real engine on CUDA: SKIPPED ($REAL_SKIP)" | tee -a "$SUMMARY"
else
    mkdir -p "$OUT_DIR/real"
    run_step real "real profile (llama-3-8b, cuda)" "$LIMIT_REAL_PROFILE" "$OUT_DIR/real-profile.log" \
        "$PYTHON" -m infralab real profile experiments/real/llama3_8b_cuda.toml --out "$OUT_DIR/real/profile"
    run_step real "real run (llama-3-8b, cuda)" "$LIMIT_REAL_RUN" "$OUT_DIR/real-run.log" \
        "$PYTHON" -m infralab real run experiments/real/llama3_8b_cuda.toml --out "$OUT_DIR/real/run"
    run_step real "fidelity run (cuda_small)" "$LIMIT_FIDELITY" "$OUT_DIR/fidelity.log" \
        "$PYTHON" -m infralab fidelity run experiments/fidelity/cuda_small.toml --out "$OUT_DIR/real/fidelity" --no-progress
    # Why a replay's steps take longer than the profile's (docs/gpu.md): one step shape alone, on a
    # worker thread, beside a pure-Python thread (one step: it took 35 s on the H200), in a replay.
    run_step conditions "step conditions (llama-3-8b, cuda)" "$LIMIT_CONDITIONS" "$OUT_DIR/step-conditions.log" \
        "$PYTHON" benchmarks/step_conditions.py --device cuda --model llama-3-8b --dtype bf16 --repeats 20 \
        --contended-repeats 1 --poll-output 4 --out "$OUT_DIR/real"
fi

echo "total: $((SECONDS - START_ALL))s; results in $OUT_DIR" | tee -a "$SUMMARY"
if [ "$FAILED" -eq 0 ]; then echo "gpu.sh: all steps passed" | tee -a "$SUMMARY"; else echo "gpu.sh: some steps FAILED" | tee -a "$SUMMARY"; fi

# The device tool brings back at most 8 files, 2 folders down: when OUT_DIR is its $OUT, everything
# goes back as gpu-results.tgz, with summary.log and targets.log beside it to read at once.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$OUT_DIR" = "$(cd "$OUT" && pwd)" ]; then
    PACK="$(mktemp -d /tmp/gpu-pack.XXXXXX)"
    tar czf "$PACK/gpu-results.tgz" -C "$OUT_DIR" . && find "$OUT_DIR" -mindepth 1 \
        ! -name summary.log ! -name targets.log -delete && mv "$PACK/gpu-results.tgz" "$OUT_DIR/"
    rmdir "$PACK"
    echo "packed into $OUT_DIR/gpu-results.tgz (tar xzf it)"
fi
exit "$FAILED"
