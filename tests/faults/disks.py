"""Real, small file systems for fault tests: size-limited tmpfs mounts the test creates (root only),
filled by filler files (blocks) or by empty files (inodes), grown again, always unmounted."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol, Sequence

FILLER = "filler"
INODE_FILLERS = "inode-fillers"


class CannotMount(Exception):
    """Not root, or this machine refuses a tmpfs mount: the caller skips."""


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@dataclass
class Tmpfs:
    """One tmpfs of ``size`` bytes (and at most ``inodes`` files when given) at ``path``."""
    path: Path
    size: int
    inodes: int | None = None
    mounted: bool = False

    def mount(self) -> "Tmpfs":
        if os.geteuid() != 0:
            raise CannotMount("mounting a size-limited tmpfs needs root")
        self.path.mkdir(parents=True, exist_ok=True)
        options = f"size={self.size}" + (f",nr_inodes={self.inodes}" if self.inodes else "")
        done = _mount("-t", "tmpfs", "-o", options, "tmpfs", str(self.path))
        if done.returncode != 0:
            raise CannotMount(f"cannot mount a tmpfs at {self.path}: {done.stderr.strip()}")
        self.mounted = True
        return self

    def resize(self, size: int, inodes: int | None = None) -> None:
        """Grow (or shrink) the mounted file system in place: ``mount -o remount,size=``."""
        options = f"remount,size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        done = _mount("-o", options, str(self.path))
        assert done.returncode == 0, f"remount {self.path} {options}: {done.stderr.strip()}"
        self.size = size
        self.inodes = inodes or self.inodes

    def unmount(self) -> None:
        if not self.mounted:
            return
        if subprocess.run(["umount", str(self.path)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)
        self.mounted = False

    def free(self) -> int:
        return os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize

    def fill(self, leave: int = 0) -> int:
        """Write a filler file until ``leave`` bytes (about) are free, or none; its size."""
        written = 0
        with open(self.path / FILLER, "ab", buffering=0) as out:
            for chunk in (1 << 20, 1 << 12, 1):
                try:
                    while self.free() - chunk >= leave:
                        written += out.write(b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    if leave == 0 and chunk == 1:
                        break
        return written

    def fill_inodes(self) -> int:
        """Create empty files until the file system has no inode left: creating a file (a segment
        roll) fails with ENOSPC while appends to open files still find blocks; how many."""
        directory = self.path / INODE_FILLERS
        with contextlib.suppress(OSError):
            directory.mkdir()
        count = 0
        try:
            while True:
                (directory / str(count)).touch(exist_ok=False)
                count += 1
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        return count

    def release(self) -> None:
        """Give the space (and inodes) back: delete what :meth:`fill` and :meth:`fill_inodes` made."""
        (self.path / FILLER).unlink(missing_ok=True)
        directory = self.path / INODE_FILLERS
        if directory.exists():
            for path in directory.iterdir():
                path.unlink()
            directory.rmdir()

    def full(self) -> bool:
        """Whether one more byte or one more file is refused."""
        try:
            with open(self.path / "probe", "xb", buffering=0) as probe:
                probe.write(b"x" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return True
        finally:
            with contextlib.suppress(OSError):
                (self.path / "probe").unlink()
        return False


class Mountable(Protocol):
    """A :class:`Tmpfs`, or a fault FUSE file system (tests/faults/faultfs.py)."""
    def mount(self) -> object: ...
    def unmount(self) -> None: ...


@contextlib.contextmanager
def mounted(mounts: Sequence[Mountable]) -> Iterator[Sequence[Mountable]]:
    """Mount each of ``mounts`` (in order), unmount every mounted one (in reverse) on the way out."""
    try:
        for tmpfs in mounts:
            tmpfs.mount()
        yield mounts
    finally:
        for tmpfs in reversed(mounts):
            tmpfs.unmount()
