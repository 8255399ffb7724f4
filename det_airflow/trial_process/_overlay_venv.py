"""A throwaway virtual environment layered over det-airflow's own, for a trial run on a user's machine.

A startup hook that runs ``pip install`` must not change the environment det-airflow runs from.
The overlay has its own ``python`` and ``pip``, so what the hook installs lands in the overlay;
a ``.pth`` file adds det-airflow's site folders (and the ``.pth`` files in them, which editable
installs use) after the overlay's own, so the trial still imports det-airflow, torch and the rest
from the base, and what the hook installs comes first. pip leaves a package of the base alone even
when the hook asks for another version of it: it installs the new one in the overlay instead.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from det_airflow.errors import DetError

# Named so that it sorts after the .pth files pip writes into the overlay.
_BASE_PTH = "zz_det_airflow_base.pth"


class OverlayVenvError(DetError):
    """The throwaway virtual environment could not be made."""


def make_overlay_venv(dest: str | os.PathLike[str]) -> Path:
    """Create the overlay in ``dest`` (a new folder); answers its ``bin`` folder, for the front of
    the trial's ``PATH``."""
    dest = Path(dest).absolute()
    # The base's own pip serves the overlay when there is one: a bundled pip would bring its own
    # setuptools, which would shadow the base's in the trial.
    base_pip = importlib.util.find_spec("pip") is not None
    _run([sys.executable, "-m", "venv", *(["--without-pip"] if base_pip else []), str(dest)], dest)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(dest), "platbase": str(dest)}))
    lines = [f"import site; site.addsitedir({folder!r})" for folder in _base_site_folders()]
    (purelib / _BASE_PTH).write_text("\n".join(lines) + "\n")
    bin_dir = dest / "bin"
    if base_pip:
        python = bin_dir / "python"
        for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
            script = bin_dir / name
            script.write_text(f"#!{python}\n{_PIP_SCRIPT}")
            script.chmod(0o755)
    return bin_dir


# What pip's own console script does; run by the overlay's python, pip installs into the overlay.
_PIP_SCRIPT = "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"


def _run(argv: list[str], dest: Path) -> None:
    made = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if made.returncode != 0:
        reason = (made.stderr.strip().splitlines() or ["no message"])[-1]
        raise OverlayVenvError(f"cannot make a virtual environment in {dest} for the startup hook: {reason}")


def _base_site_folders() -> list[str]:
    """The site folders of this interpreter: its venv's, and the system's when the venv sees them."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        folders.append(site.getusersitepackages())
    return [f for f in dict.fromkeys(folders) if Path(f).is_dir()]
