"""Injecting disk failures into the os calls ember.log makes (a unique module name: test folders
share sys.path)."""
from __future__ import annotations

import errno
import os
from typing import Any, Callable, Optional

import pytest

_REAL = {name: getattr(os, name) for name in ("pwrite", "pwritev", "write", "fsync", "open")}


class DiskFault:
    """``os.<name>`` fails with ``OSError(code)`` from its ``after + 1``-th call on (counting only
    calls ``when(*args)`` accepts). With ``short=n`` that first failing call of a write instead
    writes its first n bytes and returns n, as the kernel does when the disk fills part-way;
    the calls after it fail. ``heal()`` makes the disk work again."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, code: int = errno.ENOSPC, *,
                 after: int = 0, short: Optional[int] = None,
                 when: Optional[Callable[..., bool]] = None) -> None:
        self.name, self.code, self.after, self.short, self.when = name, code, after, short, when
        self.calls = 0
        self.failures = 0
        self.healed = False
        self._real = _REAL[name]
        monkeypatch.setattr(os, name, self._call)

    def heal(self) -> None:
        self.healed = True

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if self.healed or (self.when is not None and not self.when(*args)):
            return self._real(*args, **kwargs)
        self.calls += 1
        if self.calls <= self.after:
            return self._real(*args, **kwargs)
        self.failures += 1
        if self.short is not None and self.failures == 1:
            return self._write_prefix(*args)
        raise OSError(self.code, os.strerror(self.code))

    def _write_prefix(self, fd: int, data: Any, *rest: Any) -> int:
        if self.name == "pwritev":
            data = b"".join(bytes(b) for b in data)
        prefix = bytes(data)[:self.short]
        if self.name in ("pwrite", "pwritev"):
            return _REAL["pwrite"](fd, prefix, *rest)
        return _REAL["write"](fd, prefix)
