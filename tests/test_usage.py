"""The command line as people expect it: exit codes, usage errors worded as usage, help
pages that read whole at 80 and 120 columns, examples that run when pasted, `-h`,
`--version` and shell completion."""

from __future__ import annotations

import errno
import inspect
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from msexp.cli import app
from msexp.cli.app import EXIT_CODES
from msexp.errors import Refused
from msexp.search.study import open_study
from msexp.spec import load_spec
from tests.conftest import ROOT, msexp_cmd, write

WIDTHS = (80, 120)


def invoke(*args: str, width: int = 100) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(width)},
                              prog_name="msexp")


def pages(group: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group, with the words that invoke it (the root: no words)."""
    group = group or typer.main.get_command(app)
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        yield from pages(command, (*path, name))


PAGES = list(pages())
COMMANDS = [(path, c) for path, c in PAGES if not hasattr(c, "commands")]


def ids(page: tuple[tuple[str, ...], Any]) -> str:
    return " ".join(page[0]) or "msexp"


@pytest.fixture
def sweep(workdir: Path) -> Path:
    return write(workdir / "s.yaml", """
        name: usage
        experiment: mlp_digits
        params: {micro_size: [1, 2]}
    """)


# --- usage errors: exit 2, worded as usage -------------------------------------------


def assert_usage(result: Any, words: tuple[str, ...], says: str) -> None:
    """A usage error as click writes it: the usage line, where help is, what was wrong."""
    assert result.exit_code == 2, result.output
    assert f"Usage: msexp {' '.join(words)}".replace("  ", " ") in result.output, result.output
    assert says in result.output, result.output
    assert "traceback" not in result.output.lower() and "msexp: " not in result.output


@pytest.mark.parametrize("page", PAGES, ids=ids)
def test_every_command_refuses_an_unknown_option_as_usage(page) -> None:
    """Mutation: the error boundary catches click's exceptions (exit 1, "msexp:
    NoSuchOption: ... (the traceback: ...)")."""
    words, _ = page
    assert_usage(invoke(*words, "--no-such-option"), words, "No such option: --no-such-option")


@pytest.mark.parametrize("page", [p for p in COMMANDS if any(
    param.required and param.param_type_name == "argument" for param in p[1].params)], ids=ids)
def test_every_command_with_an_argument_refuses_none_as_usage(page) -> None:
    words, command = page
    name = next(p for p in command.params if p.param_type_name == "argument").metavar
    assert_usage(invoke(*words), words, f"Missing argument '{name}'")


@pytest.mark.parametrize(("argv", "words", "says"), [
    (["swep"], (), "No such command 'swep'. Did you mean 'sweep'?"),
    (["sweep", "s.yaml", "--worker", "2"], ("sweep",), "(Possible options: --workers)"),
    (["sweep", "s.yaml", "--workers", "0"], ("sweep",), "Invalid value for '--workers'"),
    (["validate", "s.yaml", "--check", "true"], ("validate",),
     "Got unexpected extra argument(s) (true)"),
    (["schedule", "slurm", "s.yaml", "--array", "x"], ("schedule", "slurm"),
     "Invalid value for '--array'"),
])
def test_usage_mistakes_are_worded_as_usage(argv, words, says) -> None:
    assert_usage(invoke(*argv), words, says)


@pytest.mark.parametrize("command", ["status", "report"])
def test_a_read_command_without_a_sweep_file_or_study_asks_for_one(workdir: Path,
                                                                   command: str) -> None:
    """issue 53 (branches): a read command given nothing to read says what to give, exit 2,
    and makes no store."""
    result = invoke(command)
    assert result.exit_code == 2, result.output
    assert result.output == "msexp: give a sweep file or --study NAME\n"
    assert not (workdir / "mlruns").exists()


@pytest.mark.parametrize("name", ["a/b", "../up", "-x", ".hidden", "a b"])
def test_a_study_name_that_is_not_a_name_is_refused_before_any_store_opens(
        workdir: Path, sweep: Path, name: str) -> None:
    """issue 53 (branches): `--study` names folders under mlruns/: a path or an option-like
    word is refused in one line, exit 2, and nothing is made."""
    result = invoke("status", str(sweep), "--study", name)
    assert result.exit_code == 2, result.output
    assert result.output == ("msexp status: --study: a name of letters, digits and _.- "
                             f"starting with a letter or digit, not a path, got {name}\n")
    assert not (workdir / "mlruns").exists()


def test_debug_keeps_the_exit_code_of_the_error(workdir: Path) -> None:
    """Mutation: --debug re-raises (Python's exit code 1 for a sweep file's error)."""
    plain, debug = invoke("validate", "nofile.yaml"), invoke("--debug", "validate", "nofile.yaml")
    assert plain.exit_code == debug.exit_code == 2, (plain.output, debug.output)
    assert plain.output.strip() == "nofile.yaml: cannot read the file (No such file or directory)"
    assert "Traceback (most recent call last)" in debug.output
    assert "SpecError: nofile.yaml: cannot read the file" in debug.output


def test_run_blames_its_argument_not_set(workdir: Path) -> None:
    """Mutation: the experiment loaded under trial_params' source, `--set`."""
    result = invoke("run", "nosuch")
    assert result.exit_code == 2
    assert result.output.startswith("msexp run: experiment: no built-in experiment named "
                                    "nosuch (built-ins: "), result.output


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "mlp_digits", "--set", "lr"], "--set: lr: must be knob=value, got lr"),
    (["run", "mlp_digits", "--from-checkpoint", "gone.ckpt"],
     "--from-checkpoint: file not found, got gone.ckpt"),
], ids=["set-without-value", "missing-checkpoint"])
def test_run_refuses_a_bad_set_or_a_missing_checkpoint_in_one_line_before_training(
        workdir: Path, argv: list[str], says: str) -> None:
    """issue 53 (branches). Mutation: the --set message back to "must be key=value": the
    redaction reads `key=value,` as a secret and shows `key=*** got lr`."""
    result = invoke(*argv)
    assert result.exit_code == 2, result.output
    *before, last = result.output.splitlines()
    assert last == says
    assert len(before) <= 1, "at most the trial's params line: nothing trained"


