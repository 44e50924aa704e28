"""Every snippet of README.md and docs/*.md still works: each sweep file passes `msexp validate`
(and, in the slow tier, `msexp plan --check`), and each `msexp` command names a subcommand
whose `--help` lists every option it uses (tests/README.md: the docs)."""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from msexp.cli import app
from tests.conftest import ROOT
from tests.test_real_scripts import write_mnist

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:^<!-- folder: (?P<folder>[^\s;]+)(?:; mnist: (?P<mnist>\S+))? -->\n)?"
                   r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
FENCED = re.compile(r"^( *)```\w*\n.*?^\1```$", re.M | re.S)
PROGRAMS = ("msexp", ".venv/bin/msexp")
NOT_RUN = "# not run:"


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    lang: str
    body: str
    folder: str | None
    mnist: str | None  # where in the folder the test writes MNIST's training files

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    return [Snippet(page, text.count("\n", 0, m.start("lang")) + 1, m["lang"],
                    textwrap.dedent(m["body"]), m["folder"], m["mnist"])
            for m in FENCE.finditer(text)]


def sweep_files() -> list[Snippet]:
    return [s for page in PAGES for s in snippets(page)
            if s.lang == "yaml" and re.search(r"^experiment:", s.body, re.M)]


def shell_lines(body: str) -> list[str]:
    return [line.strip() for line in body.replace("\\\n", " ").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def msexp_commands(line: str) -> list[list[str]]:
    """The argv after `msexp` of each msexp command in a shell line (`a && b`, `cmd &`, `> f`)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    for token in [*lexer, ";"]:
        if set(token) <= set("();<>|&"):
            if current and current[0] in PROGRAMS:
                commands.append(current[1:])
            current = []
        elif not (current and current[-1] in (">", "<")):
            current.append(token)
    return commands


@dataclass(frozen=True)
class Command:
    snippet: Snippet
    argv: tuple[str, ...]
    line: int  # of the snippet's shell lines, from 1

    @property
    def name(self) -> str:
        return f"{self.snippet.name}+{self.line}:msexp {' '.join(self.argv[:2])}"


def commands() -> list[Command]:
    return [Command(s, tuple(argv), number) for page in PAGES for s in snippets(page)
            if s.lang in ("bash", "sh") for number, line in enumerate(shell_lines(s.body), 1)
            for argv in msexp_commands(line)]


def sweep_in_a_folder(snippet: Snippet, tmp_path: Path) -> Path:
    """The snippet as a file, in a copy of the folder its `<!-- folder: PATH -->` names (with
    `; mnist: DIR`, 64 generated MNIST images there)."""
    folder = tmp_path / "snippet"
    if snippet.folder:
        shutil.copytree(ROOT / snippet.folder, folder)
    if snippet.mnist:
        write_mnist(folder / snippet.mnist, 64)
    folder.mkdir(exist_ok=True)
    sweep = folder / "snippet.yaml"
    sweep.write_text(snippet.body, encoding="utf-8")
    return sweep


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def resolve(argv: tuple[str, ...]) -> tuple[list[str], Any, list[str]]:
    """The subcommand path (`services up`), its command (Typer's click) and the arguments left."""
    command = typer.main.get_command(app)
    path, rest = [], list(argv)
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command = command.commands[rest[0]]
        path.append(rest.pop(0))
    return path, command, rest


def option_names(command: Any) -> set[str]:
    return {opt for p in command.params for opt in [*p.opts, *p.secondary_opts]}


def options_used(command: Any, args: list[str]) -> list[str]:
    """The options in `args`, skipping the value an option takes (`--sbatch "--x=1"`)."""
    takes_value = {opt: not (p.is_flag or p.count) for p in command.params
                   if p.param_type_name == "option" for opt in [*p.opts, *p.secondary_opts]}
    used, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            option = arg.split("=", 1)[0]
            used.append(option)
            skip = takes_value.get(option, False) and "=" not in arg
    return used


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (`## Keep what trials learn`: keep-what-...)."""
    headings = re.findall(r"^#+ (.+)$", FENCED.sub("", page.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def links() -> list[tuple[Path, str, str]]:
    """(page, target path, anchor) of every relative Markdown link of the pages."""
    return [(page, m["path"], m["anchor"] or "") for page in PAGES
            for m in re.finditer(r"\]\((?!https?:)(?P<path>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)",
                                 FENCED.sub("", page.read_text(encoding="utf-8")))]


SWEEPS = sweep_files()
COMMANDS = commands()


def test_the_pages_hold_the_snippets_this_file_checks() -> None:
    """An extraction that finds nothing would pass every test below."""
    readme = [s for s in SWEEPS if s.page.name == "README.md"]
    assert [s.body for s in readme] == [(ROOT / "sweeps/accum.yaml").read_text(encoding="utf-8")]
    assert {c.argv[0] for c in COMMANDS} >= {"sweep", "validate", "plan", "worker", "schedule",
                                            "services", "status", "best", "report", "run"}
    assert any(s.folder for s in SWEEPS) and any(s.mnist for s in SWEEPS)


def test_the_readme_is_a_first_page_with_the_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert ("python3 -m venv .venv && .venv/bin/pip install -e . && "
            ".venv/bin/msexp sweep sweeps/accum.yaml") in readme
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    fast_tier = re.search(r"^(\.venv/bin/pytest -q -m \"not slow\"[^#\n]*?) +#", ci, re.M)
    assert fast_tier, ".ci/run runs no fast tier"
    assert ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
            f"{fast_tier[1]}\n") in readme, "the README's test command is not .ci/run's"
    tabled = set(re.findall(r"^\| `msexp (\w+)", readme, re.M))
    assert tabled == set(typer.main.get_command(app).commands), "the commands table is stale"


@pytest.mark.parametrize("snippet", SWEEPS, ids=lambda s: s.name)
def test_each_sweep_file_in_the_docs_validates(snippet: Snippet, workdir: Path) -> None:
    sweep = sweep_in_a_folder(snippet, workdir)
    result = invoke("validate", str(sweep))
    assert result.exit_code == 0, result.output
    assert f"{sweep}: ok" in result.output


@pytest.mark.slow  # trains one micro-batch, or runs the script's --help, in a subprocess
@pytest.mark.parametrize("snippet", [s for s in SWEEPS if not s.body.startswith(NOT_RUN)],
                         ids=lambda s: s.name)
def test_each_sweep_file_in_the_docs_passes_plan_check(snippet: Snippet, workdir: Path) -> None:
    result = invoke("plan", str(sweep_in_a_folder(snippet, workdir)), "--check")
    assert result.exit_code == 0, result.output
    experiment = yaml.safe_load(snippet.body)["experiment"]
    command = isinstance(experiment, dict) and "command" in experiment
    assert ("--help` ok" if command else "one micro-batch trains") in result.output, result.output
    if command and "check" in experiment:
        assert re.search(r"objective \w+ found", result.output), result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_each_command_in_the_docs_is_one_whose_help_lists_its_options(command: Command) -> None:
    path, click_command, rest = resolve(command.argv)
    assert path, f"msexp has no command {command.argv[0]!r}"
    assert not hasattr(click_command, "commands"), f"msexp {' '.join(path)} needs a command"
    helped = invoke(*path, "--help")
    assert helped.exit_code == 0, helped.output
    for option in options_used(click_command, rest):
        assert option in option_names(click_command) and option in helped.output, (
            f"msexp {' '.join(path)} --help lists no {option}")


def test_each_sweep_file_a_docs_command_names_is_in_the_repository() -> None:
    """Except on a page that has the reader make it with `msexp new`."""
    scaffolding = {c.snippet.page for c in COMMANDS if c.argv[0] == "new"}
    named = {arg for c in COMMANDS if c.snippet.page not in scaffolding for arg in c.argv
             if re.fullmatch(r"sweeps/[\w.-]+\.ya?ml", arg)}
    assert named, "no docs command names a file of sweeps/"
    assert [n for n in sorted(named) if not (ROOT / n).is_file()] == []


@pytest.mark.parametrize(("page", "path", "anchor"), links(),
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_each_link_of_the_docs_reaches_its_file_and_heading(page: Path, path: str,
                                                            anchor: str) -> None:
    target = (page.parent / path).resolve() if path else page
    assert target.exists(), f"{page.name} links to {path}, which does not exist"
    if anchor:
        assert target.suffix == ".md" and anchor in anchors(target), (
            f"{page.name} links to {path}#{anchor}, which has no such heading")
