"""Install the Debian packages tests need (``debian-packages.txt`` for the core's,
``plugins/<name>/debian-packages.txt`` for a plugin's; one name per line) when they are
missing: run by the tox environment before its tests (tox.ini, ``toxfile.py``) and usable by
hand. Without root or apt it names the packages and the command, and the tests that need them
report themselves skipped with the reason. Environments running in parallel take turns (a
file lock): apt and dpkg allow one install at a time."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def missing(packages: list[str]) -> list[str]:
    if not shutil.which("dpkg-query"):
        return []  # not a Debian system: nothing to check against
    out = []
    for name in packages:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name],
                                capture_output=True, text=True)
        if "install ok installed" not in status.stdout:
            out.append(name)
    return out


#: The lock parallel tox environments take before looking at and installing packages.
LOCK = Path(tempfile.gettempdir()) / "edgebyoc-debian-packages.lock"


def main(path: str) -> int:
    packages = [line.split("#")[0].strip() for line in Path(path).read_text().splitlines()]
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return install([p for p in packages if p])


def install(packages: list[str]) -> int:
    needed = missing(packages)
    if not needed:
        return 0
    command = ["apt-get", "install", "-y", "-qq", *needed]
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print(f"debian_packages: missing {' '.join(needed)}; install them with "
              f"`sudo {' '.join(command)}` (tests that need them will be skipped)",
              file=sys.stderr)
        return 0
    print(f"debian_packages: installing {' '.join(needed)}", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update", "-qq"], command):
        done = subprocess.run(step, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        if done.returncode != 0:  # e.g. no network: the tests that need them skip, saying so
            print(f"debian_packages: `{' '.join(step)}` failed ({done.stderr.strip()[-300:]}); "
                  f"tests that need {' '.join(needed)} will be skipped", file=sys.stderr)
            return 0
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: debian_packages.py debian-packages.txt|plugins/<name>/debian-packages.txt")
    sys.exit(main(sys.argv[1]))
