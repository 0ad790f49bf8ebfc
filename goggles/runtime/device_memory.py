"""What fits: free memory on a Warp device, and one clear refusal before an allocation too large for
it (which would otherwise fail deep inside NumPy or Warp, or wake the system's out-of-memory killer)."""

from __future__ import annotations

from goggles.errors import ConfigError


def available_memory(device) -> int | None:
    """Free bytes on ``device`` (CUDA: the GPU's; CPU or None: MemAvailable), or None if unknown."""
    if device is not None and device.is_cuda:
        free = getattr(device, "free_memory", None)
        return int(free) if free else None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(device, need: int, what: str, advice: str) -> None:
    """Refuse ``what`` (needing about ``need`` bytes on ``device``; None: this machine's memory) where that
    is more than is free.

    Raises:
        ConfigError: "<what> needs about X GiB on <device>, but Y GiB is available: <advice>".
    """
    free = available_memory(device)
    if free is not None and need > free:
        raise ConfigError(
            f"{what} needs about {need / 2**30:.1f} GiB on {device or 'this machine'}, but {free / 2**30:.1f} GiB is "
            f"available: {advice}"
        )
