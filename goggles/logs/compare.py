"""Two recordings of a run compared message by message: whether they are the same flight.

What a run computes in sim time is the same twice over for the same run file, seed and inputs (in
lockstep, or with the firmware in the loop at any load); what it measures of the wall clock is not.
So the comparison leaves out the wall clock's fields and nothing else: every message's
``header.wall_utime`` (when it was made) and the ``clock`` channel's achieved scale and rates (how
fast the run went). ROS 2 recordings carry no wall time: their payloads are compared as they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import goggles_lcm
from goggles.errors import ConfigError


@dataclass
class Comparison:
    """What ``compare_recordings`` found."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Messages per channel in each recording."""
    difference: str | None = None
    """The first difference, said in a line; None: the same flight."""

    @property
    def same(self) -> bool:
        return self.difference is None


def wall_free(data: bytes) -> bytes:
    """An LCM payload of goggles' without its wall-clock fields (others, as they are)."""
    from goggles.transport.schema import decode_any

    try:
        message = decode_any(data)
    except Exception:  # not one of goggles' LCM types (a ROS 2 payload): compared as it is
        return data
    if getattr(message, "header", None) is not None:
        message.header.wall_utime = 0
    if isinstance(message, goggles_lcm.clock_t):
        message.scale = 0.0
        message.rates = [0.0] * message.num_rates
    return message.encode()


def _messages(path: Path) -> Iterator[tuple[int, str, bytes]]:
    """(log time ns, channel, payload) of every message, in the file's order."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such recording")
    if path.suffix == ".mcap":
        from mcap.reader import make_reader

        try:
            with path.open("rb") as f:
                for _, channel, message in make_reader(f).iter_messages(log_time_order=False):
                    yield message.log_time, channel.topic, message.data
        except Exception as exc:  # damaged or cut off: goggles recording repair reads what is left
            raise ConfigError(f"{path}: not a readable MCAP recording ({exc}); try goggles recording repair") from None
        return
    from goggles.logs.record import read_log

    yield from read_log(path)


def compare_recordings(a: str | Path, b: str | Path) -> Comparison:
    """Compare every channel of two recordings (MCAP or LCM event logs): the same messages in the same
    order at the same sim times, wall-clock fields aside."""
    sides = []
    for path in (Path(a), Path(b)):
        channels: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for log_time, channel, data in _messages(path):
            channels[channel].append((log_time, data))
        sides.append(channels)
    first, second = sides
    result = Comparison(counts={c: (len(first.get(c, ())), len(second.get(c, ()))) for c in sorted({*first, *second})})
    for channel, (n, m) in result.counts.items():
        if n != m:
            result.difference = f"{channel}: {n} messages in {a}, {m} in {b}"
            return result
    for channel in result.counts:
        for index, ((t1, d1), (t2, d2)) in enumerate(zip(first[channel], second[channel])):
            if t1 != t2:
                result.difference = f"{channel} message {index}: logged at {t1 * 1e-9:.6f} s and {t2 * 1e-9:.6f} s"
                return result
            if d1 != d2 and wall_free(d1) != wall_free(d2):
                result.difference = f"{channel} message {index} at {t1 * 1e-9:.6f} s: the payloads differ"
                return result
    return result
