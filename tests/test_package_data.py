"""Every file of the package that is not Python is listed in pyproject's package-data, so a
wheel carries it: the job and pod scripts, the probe, the stand-in trainer, the copy of
Runpod's schema. (A file missing there works from a checkout and fails once installed.)"""

import fnmatch
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_data_file_of_the_package_is_listed_in_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = config["tool"]["setuptools"]["package-data"]
    files = subprocess.run(
        ["git", "ls-files", "overbrainer"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    data = [Path(f) for f in files if not f.endswith(".py")]
    assert data, "git ls-files found no data file"
    missing = []
    for path in data:
        covered = False
        for package, patterns in listed.items():
            base = Path(*package.split("."))
            if base in path.parents:
                inside = path.relative_to(base).as_posix()
                covered = covered or any(fnmatch.fnmatch(inside, p) for p in patterns)
        if not covered:
            missing.append(path.as_posix())
    assert missing == []
