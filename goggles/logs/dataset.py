"""Datasets: many flights rendered again with other sensors, scenes and seeds, on this machine or a
Ray cluster.

A spec (TOML) lists jobs, as a product and/or one by one; each job replays a recorded flight (``log``)
with a sensor rig (``rig``: a run file; default the flight's own), in a scene (default the rig's), with
a seed (default the rig's), and writes ``<output>/<job>.mcap``. When a job finishes, a row goes into
``<output>/manifest.jsonl``: the manifest is the truth, and a job in it is never redone. A job that
fails for its own reason (a corrupt log) is written there with the reason, the others go on, and
the next run of the spec tries it again.

Backends run the same ``render_job``: a process pool here (``--workers``), or Ray (``--ray auto|ADDRESS``):
one actor per worker slot (one CPU, or one GPU with ``device = "cuda"``) keeps the world it built
(static scene, BVH, Embree scene) for the next job in the same scene, and jobs go out grouped by
scene. A worker killed mid-job is restarted by Ray and its job run again; outputs are written under a
temporary name and renamed when complete, so nothing half-written is ever taken for a result.

Why MCAP per job: one self-describing file with the images, poses and the run file that made them,
which goggles replays, Foxglove shows and ``goggles.logs.record.read_log`` (or any MCAP reader) iterates.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from goggles.checks import MAX_SEED, Table, is_whole, read_toml, warp_device
from goggles.errors import ConfigError, GogglesError
from goggles.rig.runfile import IMAGE_OUTPUTS
from goggles.runtime.processes import run_in_processes

log = logging.getLogger(__name__)

MANIFEST = "manifest.jsonl"


@dataclass(frozen=True)
class Job:
    log: str
    rig: str | None
    scene: str | None
    seed: int | None
    looks: str | None = None
    """A file whose ``[looks]`` table draws how the world looks (``goggles.render.looks``), or None."""
    look: int | None = None
    """Which of its draws (0, 1, ...): one flight rendered under several looks."""

    @property
    def id(self) -> str:
        """Stable across runs: the same log, rig, scene, seed (and look) give the same id; a job without
        looks keeps the id it had before looks existed."""
        fields = {k: v for k, v in asdict(self).items() if not (k in ("looks", "look") and v is None)}
        digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]
        parts = [Path(self.log).stem, Path(self.rig).stem if self.rig else "recorded"]
        parts += [Path(self.scene).stem if self.scene else "scene", f"s{self.seed}" if self.seed is not None else "s-"]
        if self.look is not None:
            parts.append(f"look{self.look}")
        return "__".join(parts + [digest])

    @property
    def scene_key(self) -> str:
        """Jobs with the same key can share a worker's world (grouping for Ray)."""
        return self.scene or f"rig:{self.rig or self.log}"


@dataclass(frozen=True)
class DatasetSpec:
    path: Path
    output: Path
    jobs: tuple[Job, ...]
    device: str | None = None
    workers: int | None = None


_SPEC_KEYS = {"dataset", "jobs", "job"}


#: Most jobs one spec may make (its product and its [[job]] tables): counted before any is built, so a
#: typo that multiplies (1,000 logs x 10 rigs x 100,000 seeds) is one line, not gigabytes of jobs.
MAX_JOBS = 100_000


