"""The README stays a short entry point that opens with the two set-up commands, and the documentation's relative
links (files and `#section` anchors) lead somewhere."""

from __future__ import annotations

import argparse
import functools
import itertools
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from lextra.attention.masks import build_mask
from lextra.cli.app import build_parser
from lextra.extend import build_extension
from lextra.model import GPT, GPTConfig, save_model
from lextra.positions.scaling import parse_rope_scaling
from lextra.tasks.registry import parse_task_spec

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: every page whose links are checked
PAGES = [README, *DOCS, ROOT / "benchmarks" / "README.md"]
#: [text](target) and ![alt](target); the target ends at whitespace or ')'
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
BASH = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code, where brackets are code, not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown page: lower case, punctuation dropped, spaces as '-', and
    '-1', '-2', ... after repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """Every link target of `page` that is not a URL (http, https, mailto)."""
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"[a-z]+:", t)]


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every `lextra ...` line, or `torchrun ... -m lextra ...`, in the pages' bash blocks."""
    found = []
    for page in PAGES:
        for block in BASH.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.split(" #", 1)[0].strip()
                if "-m lextra " in command:
                    command = "lextra " + command.split("-m lextra ", 1)[1]
                if command.startswith("lextra "):
                    found.append((str(page.relative_to(ROOT)), command))
    return found


@functools.cache
def lextra_parser() -> argparse.ArgumentParser:
    """`lextra`'s parser, built once for every documented command."""
    return build_parser()


def test_prose_and_anchors_follow_markdown_rules() -> None:
    text = "# A tour: `lextra`\n## Attention on a GPU: `flex`\n## Notes\n## Notes\n```\n# not a heading\n```\n"
    assert anchors(text) == {"a-tour-lextra", "attention-on-a-gpu-flex", "notes", "notes-1"}
    assert LINK.findall(prose("[a](x.md) `[b](y.md)` ![c](p.png)\n```\n[d](z.md)\n```")) == ["x.md", "p.png"]


def test_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines; move detail into a docs/ page and link it"


def test_the_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    first_block = re.search(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert first_block is not None, "README.md needs a bash block with `make run` and `make test`"
    assert not text[: first_block.start()].strip("\n").split("\n")[1:], "only the title may come before the commands"
    commands = [line.split("#", 1)[0].strip() for line in first_block.group(1).splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]


def test_the_readme_test_command_is_what_ci_runs() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    mentioned = set(re.findall(r"`make ([\w-]+)`|^make ([\w-]+)", README.read_text(), re.MULTILINE))
    missing = {name for pair in mentioned for name in pair if name} - targets
    assert not missing, f"README.md names make targets the Makefile lacks: {sorted(missing)}"
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files_and_sections(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target} (no file {destination.relative_to(ROOT)})")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination.read_text()):
            broken.append(f"{target} (no heading with anchor #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    unlinked = [p.name for p in DOCS if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link docs pages {unlinked}"


def test_the_pages_document_commands() -> None:
    pages = {page for page, _ in documented_commands()}
    assert {"README.md", "docs/ruler.md", "docs/hugging-face.md", "docs/running.md"} <= pages


@pytest.mark.parametrize(("page", "command"), documented_commands())
def test_documented_commands_parse(page: str, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        lextra_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as stop:
        error = capsys.readouterr().err
        # `--help` exits with 0; an alignment.json that an earlier command of the page writes is the only input
        # a parser checks on disk
        assert stop.code == 0 or "an alignment.json file; no file" in error, f"{page}: `{command}`: {error}"


#: how the spec-valued options of documented commands are read, for a model of training length L (the CLI reads
#: these values once it has loaded the model)
SPEC_READERS: dict[str, Callable[[str, int], object]] = {
    "--extend": build_extension,
    "--rope-scaling": lambda spec, _: parse_rope_scaling(spec),
    "--mask": build_mask,
    "--task": lambda spec, _: parse_task_spec(spec),
}


def training_length(words: list[str]) -> int:
    """L of the model a documented command runs: SmolLM2's 8192, else its `--train-len`, else lextra's 128."""
    if "smollm2" in words:
        return 8192
    return int(words[words.index("--train-len") + 1]) if "--train-len" in words else 128


def documented_specs() -> list[tuple[str, str, str, int]]:
    """(command, option, spec, L) for every spec-valued option in the documented commands, each once."""
    found: dict[tuple[str, str, str, int], None] = {}
    for _, command in documented_commands():
        words = shlex.split(command)
        for flag, value in itertools.pairwise(words):
            if flag in SPEC_READERS:
                found[command, flag, value, training_length(words)] = None
    return list(found)


def test_the_commands_show_every_kind_of_spec() -> None:
    assert {flag for _, flag, _, _ in documented_specs()} == set(SPEC_READERS)


@pytest.mark.parametrize(("command", "option", "spec", "train_len"), documented_specs())
def test_documented_specs_build(command: str, option: str, spec: str, train_len: int) -> None:
    SPEC_READERS[option](spec, train_len)


def test_the_readme_library_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_model(GPT(GPTConfig(layer_plan="rope", train_len=128)), tmp_path / "runs" / "rope" / "model")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    blocks = PYTHON.findall(README.read_text())
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["out"].shape == (1, 8, 4096, 64)
    assert namespace["bias"].shape == (8, 128, 4096)
    model = namespace["model"]
    assert model.config.plan()[0].scheme_options["scaling"] == {"rope_type": "yarn", "factor": 4.0}
    assert {repr(block.attn.extension) for block in model.blocks} == {
        "self_extend(L=128, group=8, window=32, log_scale=False)"
    }
