"""Output directories: what kvsim may write where, checked before any simulation.

The rule (``--help`` of ``run``, ``sweep`` and ``plan`` states it): kvsim never
deletes, renames or overwrites anything it did not write.

- Every run, sweep, plan and recommend directory carries a marker,
  :data:`sim.app.outdir_marker.MARKER`, saying that kvsim wrote it: its kind (``run``,
  ``sweep``, ``plan``, ``recommend``, ``autoscale``),
  kvsim's version and the command. Directories written before the marker existed
  are recognised by the files only kvsim writes there (:mod:`sim.app.outdir_marker`).
- ``--out`` may name a path that does not exist, an empty directory, or a kvsim
  directory of the same kind holding only the files kvsim writes there (then a run
  replaces it atomically: written under a temporary name, renamed into place; a
  sweep resumes; a plan probes again).
- Anything else is refused (:class:`OutputError`, exit 2) unless ``force``: then
  kvsim writes its files beside the ones already there, still never over a file it
  did not write (a name clash is refused even then).
- A path that is not a directory, or under which nothing can be created (read-only
  file system, ``/proc``, no permission), is refused up front.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sim.app.outdir_marker import KINDS, MARKER, OWN_ENTRIES, read_kind, write_marker

FORCE_HELP = (
    "write into an existing directory that kvsim did not write (or that holds files "
    "kvsim did not write): kvsim's files go beside yours; nothing kvsim did not write is "
    "ever deleted or overwritten, a name clash is still refused"
)


class OutputError(ValueError):
    """``--out`` cannot be used as asked (bad input: exit 2)."""


@dataclass(frozen=True)
class OutputTarget:
    """Where and how a command writes its directory.

    ``in_place``: write inside ``path`` beside what is there (an existing directory the
    user owns, or the current directory); else build the whole directory under a
    temporary sibling name and rename it into place (replacing ``path`` when it is a
    kvsim directory of the same kind).
    """

    path: Path
    kind: str
    in_place: bool
    exists: bool


def _foreign_entries(directory: Path, kind: str | None, own_kind: str) -> list[str]:
    """Entries of ``directory`` that kvsim did not write (sorted names). Only a run's
    ``plots/`` is looked into (kvsim writes PNGs there); a sweep's or plan's own
    subdirectories are kvsim's as a whole."""
    own = OWN_ENTRIES[own_kind] if kind == own_kind else frozenset()
    names = []
    for entry in directory.iterdir():
        if entry.name == MARKER and kind is not None:
            continue
        if entry.name in own or _is_own_leftover(entry.name):
            if own_kind == "run" and entry.name == "plots" and entry.is_dir():
                names += [f"plots/{p.name}" for p in entry.iterdir() if p.suffix != ".png"]
            continue
        names.append(entry.name)
    return sorted(names)


def _is_own_leftover(name: str) -> bool:
    """A temporary entry kvsim makes (``.NAME.tmp-*``, ``.NAME.old-*``)."""
    return name.startswith(".") and (".tmp-" in name or ".old-" in name)