def load_dataset_spec(path: str | Path) -> DatasetSpec:
    """Read and check a spec: every log, rig and scene must exist and load, before any job starts.

    Raises:
        ConfigError: naming the file and the key.
    """
    from goggles.logs.record import is_log_file, log_format
    from goggles.rig.runfile import load_run_config

    path = Path(path).resolve()
    data = read_toml(path, "dataset spec")
    top = Table(path, "top level", data, _SPEC_KEYS)
    base = path.parent
    dataset = Table(path, "[dataset]", data.get("dataset", {}), {"output", "device", "workers"})
    output = (base / dataset.text("output", required=True)).resolve()
    if output.exists() and not output.is_dir():
        raise dataset.error("output", f"a folder for the jobs' outputs ({output} is a file)")
    workers = dataset.integer("workers", None, low=1)
    device = dataset.get("device")
    if device is not None and not (isinstance(device, str) and re.fullmatch(r"cpu|cuda(:\d+)?", device)):
        raise dataset.error("device", "a Warp device: 'cpu', 'cuda' or 'cuda:N' (checked where the jobs run)")

    def paths(table: Table, key: str, *, required: bool = False) -> list[str | None]:
        values = table.get(key, required=required)
        if values is None:
            return [None]
        values = [values] if isinstance(values, str) else values
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise table.error(key, "a path or a non-empty list of paths (an empty list would make no jobs)")
        found: list[str | None] = []
        for value in values:
            matches = sorted(glob.glob(str(base / value))) if any(c in value for c in "*?[") else [str(base / value)]
            if not matches or not all(Path(m).exists() for m in matches):
                raise table.error(key, f"paths that exist ({value!r} {'does not' if matches else 'matches nothing'})")
            found += [str(Path(m).resolve()) for m in matches]
        return found

    jobs: list[Job] = []
    job_tables = top.get("job", [])
    if not isinstance(job_tables, list):
        raise top.error("job", "[[job]] tables")
    if "jobs" in data:
        product = Table(path, "[jobs]", data["jobs"], {"logs", "rigs", "scenes", "seeds", "looks", "looks_per_flight"})
        seeds = product.get("seeds", [None])
        if seeds != [None] and not (isinstance(seeds, list) and seeds and all(is_whole(s, 0, MAX_SEED) for s in seeds)):
            raise product.error("seeds", f"a list of integers from 0 to {MAX_SEED}")
        logs, rigs, scenes = paths(product, "logs", required=True), paths(product, "rigs"), paths(product, "scenes")
        (looks,) = _looks_file(product, paths)
        per_flight = product.integer("looks_per_flight", 1 if looks else None, low=1, high=MAX_JOBS)
        if per_flight is not None and looks is None:
            raise product.error("looks_per_flight", 'used with looks = "<a file with a [looks] table>"')
        views = [None] if looks is None else list(range(per_flight))
        count = len(logs) * len(rigs) * len(scenes) * len(seeds) * len(views) + len(job_tables)
        if count > MAX_JOBS:
            raise ConfigError(
                f"{path}: [jobs]: {len(logs):,} logs x {len(rigs):,} rigs x {len(scenes):,} scenes x "
                f"{len(seeds):,} seeds x {len(views):,} looks (and {len(job_tables):,} [[job]] tables) make "
                f"{count:,} jobs; at most {MAX_JOBS:,} in one spec: split it into several"
            )
        for log_path in logs:
            for rig in rigs:
                for scene in scenes:
                    jobs += [Job(log_path, rig, scene, seed, looks, v) for seed in seeds for v in views]
    if len(job_tables) > MAX_JOBS:
        raise ConfigError(f"{path}: {len(job_tables):,} [[job]] tables; at most {MAX_JOBS:,} in one spec")
    for i, entry in enumerate(job_tables):
        table = Table(path, f"[[job]] {i + 1}", entry, {"log", "rig", "scene", "seed", "looks", "look"})
        seed = table.integer("seed", None, low=0, high=MAX_SEED)
        (log_path,) = paths(table, "log", required=True)
        (rig,) = paths(table, "rig")
        (scene,) = paths(table, "scene")
        (looks,) = _looks_file(table, paths)
        look = table.integer("look", 0 if looks else None, low=0, high=MAX_JOBS)
        if look is not None and looks is None:
            raise table.error("look", 'used with looks = "<a file with a [looks] table>"')
        jobs.append(Job(log_path, rig, scene, seed, looks, look))
    if not jobs:
        raise ConfigError(f"{path}: no jobs: give a [jobs] table (logs = [...]) or [[job]] tables")

    checked: set[str] = set()
    for job in jobs:  # every file once: logs readable as logs, rigs, scenes and looks loadable
        for kind, value in (("log", job.log), ("rig", job.rig), ("scene", job.scene), ("looks", job.looks)):
            if value is None or value in checked:
                continue
            checked.add(value)
            try:
                if kind == "log":
                    if not Path(value).is_file():
                        raise ConfigError(f"{value}: not a file")
                    if not is_log_file(Path(value)):
                        log_format(Path(value))  # says what a log's name is (a damaged log fails as its job)
                elif kind == "rig":
                    rig = load_run_config(value)
                    if rig.scene is not None:
                        _check_scene(rig.scene)
                elif kind == "looks":
                    looks_spec(value)
                else:
                    _check_scene(Path(value))
            except GogglesError as exc:  # a scene's or rig's own error already names its file and key
                raise ConfigError(f"{path}: {kind} {value} does not load: {exc}") from exc
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: the same job is listed twice ({len(ids) - len(set(ids))} duplicate(s))")
    return DatasetSpec(path, output, tuple(jobs), device, workers)


