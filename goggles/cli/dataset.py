"""goggles dataset: render a spec of jobs (flights x sensor rigs x scenes x seeds), here or on Ray."""

from __future__ import annotations

import sys
from pathlib import Path

from goggles.cli.common import report


def add_parser(commands) -> None:
    dataset = commands.add_parser(
        "dataset",
        help="render many flights again with other rigs, scenes and seeds, on this machine or a Ray cluster",
        description="Run the jobs of a dataset spec (TOML: [dataset] output; [jobs] logs, rigs, scenes, seeds as a "
        "product; [[job]] one by one) that its manifest (<output>/manifest.jsonl) does not list as done; each writes "
        "<output>/<job>.mcap. The spec is checked (keys, logs, rigs, scenes) before any job starts. A progress line "
        "each second; exit code 2 when a job failed (its reason is in the manifest).",
    )
    dataset.add_argument("spec", type=Path, help="dataset spec (TOML)")
    dataset.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: 'auto' (the cluster this machine belongs to, see 'ray start'), an address "
        "(HOST:6379, the head's port, or ray://HOST:10001 through Ray Client; checked at once), or 'local' "
        "(start one here); without it, processes on this machine",
    )
    dataset.add_argument("--workers", type=int, default=None, help="worker processes or actors (default: cores)")
    dataset.set_defaults(run=cmd_dataset)


def cmd_dataset(args) -> int:
    from goggles.errors import ConfigError
    from goggles.logs.dataset import load_dataset_spec, run_dataset

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: at least 1")
    spec = load_dataset_spec(args.spec)
    rows = run_dataset(spec, ray_address=args.ray, workers=args.workers, report=report)
    failed = [row for row in rows if row["status"] != "done"]
    skipped = len(spec.jobs) - len(rows)
    print(
        f"{len(rows) - len(failed)} job(s) done, {len(failed)} failed, {skipped} already in the manifest -> "
        f"{spec.output}"
    )
    for row in failed:
        print(f"  {row['job']}: {row['error']}", file=sys.stderr)
    return 2 if failed else 0
