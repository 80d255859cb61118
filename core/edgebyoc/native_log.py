"""TVM's native log noise kept off the command line's stderr.

TVM's C++ code logs to file descriptor 2 directly. Some of its lines are noise for a user:
when a TVM pass raises, the ``BlockBuilder`` it was using is destroyed during the unwinding
and logs "BlockBuilder destroyed with remaining blocks!" right before edgebyoc's one-line
error; topi warns that a gather "segfaults when there are out-of-bounds indices", which
edgebyoc's index guards rule out. ``filtered_stderr`` routes descriptor 2 through a pipe for the duration of a command
and forwards everything but lines of ``NOISE`` (partial lines of other output, such as a
progress spinner's, pass at once).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Iterator

#: native log lines dropped from the command line's stderr: the BlockBuilder's, and topi's
#: warning that a gather in "fast" mode trusts its indices (edgebyoc checks them before the
#: kernel runs: ``index_guards``)
NOISE = re.compile(rb"^\[[\d:]+\] \S*(block_builder\.cc:\d+: Warning: BlockBuilder destroyed "
                   rb"with remaining blocks!|transform\.h:\d+: Warning: Fast mode segfaults when "
                   rb"there are out-of-bounds indices\. Make sure input indices are in bound)\s*$")


def _forward(source: int, destination: int) -> None:
    pending = b""
    while True:
        try:
            chunk = os.read(source, 65536)
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        out = b"".join(line + b"\n" for line in lines if not NOISE.match(line))
        if pending and not pending.startswith(b"["):  # not a native log line: no waiting
            out, pending = out + pending, b""
        if out:
            os.write(destination, out)
    if pending and not NOISE.match(pending):
        os.write(destination, pending)
    os.close(source)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Descriptor 2 without TVM's ``NOISE`` while the block runs."""
    sys.stderr.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    thread = threading.Thread(target=_forward, args=(read_end, original), daemon=True,
                              name="edgebyoc-stderr")
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)  # the pipe's last writer in this process goes: the reader ends
        thread.join(timeout=5)
        os.close(original)
