"""How tox finds the Pythons the tests run on (tox loads this file from beside tox.ini).

The suite runs on every CPython from 3.8 to 3.13 that the machine has.  tox looks for them on
PATH, where pyenv puts only shims, which answer for the selected version alone: the
interpreters pyenv installed are added behind them.  A supported Python whose tests did not run
is named at the very end of tox's output, and with CI=true a missing one fails the run.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Set

from tox.config.sets import ConfigSet
from tox.plugin import impl
from tox.session.state import State
from tox.tox_env.api import ToxEnv

SUPPORTED = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
ENV_VERSIONS: Dict[str, str] = {"py" + version.replace(".", ""): version for version in SUPPORTED}
_started: Set[str] = set()
_not_tested: List[str] = []


def pyenv_root() -> str:
    """pyenv's root folder, or "" when pyenv is not installed."""
    if os.environ.get("PYENV_ROOT"):
        return os.environ["PYENV_ROOT"]
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return ""
    return subprocess.run([pyenv, "root"], capture_output=True, text=True, check=True).stdout.strip()


def pyenv_bin_dirs(root: str) -> List[str]:
    """The bin folder of each CPython 3.8-3.13 installed under pyenv's *root*, newest first
    (free-threaded builds and virtual environments left out)."""
    found = []
    for folder in Path(root, "versions").glob("3.*"):
        version = re.fullmatch(r"(3\.\d+)\.(\d+)", folder.name)
        if version and version[1] in SUPPORTED and (folder / "bin").is_dir():
            found.append((SUPPORTED.index(version[1]), int(version[2]), str(folder / "bin")))
    return [folder for *_, folder in sorted(found, reverse=True)]


@impl
def tox_add_core_config(core_conf: ConfigSet, state: State) -> None:
    path = os.environ.get("PATH", "").split(os.pathsep)
    root = pyenv_root()
    extra = [folder for folder in pyenv_bin_dirs(root) if folder not in path] if root else []
    os.environ["PATH"] = os.pathsep.join(path + extra)
    options = state.conf.options  # tox list, depends and devenv have no such option
    if os.environ.get("CI") == "true" and getattr(options, "skip_missing_interpreters", "") == "config":
        options.skip_missing_interpreters = "false"


@impl
def tox_before_run_commands(tox_env: ToxEnv) -> None:
    _started.add(tox_env.name)


@impl
def tox_env_teardown(tox_env: ToxEnv) -> None:
    if tox_env.name in ENV_VERSIONS and tox_env.name not in _started:
        _not_tested.append(ENV_VERSIONS[tox_env.name])


@atexit.register
def _say_what_was_not_tested() -> None:
    if _not_tested:
        versions = ", ".join(sorted(_not_tested, key=SUPPORTED.index))
        print(
            f"\n*** NOT TESTED on Python {versions}: tox found no interpreter, or could not set up its"
            f" environment (see above). Install it (pyenv install {_not_tested[0]}), then run tox again. ***",
            flush=True,
        )