def test_a_study_made_from_another_sweep_file_is_refused_with_exit_code_2(sweep: Path) -> None:
    """Mutation: MsexpError (exit 1) for a sweep file the study does not match."""
    open_study(load_spec(sweep), None)
    sweep.write_text(sweep.read_text().replace("[1, 2]", "[1, 4]"))
    with pytest.raises(Refused, match="was created from a different sweep file") as refused:
        open_study(load_spec(sweep), None)
    assert refused.value.exit_code == 2


# --- exit codes, -h, --version, completion ----------------------------------------------


def test_the_exit_codes_are_one_table_in_the_root_help_and_the_docs() -> None:
    root = invoke("--help", width=80).output
    table = EXIT_CODES.removeprefix("\b\n").splitlines()
    for row in table:
        assert f" {row}" in [line.rstrip() for line in root.splitlines()], (row, root)
    docs = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    for row in table[1:]:
        code, meaning = row.split(maxsplit=1)
        assert f"| {code} | {meaning} |" in docs, row


def test_dash_h_is_help_everywhere() -> None:
    for words, _ in PAGES:
        short, long = invoke(*words, "-h"), invoke(*words, "--help")
        assert short.exit_code == 0 and short.output == long.output, words


def test_version() -> None:
    import importlib.metadata

    result = invoke("--version")
    assert (result.exit_code, result.output) == (
        0, f"msexp {importlib.metadata.version('msexp')}\n")


def test_completion_script_for_bash(monkeypatch: pytest.MonkeyPatch) -> None:
    # the shell named, not detected: a test run with no shell among its parent processes
    # (started in the background, its shell gone) detects none ("Shell  not supported")
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = invoke("--show-completion", "bash")
    assert result.exit_code == 0, result.output
    assert "_MSEXP_COMPLETE=complete_bash" in result.output
    assert "--install-completion" in invoke("--help").output


# --- help pages -------------------------------------------------------------------------


def hard_breaks(page: str, width: int, kept: set[str]) -> list[str]:
    """Lines broken though the next word would have fitted: in the prose of a page (lines
    outside the panels) and in a panel's last column (a help cell). `kept`: lines of
    paragraphs that keep their breaks (`\\b`)."""
    found = []
    lines = page.splitlines()
    for first, second, room in _neighbours(lines, width):
        if first.strip() in kept or second.strip() in kept or second.startswith("["):
            continue
        word = second.split()[0]
        if len(first) + 1 + len(word) <= room:
            found.append(f"{first!r} / {second!r}")
    return found


def _neighbours(lines: list[str], width: int) -> Iterator[tuple[str, str, int]]:
    """(a line's text, the next line's text in the same paragraph or cell, the room)."""
    for a, b in zip(lines, lines[1:]):
        if a.startswith(" ") and b.startswith(" ") and a.strip() and b.strip():
            yield a.strip(), b.strip(), width - 2  # prose: a space each side
        elif a.startswith("│") and b.startswith("│"):
            yield from _cell(a, b, width)


def _cell(a: str, b: str, width: int) -> Iterator[tuple[str, str, int]]:
    """The help cells of two panel rows where the second continues the first's."""
    inner_b = b[1:-1]
    start = len(inner_b) - len(inner_b.lstrip())
    inner_a = a[1:-1]
    if start < 6 or not inner_b.strip() or len(inner_a) <= start or inner_a[start - 1] != " ":
        return
    if not inner_a[start:].strip() or inner_a[start] == " ":
        return  # the first row's text starts elsewhere: not the same column
    yield inner_a[start:].strip(), inner_b.strip(), width - 3 - start


