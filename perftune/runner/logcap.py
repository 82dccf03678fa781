"""``burst.log`` capped: a burst's output goes through a pipe to a thread of the driver that keeps the file under
``LOG_CAP_BYTES``, cutting it to its last half (whole lines, one line saying what was dropped) when it grows past.

Uncapped, a script that printed 10 MB left 9.6 MB in every trial folder, and one that prints without end would
fill the disk.  The tail is what is read (``process.log_tail``: a failure's last lines); the driver is the file's
only writer, so the cut loses nothing that follows it.  If the driver dies the pipe breaks, and the burst dies with
it anyway.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO, Optional

LOG_CAP_BYTES = 4 * 1024 * 1024


def cut_to_tail(fh: BinaryIO, keep: int, dropped_before: int = 0, header: int = 0) -> tuple[int, int]:
    """Rewrite the open file as its last ``keep`` bytes (from a line start) after one line saying what was cut.

    ``dropped_before``: the output bytes earlier cuts dropped, and ``header``: the length of the line the last cut
    wrote at the file's start (not output): the new line counts every byte dropped so far, not just this cut's (one
    said 2,098,087 bytes where 6.3 MB had gone).  Returns (output bytes dropped in all, the new line's length)."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - keep))
    tail = fh.read()
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1:]
    dropped = dropped_before + size - len(tail) - header
    line = f"[perftune: {dropped} bytes of earlier output dropped: burst.log keeps its last {keep // 1024} KiB]\n"
    fh.seek(0)
    fh.write(line.encode())
    fh.write(tail)
    fh.truncate()
    fh.flush()
    return dropped, len(line.encode())


class CappedLog:
    """``with CappedLog(path) as log: Popen(..., stdout=log.fd); log.launched()``: the child's output into ``path``,
    capped.  ``append``: keep what the file holds (msrun's launcher writes its command line first)."""

    def __init__(self, path: Path, cap: int = LOG_CAP_BYTES, append: bool = False):
        self.path = Path(path)
        self.cap = cap
        self.append = append
        self.fd: Optional[int] = None
        self._read: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self.dropped = 0  # output bytes the cuts dropped so far
        self._header = 0  # length of the line the last cut wrote at the file's start

    def __enter__(self) -> CappedLog:
        self._file = open(self.path, "r+b" if self.append and self.path.exists() else "w+b")
        self._file.seek(0, os.SEEK_END)
        self._read, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name=f"log {self.path.parent.name}", daemon=True)
        self._thread.start()
        return self

    def launched(self) -> None:
        """The child holds the write end now: close ours, so the pump sees EOF when the child's side closes."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _pump(self) -> None:
        writing = True
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except OSError:
                return
            if not chunk:
                return
            if not writing:  # keep draining: a writer blocked on a full pipe would hang the burst to its time-out
                self.dropped += len(chunk)
                continue
            try:
                self._file.write(chunk)
                self._file.flush()
                if self._file.tell() > self.cap:
                    self.dropped, self._header = cut_to_tail(self._file, self.cap // 2, self.dropped, self._header)
            except (OSError, ValueError):  # disk full, or closed after a pump that would not end
                writing = False
                self.dropped += len(chunk)

    def __exit__(self, *exc) -> None:
        self.launched()
        if self._thread is not None:
            self._thread.join(timeout=10.0)  # a process that escaped every clean-up may hold the pipe: stop anyway
        if self._read is not None and not (self._thread is not None and self._thread.is_alive()):
            os.close(self._read)  # (a pump still reading keeps its descriptor: never close a number it may reuse)
            self._read = None
        self._file.close()
