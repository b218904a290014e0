"""A FUSE file system that fails on command, for fault tests (root only): a passthrough over a
backing directory, served by a child process (so a hang in it cannot block the test), switched
between modes through a control file:

* ``ok``: every call goes through to the backing directory.
* ``eio``: writes, fsyncs (files and directories), truncations, creations and renames fail with
  ``EIO``, as on a disk whose writes fail; reads, opens and deletes still work.
* ``eio-fsync``: only fsyncs fail with ``EIO`` (writes land in the page cache and succeed): the
  failure a later fsync reports after the kernel could not write back dirty pages.
* ``erofs``: every call that would change something fails with ``EROFS`` (opening for writing
  too), reads work: what a process sees after ext4's ``errors=remount-ro`` turned its file system
  read-only under it.

A real read-only remount cannot be had mid-append (``mount -o remount,ro`` answers EBUSY while a
broker holds its active segments open for writing) and device-mapper is not on every machine;
FUSE is (Debian's ``libfuse2`` and ``fuse``, pip's ``fusepy``: ``scripts/setup.sh`` and
pyproject.toml's test extra install them).

The parent side is :class:`FaultFs` (``mount``/``switch``/``unmount``, the same ``mount`` and
``unmount`` as :class:`tests.faults.disks.Tmpfs`, so :func:`tests.faults.disks.mounted` takes
either). The child is ``python -m tests.faults.faultfs BACKING MOUNTPOINT CONTROL STATE``
(from the repository root). Its control thread reads ``CONTROL`` (the mode's name) every ``POLL_S`` and writes
``STATE`` (JSON: the mode in force, how many calls failed per operation, the wall-clock time of the
first failure in that mode), which is how the parent knows a switch took effect. Python signal
handlers are no way to steer it: the main thread sits in libfuse's loop, which never returns to
the interpreter, and libfuse takes SIGHUP, SIGINT and SIGTERM as "unmount".

Only the child imports fusepy (``fuse``): without it the tests skip (``CannotMount``).
"""
from __future__ import annotations

import contextlib
import ctypes.util
import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .disks import CannotMount

