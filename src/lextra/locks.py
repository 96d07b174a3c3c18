"""One writer per folder: an exclusive `flock` on a lock file that records its holder's pid. The kernel drops a
`flock` when its process dies, so a lock is never stuck; taking over a dead holder's file is said on stderr. A
clean release empties the file without removing it (except a folder the command created and left empty)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from lextra.errors import LockedError

LOCK_NAME = ".lock"
"""The lock file inside a folder that one process at a time writes (a prepared folder, a run folder)."""


def _holder(path: Path) -> int | None:
    """The pid recorded in a lock file (None when empty or unreadable)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike[str], what: str, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the exclusive lock `path` for the body (`what` names it in messages); another holder is waited for up
    to `wait_s` seconds, then refused with `LockedError`."""
    import fcntl

    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = _holder(path)
                    holder = f"process {pid}" if pid is not None else "another process"
                    waited = f" (waited {wait_s:.0f} s)" if wait_s > 0 else ""
                    raise LockedError(
                        f"{what} is being written by {holder}{waited}, which holds {path}; wait for it to finish, "
                        "or stop it and run again"
                    ) from None
                time.sleep(0.1)
        try:
            stale = _holder(path)
            if stale is not None and stale != os.getpid():
                print(
                    f"lextra: took over the lock {path} of process {stale}, which ended without releasing it",
                    file=sys.stderr,
                )
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], what: str) -> Iterator[None]:
    """The lock of one folder (`folder/.lock`), refused at once when held. The folder is created if needed, and
    removed again when the body left nothing in it but the lock (a command that failed before writing)."""
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise LockedError(f"{what} is a file, not a folder; give a new folder, or the folder it wrote before")
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    with hold_lock(root / LOCK_NAME, what):
        try:
            yield
        finally:  # still holding the lock: only the process that made the folder, and holds it, removes it
            if created and [p.name for p in root.iterdir()] == [LOCK_NAME]:
                (root / LOCK_NAME).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    root.rmdir()


def run_lock(run_dir: str | os.PathLike[str], what: str = "the run folder") -> contextlib.AbstractContextManager[None]:
    """The lock of a run folder, held by the process that writes it (torchrun's rank 0; the others, which only
    read it, take none)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return contextlib.nullcontext()
    return folder_lock(run_dir, f"{what} {run_dir}")
