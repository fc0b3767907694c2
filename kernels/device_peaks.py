"""Datasheet peaks of the accelerators the roofline fraction is computed against.

Dense (no 2:4 sparsity) peaks of the SXM/PCIe parts, in FLOP/s (integer ops/s for int8), and HBM
bandwidth in bytes/s. Sources, NVIDIA datasheets:
- H200 SXM: https://www.nvidia.com/en-us/data-center/h200/ (4.8 TB/s HBM3e; FP32 67 TFLOPS; TF32
  tensor 989, BF16 1,979, INT8 3,958 "with sparsity", i.e. half that dense).
- H100 SXM / PCIe: https://www.nvidia.com/en-us/data-center/h100/ (SXM 3.35 TB/s, FP32 67, TF32 989,
  BF16 1,979, INT8 3,958 with sparsity; PCIe 2.0 TB/s, FP32 51, TF32 756, BF16 1,513, INT8 3,026 with sparsity).
- A100: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
  (FP32 19.5, TF32 156, BF16 312, INT8 624 dense; 40GB 1,555 GB/s, 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s).

Compute modes (the key a benchmark case names, see `infralab.kernels.bench`): "fp32" = FP32 on the
CUDA cores (no tensor cores: IEEE `tl.dot`, elementwise kernels), "tf32", "bf16", "int8" = tensor
cores, "3xtf32" = a third of the TF32 rate, since every useful product costs three TF32 products.
"""

from __future__ import annotations

from infralab.kernels.calibration import DevicePeaks

TERA = 1e12


def _peaks(name: str, tb_per_s: float, fp32: float, tf32: float, bf16: float, int8: float) -> DevicePeaks:
    flops = {"fp32": fp32 * TERA, "tf32": tf32 * TERA, "3xtf32": tf32 * TERA / 3,
             "bf16": bf16 * TERA, "int8": int8 * TERA}
    return DevicePeaks(name=name, memory_bytes_per_s=tb_per_s * TERA, flops_per_s=flops)


H200 = _peaks("H200 SXM", 4.8, 67.0, 494.5, 989.5, 1979.0)
H100_SXM = _peaks("H100 SXM", 3.35, 67.0, 494.5, 989.5, 1979.0)
H100_PCIE = _peaks("H100 PCIe", 2.0, 51.0, 378.0, 756.5, 1513.0)
A100_40GB = _peaks("A100 40GB", 1.555, 19.5, 156.0, 312.0, 624.0)
A100_80GB_SXM = _peaks("A100 80GB SXM", 2.039, 19.5, 156.0, 312.0, 624.0)
A100_80GB_PCIE = _peaks("A100 80GB PCIe", 1.935, 19.5, 156.0, 312.0, 624.0)


def peaks_for(device_name: str) -> DevicePeaks | None:
    """Peaks for a device as `torch.cuda.get_device_name()` names it (e.g. "NVIDIA H200",
    "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"); None for "cpu" and unknown devices."""
    name = device_name.upper()
    if "H200" in name:
        return H200
    if "H100" in name:
        return H100_PCIE if "PCIE" in name else H100_SXM
    if "A100" in name:
        if "80GB" in name:
            return A100_80GB_PCIE if "PCIE" in name else A100_80GB_SXM
        return A100_40GB
    return None
