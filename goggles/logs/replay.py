"""Replay: render a recorded flight again, with the same or other sensors and scene.

The flight's poses come from the log; the sensors and scene come from ``--sensors`` (a run file)
or, by default, from the run file stored in the recording. On one device, the same log and run file
give the same image bytes: the engine renders at the recorded sim times from the recorded poses.
A folder of logs is replayed by a pool of processes, one per core.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from goggles.checks import parse_toml
from goggles.clock import MIN_SCALE, ClockMode
from goggles.engine.drivers import Replayed
from goggles.errors import ConfigError, GogglesError
from goggles.logs.record import Recorder, is_log_file, read_log, read_metadata
from goggles.rig.runfile import load_run_config, parse_run_config
from goggles.runtime.processes import run_in_processes
from goggles.transport.schema import MalformedMessage, decode_any

log = logging.getLogger(__name__)

MAX_GAP_S = 60.0
"""A replay skips a pause in the poses longer than this instead of rendering it (a still vehicle)."""


@dataclass(frozen=True)
class ReplayResult:
    log: Path
    poses: int
    """Recorded poses that a body of the run took (not another body's, nor a bus's second copy)."""
    frames: int
    """Messages written to the new recording (0 without one)."""
    seconds: float
    """Wall time of the replay."""
    log_seconds: float
    """Log time the replay covered, from its first message to its last (a logger's wall clock or sim
    time: either way a duration)."""
    dropped: int = 0
    """Recorded messages that could not be used (undecodable, or a pose with a corrupt time stamp)."""
    error: str | None = None
    """Why this log could not be replayed (a batch goes on with the others), or None."""


def replay_config(
    path: Path, sensors: Path | None, scene: Path | None, *, seed: int | None = None, looks: tuple | None = None
):
    """The run configuration of a replay: ``sensors`` or the recording's own, in REPLAY mode, no buses;
    ``seed`` (the sensors' noise) instead of the run file's; ``looks`` (a ``LooksSpec`` and the number
    of its draw) instead of the run file's ``[looks]``."""
    if sensors is not None:
        config = load_run_config(sensors)
    else:
        metadata = read_metadata(path)
        if "run_file" not in metadata:
            raise ConfigError(
                f"{path}: the recording does not hold its run file (an LCM log, or cut short "
                "before it was written): give one with --sensors"
            )
        try:
            config = parse_run_config(
                parse_toml(metadata["run_file"], f"{path}: the recorded run file"),
                Path(metadata.get("run_file_path", path)),
            )
        except ConfigError as exc:  # a calibration file it names that is not on this machine, ...
            raise ConfigError(f"{exc} (in the run file {path} recorded; give one that loads with --sensors)") from exc
        if scene is None and config.scene is not None and not Path(config.scene).exists():
            raise ConfigError(
                f"{path}: the scene its run file names, {config.scene}, is not here (recorded on another "
                "machine, or moved?): give it with --scene"
            )
    changes = {"mode": ClockMode.REPLAY, "zmq": None, "lcm_url": None, "ros2": None}
    if seed is not None:
        changes["seed"] = int(seed)
    if scene is not None:
        changes["scene"] = scene.resolve()
    if looks is not None:
        changes["looks"], changes["look"] = looks
    return dataclasses.replace(config, **changes)


def replay_file(
    path: Path,
    *,
    sensors: Path | None = None,
    scene: Path | None = None,
    record: Path | None = None,
    speed: float | None = None,
    device=None,
    threads: int | None = None,
    progress=None,
    seed: int | None = None,
    world=None,
    max_gap_s: float = MAX_GAP_S,
    sinks=(),
    looks: tuple | None = None,
) -> ReplayResult:
    """Replay one log (see the module docstring); ``threads`` caps CPU render threads (batch jobs use 1);
    ``seed`` replaces the run file's; ``world``: one already built for this run's scene (``Engine``);
    ``max_gap_s``: see ``replay_into``; ``sinks``: more places the outputs go (a Foxglove server);
    ``looks``: (``LooksSpec``, which draw) for the colour cameras (``replay_config``)."""
    from goggles.engine import Engine

    check_record_path(path, record)
    config = replay_config(Path(path), sensors, scene, seed=seed, looks=looks)
    recorder = None
    if record is not None:
        metadata = {"run_file": _config_text(sensors, path), "replayed_from": str(path)}
        if looks is not None:  # what the colour cameras saw (the run file's own [looks] aside)
            metadata["looks"] = f"{looks[0].where.removesuffix(': [looks]')}, draw {looks[1]}"
        recorder = Recorder(record, metadata=metadata)
    engine = Engine(config, device=device, recorder=recorder, world=world, sinks=sinks, threads=threads)
    start = time.perf_counter()
    span = [None, 0]  # log time (ns) of the first and of the last message read

    def messages():
        for item in read_log(path):
            span[0] = item[0] if span[0] is None else span[0]
            span[1] = item[0]
            yield item

    try:
        poses = replay_into(engine, messages(), speed=speed, progress=progress, max_gap_s=max_gap_s)
    finally:
        engine.close()
        if recorder is not None:
            recorder.close()
    if poses == 0:
        names = sorted(v.name for v in config.vehicles)
        raise ConfigError(
            f"{path}: no poses of this run's vehicles {names} (channels <vehicle>/state or pose/<vehicle>) "
            "could be read: is it the right log, and the right --sensors run file?"
        )
    return ReplayResult(
        Path(path),
        poses,
        recorder.written if recorder else 0,
        time.perf_counter() - start,
        (span[1] - span[0]) * 1e-9,
        dropped=engine.inputs.counters.malformed,
    )


def check_record_path(log: Path, record: Path | None) -> None:
    """Refuse to record a replay onto the log it replays (opening the recording would truncate it)."""
    if record is not None and Path(record).exists() and Path(log).exists() and os.path.samefile(record, log):
        raise ConfigError(f"{record}: is the log being replayed; record the replay to another file")


def replay_into(engine, recorded, *, speed: float | None = None, progress=None, max_gap_s: float = MAX_GAP_S) -> int:
    """Render an engine's sensors again along a recorded flight (the engine built in REPLAY mode).

    Args:
        engine: a ``goggles.engine.Engine`` in REPLAY mode.
        recorded: (log time ns, channel, bytes) in time order, as ``goggles.logs.record.read_log`` yields
            them; vehicle poses come from ``<vehicle>/state`` (a simulated flight) or ``pose/<vehicle>``
            (a live one), people from ``skeleton/<name>``, props from ``scene/edit``.
        speed: play at this multiple of the recorded pace; None: as fast as possible.
        progress: called about once per wall second with the log time reached, s.
        max_gap_s: a pose stamped more than this from the one before is a jump. If the next pose
            jumped too, it is real: forward, the poses paused (a stopped logger) and the replay skips
            to them with a warning; backward, their clock restarted (a flight run again under one
            lcm-logger) and the poses replay on from the last instant, with a warning. If the next
            came back, that one stamp was corrupt, and its pose is counted malformed and dropped:
            one bad stamp never renders hours of frames, nor stops the frames for hours.

    Returns:
        The number of recorded poses used.
    """
    driver = Replayed(engine)  # refuses an engine in another mode
    if speed is not None and not speed >= MIN_SCALE:
        raise ConfigError(f"replay speed {speed} must be >= {MIN_SCALE:g} (its waits would overflow the clock)")
    inputs = driver.inputs
    used, start_wall, last_progress = 0, time.perf_counter(), time.perf_counter()
    t_first, skipped_ns = None, 0
    anchor_ns, last_step, last_t_ns = 0, 0, 0  # log time minus stamp time at the newest pose; its step, log time
    max_gap = max(1, int(round(max_gap_s / driver.dt)))
    pauses, restarts = Tally("pauses skipped"), Tally("clock restarts replayed on")
    vehicles = {v.name for v in engine.config.vehicles}
    carried = _carried(recorded, vehicles, engine.outputs) if engine.outputs.sinks else recorded
    stamped = _agreeing_start(_stamped(carried, inputs), inputs, max_gap_s * 1e6)
    for t_ns, channel, data, stamp in _without_stamp_spikes(stamped, inputs, max_gap_s * 1e6, restarts):
        if stamp is None:  # an edit or a tracked prop, as the run applied it: after the events of the step it came at
            if t_first is not None:  # its log time on the stamps' clock (exact for goggles' own logs,
                # where both are sim time; lcm-logger's receipt times land within a pose period)
                edit_step = max(int(round((t_ns - anchor_ns) * 1e-9 / driver.dt)), last_step)
                driver.run_until(edit_step + 1)
            driver.edit(channel, data)
            continue
        step = int(round(stamp * 1e-6 / driver.dt))
        if t_first is None:
            driver.start_at(step)
        elif step - driver.step > max_gap:
            pauses.warn(
                (step - driver.step) * driver.dt,
                "the poses pause for %.6g s of sim time (from %.3f s): skipped ahead without rendering it",
                (step - driver.step) * driver.dt,
                driver.step * driver.dt,
            )
            driver.start_at(step)
            skipped_ns += max(t_ns - last_t_ns, 0)
        anchor_ns, last_step, last_t_ns = t_ns - stamp * 1000, step, t_ns
        driver.run_until(step)
        try:
            taken = driver.place(channel, data)
        except MalformedMessage as exc:
            inputs.count_malformed(channel, exc)
            continue
        used += taken  # not another body's pose, nor the other bus's copy of one
        t_first = t_ns if t_first is None else t_first
        if speed is not None:
            delay = (t_ns - t_first - skipped_ns) * 1e-9 / speed - (time.perf_counter() - start_wall)
            if delay > 0:
                time.sleep(delay)
        if progress is not None and time.perf_counter() - last_progress > 1.0:
            last_progress = time.perf_counter()
            progress((t_ns - t_first) * 1e-9)
    driver.finish()
    pauses.close()
    restarts.close()
    return used


@dataclass
class Tally:
    """Warnings of one kind: the first few told, the rest counted and told in one line at the end (a
    ``max_gap_s`` below the poses' period would make every pose a pause: a line per pose)."""

    what: str
    told: int = 3
    count: int = 0
    seconds: float = 0.0

    def warn(self, seconds: float, message: str, *args) -> None:
        self.count += 1
        self.seconds += seconds
        if self.count <= self.told:
            log.warning(message + (" (further ones are counted)" if self.count == self.told else ""), *args)

    def close(self) -> None:
        if self.count > self.told:
            log.warning(
                "%d %s in all (%.1f s of sim time): a larger maximum gap (--max-gap) skips fewer",
                self.count,
                self.what,
                self.seconds,
            )


#: What a replay's recording carries from the one it replays, beside what it renders: each vehicle's
#: truth (state, IMU, collisions, the wind, its status and its flight controller's) and every input it was rendered
#: from (poses, skeletons, scene edits), so a replayed flight is a whole flight (a dataset rendered
#: from it has its inputs) and replays again.
CARRIED = ("state", "imu", "collision", "status", "fc", "wind")
CARRIED_INPUTS = ("pose/", "skeleton/", "scene/edit")


def _carried(recorded, vehicles: set[str], outputs):
    """``recorded``, each message of the ``CARRIED`` channels of ``vehicles`` and of the inputs also
    written to ``outputs``' sinks at its log time where that is on its stamps' clock (goggles' own
    recordings), else at its stamp (an lcm-logger's receipt times: the replay's clock is the stamps')."""
    for t_ns, channel, data in recorded:
        vehicle, _, kind = channel.rpartition("/")
        if (vehicle in vehicles and kind in CARRIED) or channel.startswith(CARRIED_INPUTS):
            try:
                stamp_ns = int(decode_any(data).header.utime) * 1000
            except (MalformedMessage, AttributeError):
                stamp_ns = t_ns
            outputs.copy(channel, data, t_ns if abs(t_ns - stamp_ns) < 1_000_000_000 else stamp_ns)
        yield t_ns, channel, data


def _stamped(recorded, inputs):
    """(log time ns, channel, bytes, stamp µs) of the poses, with their own time stamp (sim time, not
    the log's: lcm-logger stamps on receipt), and of scene edits and tracked props' poses with stamp
    None (a tracked prop's stamp is its mocap system's clock, which a simulated run's is not: it is
    placed when the run took it); the rest skipped, undecodable poses counted and dropped."""
    for t_ns, channel, data in recorded:
        if channel == "scene/edit" or (channel.startswith("pose/") and inputs.tracks(channel[len("pose/") :])):
            yield t_ns, channel, data, None
        elif channel.endswith("/state") or channel.startswith(("pose/", "skeleton/")):
            try:
                stamp = decode_any(data).header.utime
            except (MalformedMessage, AttributeError) as exc:
                inputs.count_malformed(channel, MalformedMessage(str(exc)))
                continue
            yield t_ns, channel, data, int(stamp)


def _agreeing_start(items, inputs, max_gap_us: float):
    """The stamped items, less a first pose whose stamp disagrees (by more than ``max_gap_us``) with
    the two poses after it, which agree with each other: the clock a replay starts on comes from two
    poses that agree, so a corrupt first stamp does not offset the whole flight. After the first
    poses everything passes through unchanged."""
    poses, held = [], []  # the first poses' stamps; everything held until the start is decided
    for item in items:
        held.append(item)
        if item[3] is None:
            continue
        poses.append(item[3])
        if len(poses) == 2 and abs(poses[1] - poses[0]) <= max_gap_us:
            break  # the first two agree
        if len(poses) == 3:
            if abs(poses[2] - poses[1]) <= max_gap_us < abs(poses[1] - poses[0]):
                first = next(i for i, h in enumerate(held) if h[3] is not None)
                _drop_spike(inputs, held.pop(first), poses[1])
            break
    yield from held
    yield from items


def _without_stamp_spikes(items, inputs, max_gap_us: float, restarts: Tally):
    """The stamped items with the poses' clock made to run forward (see ``replay_into``): a pose
    stamped more than ``max_gap_us`` from the pose before is held, with the edits after it, until
    the next pose decides. If that one jumped too, the jump was real: forward, a pause (passed on
    for the replay to skip); backward, a restarted clock (a flight run again under one logger),
    whose poses go on from the last instant with a warning. If it came back, the held pose was a
    corrupt stamp and is dropped; one still held when the log ends is dropped."""
    last, held, offset = None, [], 0  # the newest stamp passed on; a jumped pose and the edits after it
    for t_ns, channel, data, stamp in items:
        item = (t_ns, channel, data, None if stamp is None else stamp + offset)
        if held:
            if stamp is None:
                held.append(item)
                continue
            if abs(item[3] - last) > max_gap_us:  # the poses after it jumped too: real
                jumped = held[0][3]
                if jumped < last:
                    restarts.warn(
                        (last - jumped) * 1e-6,
                        "the poses' clock went back %.6g s at %.3f s of sim time (a restarted clock?): "
                        "replaying on from there",
                        (last - jumped) * 1e-6,
                        last * 1e-6,
                    )
                    offset += last - jumped
                    held = [(*h[:3], None if h[3] is None else h[3] + last - jumped) for h in held]
                    item = (*item[:3], item[3] + last - jumped)
                last = held[0][3]
                yield from held
            else:
                _drop_spike(inputs, held[0], last)
                yield from held[1:]
            held = []
        stamp = item[3]
        if stamp is not None and last is not None and abs(stamp - last) > max_gap_us:
            held = [item]
            continue
        if stamp is not None:
            last = stamp if last is None else max(last, stamp)
        yield item
    if held:
        _drop_spike(inputs, held[0], last)
        yield from held[1:]


def _drop_spike(inputs, item, near_us: int) -> None:
    _, channel, _, stamp = item
    inputs.count_malformed(
        channel,
        MalformedMessage(f"time stamp {(stamp - near_us) * 1e-6:+.1f} s off the poses around it: a corrupt stamp"),
    )


def _config_text(sensors: Path | None, path: Path) -> str:
    if sensors is not None:
        return Path(sensors).read_text(encoding="utf-8-sig")
    return read_metadata(path).get("run_file", "")


def _replay_job(args) -> ReplayResult:
    path, kwargs = args
    try:
        return replay_file(path, threads=1, **kwargs)
    except GogglesError as exc:  # this log's own fault: reported, and the batch goes on
        return ReplayResult(Path(path), 0, 0, 0.0, 0.0, error=str(exc))


def replay_folder(
    folder: Path,
    *,
    record_folder: Path | None,
    jobs: int | None = None,
    report: Callable[[str], None] | None = None,
    overwrite: bool = False,
    **kwargs,
) -> list[ReplayResult]:
    """Replay every log in a folder in parallel, one process per job (default: one per core); a log
    that cannot be replayed comes back with its ``error`` and does not stop the others. ``report``
    is called about once a second, and when a log ends, with a progress line. Replays already in
    ``record_folder`` are refused unless ``overwrite``, before any job runs."""
    logs = sorted(p for p in Path(folder).iterdir() if is_log_file(p))
    if not logs:
        raise ConfigError(f"{folder}: no .mcap or .lcmlog files (nor lcm-logger logs) to replay")
    outputs = replay_names(logs) if record_folder is not None else {}
    if record_folder is not None and Path(record_folder).resolve() == Path(folder).resolve():
        written = {name: source for source, name in outputs.items()}
        for path in [p for p in logs if p.name in written]:  # an earlier replay's output: not read while rewritten
            log.warning("%s: not replayed, this replay writes it (from %s)", path, written[path.name].name)
            logs.remove(path)
            del outputs[path]
    if record_folder is not None and not overwrite:
        existing = [name for name in outputs.values() if (Path(record_folder) / name).is_file()]
        if existing:
            raise ConfigError(
                f"--record {record_folder}: {len(existing)} replay(s) there already ({', '.join(existing[:3])}"
                f"{', ...' if len(existing) > 3 else ''}); give another folder, or --overwrite to replace them"
            )
    tasks = []
    for path in logs:
        task_kwargs = dict(kwargs)
        if record_folder is not None:
            task_kwargs["record"] = Path(record_folder) / outputs[path]
        tasks.append((path, task_kwargs))
    results: list[ReplayResult | None] = [None] * len(tasks)
    start = time.perf_counter()
    with closing(run_in_processes(_replay_job, tasks, jobs or os.cpu_count() or 1)) as finished:
        for item in finished:
            if item is not None:
                results[item[0]] = item[1]
            if report is not None:
                report(_folder_progress([r for r in results if r is not None], len(tasks), start))
    return results


def replay_names(logs: list[Path]) -> dict[Path, str]:
    """Each log's replay file name in the record folder: ``<stem>.replay.mcap``, or the whole name before
    ``.replay.mcap`` where stems would collide (``a.mcap`` and ``a.lcmlog``) or say nothing (lcm-logger's
    ``lcmlog-<date>.00`` and ``.01``)."""
    names = {p: f"{p.stem if p.suffix.lower() in ('.mcap', '.lcmlog') else p.name}.replay.mcap" for p in logs}
    taken = Counter(names.values())
    return {p: name if taken[name] == 1 else f"{p.name}.replay.mcap" for p, name in names.items()}


def _folder_progress(finished: list[ReplayResult], total: int, start: float) -> str:
    failed = sum(r.error is not None for r in finished)
    return (
        f"replayed {len(finished)} of {total} logs"
        + (f" ({failed} failed)" if failed else "")
        + f", {time.perf_counter() - start:.0f} s"
    )