def _looks_file(table: Table, paths) -> list[str | None]:
    """``looks``: one file with a ``[looks]`` table (or none)."""
    value = table.get("looks")
    found = paths(table, "looks") if isinstance(value, str) or value is None else []
    if len(found) != 1:
        raise table.error("looks", "the path of one file with a [looks] table")
    return found


@functools.cache
def looks_spec(path: str):
    """A looks file's spec, read once per process: its textures are the same arrays for every job, so
    a world kept for the next job holds them once."""
    from goggles.render.looks import LooksSpec

    return LooksSpec.load(path)


def _check_scene(path: Path) -> None:
    """A scene loads: its file reads and every mesh it names is there (importing waits for a worker)."""
    from goggles.scene import load_scene_spec

    load_scene_spec(path)


def read_manifest(output: Path) -> dict[str, dict]:
    """The rows of jobs that finished (the last row of each job wins)."""
    rows: dict[str, dict] = {}
    manifest = Path(output) / MANIFEST
    if not manifest.is_file():
        return rows
    unread = 0
    for line in manifest.read_bytes().decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("job"), str):
            rows[row["job"]] = row
        elif line.strip():  # a line cut by a crash, or damaged: that job is simply not done
            unread += 1
    if unread:
        log.warning("%s: %d line(s) that are not job rows skipped (those jobs count as not done)", manifest, unread)
    return rows


# ---------------------------------------------------------------------- one job


@dataclass
class WorldCache:
    """The worlds a worker built, kept for its next jobs in the same scene, course and airframes (a
    world that people joined is not reused: they added shapes)."""

    worlds: dict = field(default_factory=dict)

    def get(self, config, device):
        from goggles.rig.rig import build_run_world
        from goggles.rig.vehicles import body_shapes, drawn_airframes

        airframes = tuple((v.preset, v.segmentation) for v in config.vehicles)  # their bodies are shapes of the world
        key = (config.scene, config.course, config.perturb, airframes, str(device))
        entry = self.worlds.get(key)
        if entry is None:
            world = build_run_world(config, device, body_shapes(config.vehicles, drawn_airframes(config.vehicles)))
            entry = self.worlds[key] = (world, len(world.scene.shapes))
        return key, entry[0]

    def release(self, key) -> None:
        world, shapes = self.worlds.get(key, (None, 0))
        if world is not None and len(world.scene.shapes) != shapes:
            del self.worlds[key]


def render_job(job: Job, output: Path, device=None, worlds: WorldCache | None = None) -> dict:
    """Run one job; its manifest row (``status`` "done" with counts, or "failed" with the reason)."""
    from goggles.logs.replay import replay_config, replay_file

    output = Path(output)
    target = output / f"{job.id}.mcap"
    partial = partial_output(output, job)  # renamed when complete
    start = time.perf_counter()
    row = {"job": job.id, **asdict(job), "output": target.name}
    try:
        world = key = None
        if worlds is not None:
            config = replay_config(Path(job.log), _path(job.rig), _path(job.scene), seed=job.seed)
            key, world = worlds.get(config, device)
        try:
            result = replay_file(
                Path(job.log),
                sensors=_path(job.rig),
                scene=_path(job.scene),
                seed=job.seed,
                looks=None if job.looks is None else (looks_spec(job.looks), job.look),
                record=partial,
                device=device,
                threads=1,
                world=world,
            )
        finally:
            if worlds is not None and key is not None:
                worlds.release(key)
        os.replace(partial, target)
        row.update(status="done", poses=result.poses, messages=result.frames, frames=_frames(target))
    except GogglesError as exc:  # this job's own fault: reported, the others go on
        row.update(status="failed", error=str(exc))
    except Exception as exc:  # an unforeseen one too: a dataset goes on, and the reason is kept
        log.exception("job %s", job.id)
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    finally:  # failed, or stopped (a Ctrl-C): nothing half-written stays
        partial.unlink(missing_ok=True)
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row


