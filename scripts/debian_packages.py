"""Install the Debian packages a plugin's tests need (``plugins/<name>/debian-packages.txt``,
one name per line) when they are missing: run by the plugin's tox environment before its
tests (``toxfile.py``) and usable by hand. Without root or apt it names the packages and the
command, and the plugin's tests report themselves skipped with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def main(path: str) -> int:
    packages = [line.split("#")[0].strip() for line in Path(path).read_text().splitlines()]
    needed = missing([p for p in packages if p])
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
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: debian_packages.py plugins/<name>/debian-packages.txt")
    sys.exit(main(sys.argv[1]))