REPO = Path(__file__).resolve().parents[2]
MODES = ("ok", "eio", "eio-fsync", "erofs")
POLL_S = 0.05
#: Calls failing with EIO in ``eio`` mode (fusepy's operation names; ``truncate`` is ftruncate too).
EIO_CALLS = frozenset({"write", "fsync", "fsyncdir", "truncate", "create", "mknod", "rename"})
#: Calls failing with EROFS in ``erofs`` mode; ``open`` and ``access`` only when they ask to write.
FSYNC_CALLS = frozenset({"fsync", "fsyncdir"})
EROFS_CALLS = frozenset({"write", "fsync", "fsyncdir", "truncate", "create", "mknod", "mkdir", "rmdir", "unlink",
                         "rename", "link", "symlink", "chmod", "chown", "utimens", "setxattr", "removexattr"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT
MOUNT_WITHIN_S = 15.0
SWITCH_WITHIN_S = 5.0


def fuse_mounts() -> set[str]:
    """Mount points of FUSE file systems, from /proc/self/mountinfo (never touching a mount, which
    could hang when its server does)."""
    found = set()
    with open("/proc/self/mountinfo") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0].startswith("fuse"):
                found.add(left.split(" ")[4].replace("\\040", " "))
    return found


@dataclass
class FaultFs:
    """A fault FUSE file system at ``path`` over ``backing``, its control and state files and the
    child's output in ``work`` (all outside the mount)."""
    path: Path
    backing: Path
    work: Path
    mounted: bool = False
    mode: str = "ok"
    switched_at: float = 0.0   # wall-clock time of the last switch
    child: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def control(self) -> Path:
        return self.work / f"{self.path.name}.faultfs-control"

    @property
    def state_file(self) -> Path:
        return self.work / f"{self.path.name}.faultfs-state"

    @property
    def output(self) -> Path:
        return self.work / f"{self.path.name}.faultfs.log"

    def mount(self) -> "FaultFs":
        why = unavailable()
        if why:
            raise CannotMount(why)
        for directory in (self.path, self.backing, self.work):
            directory.mkdir(parents=True, exist_ok=True)
        self._write_control("ok")
        self.state_file.unlink(missing_ok=True)
        with open(self.output, "ab") as out:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.faultfs", str(self.backing), str(self.path), str(self.control),
                 str(self.state_file)],
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.mounted = True   # from here on unmount() cleans up, whatever happens
        deadline = time.monotonic() + MOUNT_WITHIN_S
        while str(self.path) not in fuse_mounts() or self.state().get("mode") != "ok":
            if self.child.poll() is not None or time.monotonic() > deadline:
                tail = self.output.read_text(errors="replace")[-800:]
                self.unmount()
                raise CannotMount(f"the fault file system did not mount at {self.path} within "
                                      f"{MOUNT_WITHIN_S:.0f}s (exit {self.child.poll()}): {tail.strip()}")
            time.sleep(0.05)
        return self

    def _write_control(self, mode: str) -> None:
        scratch = self.control.with_suffix(".new")
        scratch.write_text(mode)
        os.replace(scratch, self.control)

    def switch(self, mode: str) -> None:
        """Put the file system in ``mode`` and wait (bounded) until the child says it is in force."""
        assert mode in MODES, mode
        self._write_control(mode)
        deadline = time.monotonic() + SWITCH_WITHIN_S
        while self.state().get("mode") != mode:
            assert self.child is not None and self.child.poll() is None, f"the fault file system at {self.path} died"
            assert time.monotonic() < deadline, f"the fault file system at {self.path} did not switch to {mode}"
            time.sleep(POLL_S)
        self.mode, self.switched_at = mode, time.time()

    def state(self) -> dict[str, Any]:
        """The child's last state: ``mode``, ``failed`` (calls per operation since mounting),
        ``first_failure`` (wall clock, in the current mode; None before one)."""
        try:
            return dict(json.loads(self.state_file.read_text()))
        except (OSError, ValueError):
            return {}

    def first_failure_after_s(self) -> float | None:
        """Seconds from the last switch to the first call the file system failed, if any."""
        first = self.state().get("first_failure")
        return None if first is None else max(0.0, first - self.switched_at)

    def unmount(self) -> None:
        """Unmount (lazily if busy) and stop the child (killing it if it does not stop): always."""
        if not self.mounted:
            return
        with contextlib.suppress(OSError):
            self._write_control("ok")   # a file still open through a lazy unmount gets no more faults
        if str(self.path) in fuse_mounts():
            command = ["fusermount", "-u", str(self.path)] if shutil.which("fusermount") else ["umount", str(self.path)]
            if _run(command) != 0:
                _run(["umount", "-l", str(self.path)])
        if self.child is not None:
            try:
                self.child.wait(10)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait(10)
        if str(self.path) in fuse_mounts():   # the child died with the mount still there
            _run(["umount", "-l", str(self.path)])
        self.mounted = False


def _run(command: list[str]) -> int:
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1


def unavailable() -> str | None:
    """Why this machine cannot mount a fault file system, or None."""
    if os.geteuid() != 0:
        return "mounting a FUSE file system for the tests needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if ctypes.util.find_library("fuse") is None:
        return "no libfuse2 (Debian's libfuse2: scripts/setup.sh installs it)"
    if importlib.util.find_spec("fuse") is None:
        return "no fusepy (pyproject.toml's test extra: make setup installs it)"
    return None


# -- the child: a passthrough file system ------------------------------------------------------


