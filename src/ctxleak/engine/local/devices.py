"""Where an in-process model runs and in which dtype: ``auto`` resolved to what this machine
has, and a device or dtype it lacks refused in one line naming the parameter."""

from __future__ import annotations

import torch

from ctxleak.errors import ConfigError


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> cuda, mps or cpu, whichever this machine has; a named device that this torch
    build or machine lacks is a ConfigError naming ``device`` (not torch's AssertionError)."""
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if _mps_available() else "cpu"
    index = device[5:] if device.startswith("cuda:") else None
    if device not in ("cpu", "cuda", "mps") and not (index and index.isdigit()):
        raise ConfigError(f"unknown device '{device}': use auto, cpu, cuda, cuda:N or mps",
                          param="device")
    if device.startswith("cuda"):
        _check_cuda(device, index)
    if device == "mps" and not _mps_available():
        raise ConfigError("device='mps', but this machine or torch build has no Apple GPU "
                          "(MPS) backend: use device='cpu' or 'auto'", param="device")
    return device


def _check_cuda(device: str, index: str | None) -> None:
    if torch.version.cuda is None and torch.version.hip is None:
        raise ConfigError(f"device='{device}', but this torch ({torch.__version__}) is a build "
                          "without CUDA: install a CUDA build of torch, or use device='cpu'",
                          param="device")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(f"device='{device}', but torch sees no CUDA GPU (check the driver "
                          "and CUDA_VISIBLE_DEVICES), or use device='cpu'", param="device")
    if index is not None and int(index) >= count:
        raise ConfigError(f"device='{device}', but torch sees {count} CUDA GPU(s), numbered "
                          f"0 to {count - 1}", param="device")


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ConfigError(f"unknown dtype '{dtype}': use auto, float32, bfloat16 or float16",
                          param="dtype")
    if dtype == "bfloat16" and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype='bfloat16', but the GPU of device='{device}' does not "
                          "support it: use dtype='float16' or 'float32'", param="dtype",
                          also=("device",))
    return table[dtype]