def kept_lines(command: Any) -> set[str]:
    """Lines of the paragraphs that keep their breaks (`\b` in the source)."""
    texts = [EXIT_CODES, inspect.getdoc(command.callback) or ""]
    return {line.strip() for text in texts for block in text.split("\n\n")
            if block.startswith("\b") for line in block.splitlines()[1:]}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES, ids=ids)
def test_no_sentence_is_cut_by_a_hard_break(page, width: int) -> None:
    """Mutation: `usage.rewrapped` returns the text as written (a docstring's line breaks
    cut sentences: `--json prints {"name",` / `"method", ...`)."""
    words, command = page
    result = invoke(*words, "--help", width=width)
    assert result.exit_code == 0
    assert all(len(line) <= width for line in result.output.splitlines())
    assert hard_breaks(result.output, width, kept_lines(command)) == [], words


@pytest.mark.parametrize("page", PAGES, ids=ids)
def test_pages_show_clicks_metavars(page) -> None:
    """Mutation: no `usage.click_style` (Typer's `<bool>`, `<int range>`, `{file}`)."""
    words, command = page
    text = invoke(*words, "--help", width=200).output
    assert not re.search(r"<(bool|int|float|str|path|list)[^>]*>|\{file\}", text), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    arguments = [p.metavar for p in command.params if p.param_type_name == "argument"]
    assert all(re.search(rf"(^| |\[){name}(\]|$| )", usage) for name in arguments), usage
    for option in (p for p in command.get_params(typer.Context(command))
                   if p.param_type_name == "option"):
        if option.is_flag:
            assert option.metavar == "", (words, option.name)
        else:
            assert re.fullmatch(r"[A-Z=]+( RANGE)?|\[[a-z0-9|]+\]", option.metavar), option.name


def test_ranges_read_as_click_writes_them() -> None:
    text = " ".join(invoke("sweep", "--help", width=200).output.split())
    assert "--workers INTEGER RANGE [x>=1]" in text
    assert "--storage URL" in text and "--study NAME" in text
    assert "--cold Compile every trial afresh" in text, "a switch shows no value"


def test_each_summary_is_one_line_at_80_columns() -> None:
    """Mutation: tune's seven-line first paragraph back."""
    for words, group in PAGES:
        if not hasattr(group, "commands"):
            continue
        text = invoke(*words, "--help", width=80).output
        listed = text[text.index("Commands"):].splitlines()[1:]
        listed = listed[:next(i for i, line in enumerate(listed) if line.startswith("╰"))]
        names = [line[2:].split()[0] for line in listed if line[2:3].strip()]
        assert sorted(names) == sorted(group.commands), (words, listed)
        assert len(listed) == len(group.commands), (words, "\n".join(listed))


def examples(command: Any) -> list[str]:
    """The example command lines of a page: after `Example:` or on the line after an
    `Example, ...:` line."""
    lines = inspect_lines(command.help or "")
    found = [line.split("Example: ", 1)[1] for line in lines if "Example: " in line]
    found += [b for a, b in zip(lines, lines[1:]) if a.startswith("Example,")]
    return found


def inspect_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


@pytest.mark.parametrize("page", PAGES, ids=ids)
def test_examples_are_one_line_and_parse(page) -> None:
    """Each example fits an 80-column page on one line, and its msexp command (before a
    pipe or `&&`) parses: its options exist and its values are valid."""
    words, command = page
    shown = examples(command)
    assert shown or hasattr(command, "commands"), words
    page_text = invoke(*words, "--help", width=80).output
    for example in shown:
        assert any(line.strip().endswith(example) for line in page_text.splitlines()), example
        argv = shlex.split(re.split(r" \| | && | > ", example)[0])
        assert argv[0] == "msexp"
        parse(argv[1:])


def parse(argv: list[str]) -> None:
    """Parse `msexp ARGV` as the CLI would, without running the command."""
    command: Any = typer.main.get_command(app)
    context = command.make_context("msexp", list(argv))
    while hasattr(command, "commands"):
        name, command, rest = command.resolve_command(context, context._protected_args
                                                      + context.args)
        context = command.make_context(name, rest, parent=context)


def test_a_closed_pipe_ends_the_command_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation: the error boundary reports BrokenPipeError as an unforeseen error."""
    def closed(*args: Any, **kwargs: Any) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr("msexp.cli.scaffold.console.print", closed)
    result = invoke("knobs")
    assert result.exit_code == 1 and "BrokenPipe" not in result.output, result.output


@pytest.mark.slow
def test_a_help_page_into_a_closed_pipe_ends_quietly(workdir: Path) -> None:
    """The reader leaves while the page is written (seen with `head`)."""
    for lines in (1, 5, 20, 60):
        line = shlex.join(msexp_cmd("schedule", "k8s-cronjob", "--help")) + f" | head -{lines}"
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                              timeout=120, env=_env(80))
        assert done.stderr == "", done.stderr


def _env(columns: int) -> dict[str, str]:
    import os

    return {**os.environ, "COLUMNS": str(columns)}
