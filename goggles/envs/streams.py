"""Ordering a caller's torch stream with Warp's on one CUDA device.

The environments write observations on Warp's stream and read actions torch wrote on the caller's.
Warp's streams are blocking, so against torch's default stream (the legacy one) that order holds by
itself; a caller working on a stream of its own (``with torch.cuda.stream(s)``) is not waited on
implicitly. ``StreamOrder`` makes each side wait for the other where the data changes hands: Warp
for the caller before it reads the actions or rewrites an observation the caller may still be
reading, the caller for Warp before it reads what Warp wrote. Each wait is an event on the GPU; the
host never blocks. On the CPU, and on the default stream, both are no-ops. torch work of the
environments' own, between Warp's kernels (the reset mask), runs on Warp's stream (``on_warp``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import warp as wp


class StreamOrder:
    """Waits between the calling thread's current torch stream and Warp's stream on ``device``."""

    def __init__(self, device: wp.Device, torch_device: torch.device):
        self._device = device
        self._torch_device = torch_device
        self._wrapped: dict[int, wp.Stream] = {}
        """The caller's streams as Warp streams, by CUDA handle (one per stream a caller has used)."""

    def _caller(self) -> wp.Stream | None:
        """The caller's current torch stream, when it is one Warp's stream does not already follow."""
        if not self._device.is_cuda:
            return None
        stream = torch.cuda.current_stream(self._torch_device)
        if stream.cuda_stream == torch.cuda.default_stream(self._torch_device).cuda_stream:
            return None  # the legacy default stream: Warp's blocking streams wait for it and it for them
        wrapped = self._wrapped.get(stream.cuda_stream)
        if wrapped is None:
            wrapped = self._wrapped[stream.cuda_stream] = wp.stream_from_torch(stream)
        return wrapped

    def warp_waits_for_caller(self) -> None:
        """Warp's next work starts after everything the caller queued so far."""
        caller = self._caller()
        if caller is not None:
            wp.get_stream(self._device).wait_stream(caller)

    def caller_waits_for_warp(self) -> None:
        """The caller's next work starts after everything Warp queued so far."""
        caller = self._caller()
        if caller is not None:
            caller.wait_stream(wp.get_stream(self._device))

    @contextlib.contextmanager
    def on_warp(self) -> Iterator[None]:
        """torch work inside runs on Warp's stream, in order with Warp's kernels before and after it
        (on the caller's own stream it would race them)."""
        if not self._device.is_cuda:
            yield
            return
        with torch.cuda.stream(wp.stream_to_torch(wp.get_stream(self._device))):
            yield