def _inside_cwd(path: Path) -> bool:
    """True when ``path`` is the current directory or one of its ancestors (it cannot
    be renamed away)."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        return False
    return path == cwd or path in cwd.parents


def check_output(
    path: str | Path, kind: str, *, force: bool = False, flag: str = "--out"
) -> OutputTarget:
    """Decide how a ``kind`` directory is written at ``path``; raise :class:`OutputError`
    (naming ``flag`` and the path) when it may not be. Creates nothing but the missing
    parent directories, and checks that something can be created there."""
    if kind not in KINDS:
        raise ValueError(f"unknown directory kind {kind!r}")
    given = str(path)
    where = f"{flag} {given}"
    try:
        target = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as e:
        raise OutputError(f"{where}: cannot resolve the path: {e}") from None
    if target.parent == target:
        raise OutputError(f"{where}: the file system root cannot be a {kind} directory")
    if target.exists() and not target.is_dir():
        raise OutputError(
            f"{where}: exists and is not a directory; name a new or a kvsim {kind} directory"
        )
    exists = target.is_dir()
    in_place = False
    if exists:
        in_place = _check_existing(target, kind, force, where)
    elif target.is_symlink():
        raise OutputError(f"{where}: is a dangling symbolic link; name a new directory")
    _check_writable(target if exists else target.parent, where)
    return OutputTarget(path=target, kind=kind, in_place=in_place, exists=exists)


def _check_existing(target: Path, kind: str, force: bool, where: str) -> bool:
    """Whether an existing directory is written in place; raise when refused."""
    try:
        found = read_kind(target)
        foreign = _foreign_entries(target, found, kind)
    except OSError as e:
        raise OutputError(f"{where}: cannot read the directory: {e.strerror}") from None
    cwd = _inside_cwd(target)
    if found == kind and not foreign:
        # A kvsim directory of this kind: a run replaces it whole (unless it holds the
        # current directory), a sweep or plan continues in it.
        return cwd or kind != "run"
    if not foreign:  # empty (or only kvsim's leftovers / a marker of another kind)
        if found is not None and found != kind:
            raise OutputError(
                f"{where}: is a kvsim {found} directory, not a {kind} directory; "
                "name another directory"
            )
        return True
    if not force:
        what = f"a kvsim {found} directory" if found else "a directory kvsim did not write"
        if found == kind:
            what = f"a kvsim {kind} directory holding files kvsim did not write"
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise OutputError(
            f"{where}: is {what} ({shown}); name a new directory, or pass --force to "
            "write kvsim's files beside them (nothing of yours is deleted or overwritten)"
        )
    clash = sorted(OWN_ENTRIES[kind] & set(foreign))
    if clash:
        raise OutputError(
            f"{where}: {clash[0]} exists and kvsim did not write it; even with --force "
            "kvsim never overwrites it: move it away or name another directory"
        )
    return True


def _check_writable(directory: Path, where: str) -> None:
    """Create the missing parents of ``directory`` and check that an entry can be made
    in it (a read-only file system or ``/proc`` fails here, before any work)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".kvsim-probe.tmp-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except FileExistsError:
        raise OutputError(f"{where}: {directory} exists and is not a directory") from None
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise OutputError(f"{where}: cannot create a directory in {directory}: {reason}") from None


def staging_dir(target: OutputTarget) -> Path:
    """A new temporary directory to build ``target`` in: inside it when written in
    place, else beside it (same file system, so the final rename is atomic)."""
    where = target.path if target.in_place else target.path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.path.name or 'out'}.tmp-", dir=where))
        tmp.chmod(0o755)
    except OSError as e:
        raise OutputError(
            f"--out {target.path}: cannot create a directory in {where}: {e.strerror}"
        ) from None
    return tmp


def publish(staging: Path, target: OutputTarget) -> None:
    """Put the finished directory ``staging`` in place at ``target`` and mark it.

    Checked again first (something may have appeared there during the run). Replaced:
    the old kvsim directory is renamed aside, the new one renamed in, the old one
    removed. In place: kvsim's entries are moved in one by one (an earlier run's own
    entries replaced, stale ones removed, nothing else touched) and the marker comes
    last.
    """
    again = check_output(target.path, target.kind, force=True)
    write_marker(staging, target.kind)
    if not target.in_place and not again.in_place:
        if target.path.exists():
            old = target.path.with_name(f".{target.path.name}.old-{os.getpid()}")
            target.path.rename(old)
            staging.rename(target.path)
            shutil.rmtree(old)
        else:
            staging.rename(target.path)
        return
    dest = target.path
    own_before = read_kind(dest) == target.kind
    (dest / MARKER).unlink(missing_ok=True)
    new = {e.name for e in staging.iterdir()}
    if own_before:
        for name in sorted(OWN_ENTRIES[target.kind] - new):
            stale = dest / name
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
    for entry in sorted(staging.iterdir(), key=lambda e: e.name == MARKER):
        _move_into(entry, dest / entry.name)
    staging.rmdir()


def _move_into(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``; a directory onto an existing one merges file by file."""
    if src.is_dir() and dst.is_dir():
        for child in src.iterdir():
            _move_into(child, dst / child.name)
        src.rmdir()
    else:
        os.replace(src, dst)


def discard(staging: Path) -> None:
    """Remove a staging directory (a failed or interrupted run)."""
    shutil.rmtree(staging, ignore_errors=True)