def serve(backing: str, mountpoint: str, control: str, state: str) -> None:
    """Mount at ``mountpoint`` in the foreground until unmounted (multi-threaded)."""
    from fuse import FUSE, FuseOSError, Operations  # fusepy: only in the child

    class Passthrough(Operations):  # type: ignore[misc]
        def __init__(self) -> None:
            self.mode = "ok"
            self.failed: Counter[str] = Counter()
            self.first_failure: float | None = None
            self.guard = threading.Lock()   # not "lock": fusepy would take it for the POSIX lock call

        def __call__(self, op: str, *args: Any) -> Any:
            error = self._fault(op, args)
            if error:
                with self.guard:
                    self.failed[op] += 1
                    if self.first_failure is None:
                        self.first_failure = time.time()
                raise FuseOSError(error)
            return super().__call__(op, *args)

        def _fault(self, op: str, args: tuple[Any, ...]) -> int:
            mode = self.mode
            if (mode == "eio" and op in EIO_CALLS) or (mode == "eio-fsync" and op in FSYNC_CALLS):
                return errno.EIO
            if mode == "erofs":
                if op in EROFS_CALLS or (op == "open" and args[1] & WRITE_FLAGS) or (op == "access" and args[1] & os.W_OK):
                    return errno.EROFS
            return 0

        def real(self, path: str) -> str:
            return os.path.join(backing, path.lstrip("/"))

        # metadata
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.lstat(self.real(path))
            return {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                                      "st_atime", "st_mtime", "st_ctime", "st_blocks")}

        def access(self, path: str, amode: int) -> int:
            if not os.access(self.real(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self.real(path))]

        def readlink(self, path: str) -> str:
            return os.readlink(self.real(path))

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(self.real(path))
            return {key: getattr(sv, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                      "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(self.real(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(self.real(path), uid, gid, follow_symlinks=False)
            return 0

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> int:
            os.utime(self.real(path), times, follow_symlinks=False)
            return 0

        # names
        def mknod(self, path: str, mode: int, dev: int) -> int:
            os.mknod(self.real(path), mode, dev)
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(self.real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            os.rmdir(self.real(path))
            return 0

        def unlink(self, path: str) -> int:
            os.unlink(self.real(path))
            return 0

        def rename(self, old: str, new: str) -> int:
            os.rename(self.real(old), self.real(new))
            return 0

        def symlink(self, target: str, source: str) -> int:   # fusepy: a link at ``target`` to ``source``
            os.symlink(source, self.real(target))
            return 0

        def link(self, target: str, source: str) -> int:
            os.link(self.real(source), self.real(target))
            return 0

        # files
        def open(self, path: str, flags: int) -> int:
            return os.open(self.real(path), flags)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            # fusepy passes no open flags here (raw_fi off), and the one handle serves the creator's
            # reads as well as its writes (a segment is created O_RDWR): open it for both, never
            # write-only. The kernel asks ``create`` only for a name that does not exist.
            return os.open(self.real(path), os.O_RDWR | os.O_CREAT, mode)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self.real(path), length)
            return 0

        def flush(self, path: str, fh: int) -> int:   # writes went through already: nothing to do
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

    operations = Passthrough()

    def control_loop() -> None:
        written = None
        while True:
            with contextlib.suppress(OSError):
                mode = Path(control).read_text().strip()
                if mode in MODES and mode != operations.mode:
                    with operations.guard:
                        operations.mode, operations.first_failure = mode, None
            with operations.guard:
                now = {"mode": operations.mode, "failed": dict(operations.failed),
                       "first_failure": operations.first_failure}
            if now != written:
                scratch = state + ".new"
                with contextlib.suppress(OSError):
                    Path(scratch).write_text(json.dumps(now))
                    os.replace(scratch, state)
                    written = now
            time.sleep(POLL_S)

    threading.Thread(target=control_loop, name="faultfs-control", daemon=True).start()
    # No allow_other: the brokers run as the same user (root) that mounts. hard_remove: an unlinked
    # open file goes at once (no .fuse_hidden file left in a partition directory to block rmdir).
    FUSE(operations, mountpoint, foreground=True, nothreads=False, big_writes=True, hard_remove=True,
         fsname="ember-faultfs", subtype="ember-faultfs")


if __name__ == "__main__":
    serve(*sys.argv[1:5])
