"""Every pin is written once: in requirements/, which pyproject.toml and the Makefile both read."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements"


def requirement_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, requirement) for each requirement line of a pip requirements file."""
    lines = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append((number, line))
    return lines


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def all_pins() -> dict[str, list[tuple[str, str]]]:
    """Canonical package name -> [(where, requirement)] over requirements/*.txt and pyproject's own lists."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(REQUIREMENTS.glob("*.txt")):
        for number, line in requirement_lines(path):
            req = Requirement(line)
            pins.setdefault(canonicalize_name(req.name), []).append((f"{path.relative_to(ROOT)}:{number}", line))
    project = pyproject()["project"]
    inline = [("dependencies", r) for r in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        inline += [(f"optional-dependencies.{extra}", r) for r in reqs]
    for where, line in inline:
        pins.setdefault(canonicalize_name(Requirement(line).name), []).append((f"pyproject.toml {where}", line))
    return pins


def test_requirement_files_hold_only_exact_pins() -> None:
    files = sorted(REQUIREMENTS.glob("*.txt"))
    assert {p.name for p in files} >= {"runtime.txt", "test.txt", "transitive.txt", "bench.txt", "data.txt", "hf.txt"}
    for path in files:
        for number, line in requirement_lines(path):
            assert not line.startswith("-"), f"{path.name}:{number}: pip options go in the Makefile, not here: {line}"
            specs = list(Requirement(line).specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}:{number}: not an exact pin: {line}"


def test_no_package_is_pinned_twice() -> None:
    twice = {name: places for name, places in all_pins().items() if len(places) > 1}
    assert not twice, "pinned more than once:\n" + "\n".join(
        f"  {name}: " + "; ".join(f"{where} {line}" for where, line in places) for name, places in twice.items()
    )


def test_pyproject_reads_its_dependencies_from_requirements() -> None:
    config = pyproject()
    assert set(config["project"]["dynamic"]) >= {"dependencies", "optional-dependencies"}
    assert "dependencies" not in config["project"] and "optional-dependencies" not in config["project"]
    dynamic = config["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"] == {"file": ["requirements/runtime.txt"]}
    assert dynamic["optional-dependencies"]["test"] == {"file": ["requirements/test.txt"]}
    assert dynamic["optional-dependencies"]["bench"] == {"file": ["requirements/bench.txt"]}
    for path in ("runtime.txt", "test.txt", "bench.txt"):  # setuptools reads these lines as they are
        for number, line in requirement_lines(REQUIREMENTS / path):
            raw = (REQUIREMENTS / path).read_text().splitlines()[number - 1]
            assert raw.strip() == line, f"{path}:{number}: setuptools needs comments on their own lines"


def test_setuptools_expands_the_same_pins() -> None:
    from setuptools.config import pyprojecttoml

    project = pyprojecttoml.read_configuration(ROOT / "pyproject.toml", expand=True)["project"]
    assert project["dependencies"] == [line for _, line in requirement_lines(REQUIREMENTS / "runtime.txt")]
    extras = project.get("optional-dependencies", project.get("optional_dependencies"))
    for extra in ("test", "bench"):
        assert extras[extra] == [line for _, line in requirement_lines(REQUIREMENTS / f"{extra}.txt")]


def test_makefile_pins_nothing_and_installs_from_requirements() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "==" not in makefile, "versions belong in requirements/, not the Makefile"
    assert not re.search(r"pip install[^\n]*\b[\w.-]+(?:>=|<=|~=|!=)\d", makefile)
    for name in ("runtime.txt", "test.txt", "transitive.txt", "data.txt", "bench.txt", "hf.txt"):
        assert f"$(REQ)/{name}" in makefile, f"the Makefile does not install requirements/{name}"
    for name in ("data.txt", "hf.txt"):  # see their comments
        assert re.search(rf"--no-deps -r \$\(REQ\)/{re.escape(name)}", makefile)


def test_torch_stays_pinned_to_the_local_cpu_wheel() -> None:
    assert [line for _, line in all_pins()["torch"]] == ["torch==2.13.0"]


def test_installed_versions_match_the_pins() -> None:
    """What `make` installed is what the files say (packages of optional groups are checked when present)."""
    wrong = []
    for name, places in all_pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        for where, line in places:
            if not Requirement(line).specifier.contains(Version(installed), prereleases=True):
                wrong.append(f"{name} {installed} installed, {where} says {line}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.gpu
def test_cuda_device_is_visible() -> None:
    """The smallest `make test-gpu` check: a CUDA device exists and computes what the CPU does."""
    assert torch.cuda.is_available(), "no CUDA device visible to torch"
    a = torch.randn(64, 64)
    assert torch.allclose((a @ a).cuda(), a.cuda() @ a.cuda(), atol=1e-4)
