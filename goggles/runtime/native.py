"""Small C libraries goggles builds itself, once, with the system's C compiler, into its cache (named by
a hash of their source and build flags, so an edit or another library builds anew)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from goggles.errors import ConfigError
from goggles.paths import cache_dir


def compiler() -> str | None:
    """The C compiler goggles builds with ($CC, cc or gcc), or None."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def build_library(source: Path, name: str, what: str, flags: list[str] = ()) -> Path:
    """The shared library built from ``source`` with ``flags`` (into ``<cache>/native``, else the
    temporary folder), built now if it is not there.

    Raises:
        ConfigError: no C compiler, no folder to build in, or the build failed (its first error line),
            each saying ``what`` it was for.
    """
    text = source.read_bytes() + "\0".join(flags).encode()
    filename = f"goggles-{name}-{hashlib.sha256(text).hexdigest()[:16]}.so"
    folders = [Path(tempfile.gettempdir()) / f"goggles-{os.getuid()}"]
    if cache_dir() is not None:
        folders.insert(0, cache_dir() / "native")
    for folder in folders:
        if (folder / filename).is_file():
            return folder / filename
    for folder in folders:  # the first that can be written (a read-only home: the temporary folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            break
    else:
        raise ConfigError(f"no folder to build {what} in: {', '.join(map(str, folders))}")
    cc = compiler()
    if cc is None:
        raise ConfigError(f"{what} needs a C compiler (cc or gcc)")
    library, partial = folder / filename, folder / f".{filename}.{os.getpid()}"
    done = subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(partial), str(source), *flags], capture_output=True, text=True
    )
    if done.returncode != 0:
        first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:200])
        raise ConfigError(f"building {what} ({source.name}) failed: {first}")
    partial.replace(library)  # atomic: a parallel build of the same source is the same file
    return library