def partial_output(output: Path, job: Job) -> Path:
    """Where a job writes until it is complete (then renamed to ``<job>.mcap``)."""
    return Path(output) / f"{job.id}.partial.mcap"


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def _frames(path: Path) -> int:
    """Image messages in a job's output."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    if summary is None or summary.statistics is None:
        return 0
    images = {i for i, c in summary.channels.items() if c.topic.rsplit("/", 1)[-1] in IMAGE_OUTPUTS}
    return sum(n for i, n in summary.statistics.channel_message_counts.items() if i in images)


# ---------------------------------------------------------------------- running a spec


@dataclass
class Progress:
    """What a run has done, printed about once a second."""

    total: int
    done: int = 0
    failed: int = 0
    frames: int = 0
    start: float = field(default_factory=time.perf_counter)
    last: float = 0.0

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        rate = self.frames / elapsed if elapsed > 0 else 0.0
        finished = self.done + self.failed
        eta = elapsed / finished * (self.total - finished) if finished else float("nan")
        return (
            f"dataset: {finished}/{self.total} jobs ({self.failed} failed), {rate:.1f} frames/s, ETA {eta:.0f} s"
            if finished
            else f"dataset: 0/{self.total} jobs, {elapsed:.0f} s"
        )


def run_dataset(
    spec: DatasetSpec,
    *,
    ray_address: str | None = None,
    workers: int | None = None,
    report: Callable[[str], None] | None = None,
) -> list[dict]:
    """Run the spec's jobs not in its manifest yet; the new manifest rows.

    Args:
        ray_address: None: processes on this machine; "auto" or an address: that Ray cluster
            ("local" starts one here).
        workers: worker processes (or Ray actors); default one per core (or per GPU).
        report: called about once a second with a progress line.
    """
    if ray_address is None:  # this machine's devices, before anything is written (Ray's workers check theirs)
        warp_device(spec.device, f"{spec.path}: [dataset] device")
    spec.output.mkdir(parents=True, exist_ok=True)
    done = {job_id for job_id, row in read_manifest(spec.output).items() if row.get("status") == "done"}
    pending = sorted((job for job in spec.jobs if job.id not in done), key=lambda job: (job.scene_key, job.id))
    progress = Progress(len(pending))
    if not pending:
        return []
    # What a run killed outright (SIGKILL, a power cut) left, and the old output of a job that fails
    # when done again (beside its "failed" row, it would say the job was done).
    _remove_outputs(spec.output, pending)
    workers = workers or spec.workers or os.cpu_count() or 1
    if ray_address is None and workers > (cores := os.cpu_count() or 1):  # a process each: no more than cores
        log.warning("%d workers asked for, %d started: this machine has %d cores", workers, cores, cores)
        workers = cores
    backend = _run_on_ray if ray_address is not None else _run_locally
    rows: list[dict] = []
    finished = closing(backend(pending, spec, workers, ray_address))
    try:
        with open(spec.output / MANIFEST, "a") as manifest, finished as rows_in:
            for row in rows_in:  # None: a second without a finished job
                if row is not None:
                    manifest.write(json.dumps(row) + "\n")
                    manifest.flush()
                    rows.append(row)
                    if row["status"] == "done":
                        progress.done += 1
                        progress.frames += row.get("frames", 0)
                    else:
                        progress.failed += 1
                        log.warning("job %s failed: %s", row["job"], row.get("error"))
                due = row is None or time.perf_counter() - progress.last > 1.0 or len(rows) == len(pending)
                if report is not None and due:
                    progress.last = time.perf_counter()
                    report(progress.line())
    except BaseException:  # stopped (a Ctrl-C, SIGTERM), once every worker is: see _remove_unlisted
        _remove_unlisted(spec.output, pending)
        raise
    return rows


def _remove_unlisted(output: Path, jobs: list[Job]) -> None:
    """Remove the outputs, whole or partial, of the jobs the manifest does not list as done. A job
    stopped just as it finished has its complete output but no row (its worker, or this process, was
    stopped between the two): the next run does it again, and an output the manifest does not list
    would say otherwise."""
    done = {job_id for job_id, row in read_manifest(output).items() if row.get("status") == "done"}
    _remove_outputs(output, [job for job in jobs if job.id not in done])


def _remove_outputs(output: Path, jobs: list[Job]) -> None:
    """Remove the outputs of ``jobs``, whole or partial."""
    for job in jobs:
        (output / f"{job.id}.mcap").unlink(missing_ok=True)
        partial_output(output, job).unlink(missing_ok=True)


_WORLDS = WorldCache()


def _local_job(args) -> dict:
    job, output, device = args
    return render_job(job, output, device, _WORLDS)


def _run_locally(jobs: list[Job], spec: DatasetSpec, workers: int, _address) -> Iterable[dict | None]:
    """Rows as jobs finish, and None each second in which none did (for the progress line)."""
    tasks = [(job, spec.output, spec.device) for job in jobs]
    with closing(run_in_processes(_local_job, tasks, workers)) as finished:
        for item in finished:
            yield None if item is None else item[1]


def _run_on_ray(jobs: list[Job], spec: DatasetSpec, workers: int, address: str) -> Iterable[dict]:
    from goggles.errors import require

    require("ray", "ray", "running datasets on Ray")
    import ray

    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=workers, log_to_driver=False)  # with its dashboard where ray[default] is installed
        else:
            check_ray_address(address)
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError) as exc:
                raise ConfigError(_ray_refusal(address, exc)) from exc
    gpu = spec.device is not None and spec.device.startswith("cuda")
    actor = ray.remote(num_cpus=0 if gpu else 1, num_gpus=1 if gpu else 0, max_restarts=-1, max_task_retries=-1)(
        SceneWorker
    )
    # An actor the cluster has no room for waits for ever, and so would the dataset: as many as fit.
    kind = "GPU" if gpu else "CPU"
    slots = int(ray.cluster_resources().get(kind, 0))
    if slots < 1:
        raise ConfigError(f"{spec.path}: [dataset] device {spec.device!r}: the Ray cluster ({address}) has no {kind}")
    if slots < min(workers, len(jobs)):
        log.warning("the Ray cluster has %d %s(s): %d workers, not %d", slots, kind, slots, min(workers, len(jobs)))
    pool = [actor.remote(str(spec.output), spec.device) for _ in range(min(workers, len(jobs), slots))]
    for problem in ray.get([worker.ready.remote() for worker in pool]):
        if problem is not None:  # a worker's machine lacks the device: one line, before any job
            raise ConfigError(f"{spec.path}: {problem}")
    from ray.util import ActorPool

    # Jobs go out in scene order, so a worker's next job tends to be in the world it holds.
    try:
        yield from ActorPool(pool).map_unordered(lambda worker, job: worker.render.remote(job), jobs)
    except BaseException:  # stopped (Ctrl-C, SIGTERM): so are the jobs (run_dataset removes their outputs)
        for worker in pool:
            ray.kill(worker)
        raise


#: Seconds a Ray head's port may take to accept a connection before its address is called wrong.
RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str) -> None:
    """Refuse a cluster address that is malformed or where nothing listens, in one line and at once
    (Ray's own client raises a traceback for the first, and retries for minutes on the second)."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(
            f"Ray address {address!r}: give 'local', 'auto', HOST:PORT (the head's port, 6379 unless "
            "'ray start --head --port' said otherwise) or ray://HOST:PORT (Ray Client, 10001)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(
            f"Ray address {address}: nothing answers at {host}:{port} ({exc.strerror or exc}); is the cluster's head "
            "running there ('ray start --head'), and the port open?"
        ) from exc


