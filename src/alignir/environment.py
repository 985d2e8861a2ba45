"""What a run ran on: library versions and the processor, recorded beside timings so that two runs'
seconds can be compared (the same recipe's step time depends on the CPU's vector units, the
thread count and the torch / transformers build)."""
from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["cpu_name", "cpu_flags", "cpu_has_native_bf16", "describe_environment"]

#: CPU features that change how fast the matrix kernels run (bf16 and int8 above all).
_KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def _cpuinfo() -> tuple[str, list[str]]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor(), []
    name = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), platform.processor())
    flags = next((x.split(":", 1)[1].split() for x in lines if x.startswith("flags")), [])
    return name, flags


def cpu_name() -> str:
    """The CPU's model name and its widest vector extension, e.g. ``"AMD EPYC (avx512f)"``."""
    name, flags = _cpuinfo()
    wide = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else ""
    return f"{name} ({wide})" if wide else name


def cpu_flags() -> list[str]:
    """The CPU's features that change how fast the matrix kernels run (of ``avx2``, ``avx512f``,
    ``avx512_bf16``, ``avx512_vnni``, ``amx_bf16``, ``amx_int8``)."""
    return _kernel_flags(_cpuinfo()[1])


def _kernel_flags(flags: list[str]) -> list[str]:
    return [f for f in _KERNEL_FLAGS if f in flags]


def cpu_has_native_bf16() -> bool:
    """Whether the CPU multiplies bf16 matrices in hardware (``avx512_bf16`` or AMX). Without it
    torch emulates bf16 products, far slower than fp32."""
    _, flags = _cpuinfo()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe_environment(device: str | None = None) -> dict[str, Any]:
    """Python, torch, transformers and peft versions, the CPU (name, cores, kernel flags), torch's
    thread count and, for a CUDA ``device``, the card's name."""
    import torch

    name, flags = _cpuinfo()
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "cpu": name,
        "cpu_count": os.cpu_count(),
        "cpu_flags": _kernel_flags(flags),
        "torch_threads": torch.get_num_threads(),
    }
    if device and str(device).startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env