def _ray_refusal(address: str, exc: BaseException) -> str:
    """Why Ray could not join the cluster at ``address``, with what to do where Ray's token
    authentication refused us (Ray >= 2.59 turns it on for clusters that 'ray start' began)."""
    import ray.exceptions

    causes = []
    while exc is not None and exc not in causes:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__
    # Ray reports its GCS client's AuthenticationError as text inside a RuntimeError's message.
    if any(isinstance(c, ray.exceptions.AuthenticationError) or "AuthenticationError" in str(c) for c in causes):
        return (
            f"Ray address {address}: the cluster asks for its authentication token; run with RAY_AUTH_MODE=token "
            "and the token in ~/.ray/auth_token or RAY_AUTH_TOKEN ('ray get-auth-token' on the head prints it), "
            "or give --ray auto on the head's machine"
        )
    return f"Ray address {address}: {str(causes[0]).splitlines()[0] if str(causes[0]) else type(causes[0]).__name__}"


class SceneWorker:
    """A Ray actor: renders jobs one after another, keeping its worlds (``WorldCache``)."""

    def __init__(self, output: str, device: str | None):
        import warp as wp

        wp.config.quiet = True
        self.output, self.device, self.worlds = Path(output), device, WorldCache()

    def ready(self) -> str | None:
        """Once the worker is up: why its machine cannot render on the spec's device, or None."""
        try:
            warp_device(self.device, f"[dataset] device (on the Ray worker on {socket.gethostname()})")
        except ConfigError as exc:
            return str(exc)
        return None

    def render(self, job: Job) -> dict:
        return render_job(job, self.output, self.device, self.worlds)
