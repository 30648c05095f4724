"""Every code block in README.md and docs/ is checked, so the docs cannot drift from the code.

- A ``python`` block runs: it is a DAG file (free of undefined names) whose every DAG
  must succeed. A block that is an excerpt says where from, with
  ``<!-- from: path -->`` on the line before it (a path relative to the page, to a file
  that ``test_examples.py`` runs); it must then match that file, ``...`` lines marking
  what it leaves out.
- A ``diff`` block shows a port: its ``+`` and context lines are the new file, run as above.
- A ``python`` block after ``<!-- pytest -->`` is a test module, and one after
  ``<!-- file: path -->`` a file beside it (a DAG file, a ``conftest.py``): a page's
  marked blocks are written into one folder, as a project, and pytest runs it there; every
  test must pass.
- ``bash`` and ``console`` blocks: each ``tailrace`` command they show is parsed by the
  CLI itself — the commands, options and arguments must exist, and the DAG and task ids
  they name must be in the examples (``$`` marks the commands of a ``console`` block; the
  other lines are output).
- ``json`` and ``yaml`` blocks parse; a ``toml`` block is a config file Tailrace loads.
- Unmarked blocks (plain text, output) and ``mermaid`` diagrams are not code.

A block with any other language fails until this file learns to check it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from sqlalchemy import Engine

from tailrace.cli import app
from tailrace.config import EXAMPLE_DAGS_FOLDER, load_settings
from tailrace.dagfiles import list_dag_files, load_dag_file
from tailrace.testing import DagHarness

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Excerpts must come from files that test_examples.py runs to success.
RUN_FOLDERS = (ROOT / "docs" / "examples", EXAMPLE_DAGS_FOLDER)
NOT_CODE = {"", "text", "mermaid"}
CHECKED = {"python", "diff", "bash", "console", "json", "yaml", "toml"} | NOT_CODE

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)[^\n]*$")
FROM = re.compile(r"^\s*<!--\s*from:\s*(?P<path>\S+)\s*-->\s*$")
ROLE = re.compile(r"^\s*<!--\s*(?:(?P<pytest>pytest)|file:\s*(?P<file>\S+))\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    source: Path | None  # the file it is an excerpt of
    # "pytest" (a test module) or the path of a file the page's tests use, else None.
    role: str | None = None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip() == fence),
            None,
        )
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: the block never closes"
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = FROM.match(before)
        source = (page.parent / marker["path"]).resolve() if marker else None
        role_marker = ROLE.match(before)
        role = (role_marker["file"] or "pytest") if role_marker else None
        yield Block(page, i + 1, opening["lang"], "\n".join(body) + "\n", source, role)
        i = end + 1


BLOCKS = [block for page in PAGES for block in read_blocks(page)]


def blocks(*langs: str) -> list[Any]:  # pytest.param()s
    return [pytest.param(b, id=str(b)) for b in BLOCKS if b.lang in langs]


def test_every_block_is_one_this_file_checks() -> None:
    unchecked = [f"{b} ({b.lang})" for b in BLOCKS if b.lang not in CHECKED]
    assert unchecked == [], "teach tests/docs/test_code_blocks.py to check these blocks"
    assert len(blocks("python")) > 20  # the collector found the docs' blocks


def test_from_markers_sit_on_python_blocks() -> None:
    misplaced = [str(b) for b in BLOCKS if b.source is not None and b.lang != "python"]
    assert misplaced == []


# -- Python ------------------------------------------------------------------------------


def excerpt_segments(text: str) -> list[list[str]]:
    """The block's runs of lines between ``...`` lines, each dedented, blank ends dropped."""
    segments: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == "...":
            segments.append([])
        else:
            segments[-1].append(line)
    out = []
    for segment in segments:
        lines = textwrap.dedent("\n".join(segment)).strip("\n").splitlines()
        if lines:
            out.append(lines)
    return out


def find_segment(segment: list[str], lines: list[str], start: int) -> int | None:
    """Where ``segment`` ends in ``lines`` at or after ``start``, at any one indentation."""
    for i in range(start, len(lines) - len(segment) + 1):
        first = lines[i]
        if not first.endswith(segment[0]) or first[: len(first) - len(segment[0])].strip():
            continue
        prefix = first[: len(first) - len(segment[0])]
        if all(
            lines[i + j] == (prefix + want if want else "")
            or (not want and not lines[i + j].strip())
            for j, want in enumerate(segment)
        ):
            return i + len(segment)
    return None


def check_excerpt(block: Block, source: Path) -> None:
    assert source.is_file(), f"{block}: <!-- from: --> names {source}, which does not exist"
    assert any(source.is_relative_to(folder) for folder in RUN_FOLDERS), (
        f"{block}: {source} is not in docs/examples or the bundled examples, which "
        "test_examples.py runs"
    )
    lines = [line.rstrip() for line in source.read_text().splitlines()]
    at = 0
    for segment in excerpt_segments(block.text):
        found = find_segment([line.rstrip() for line in segment], lines, at)
        assert found is not None, (
            f"{block}: these lines are not in {source.relative_to(ROOT)} (after line {at}); "
            "copy the file's lines, with '...' lines for what is left out:\n" + "\n".join(segment)
        )
        at = found


def run_as_dag_file(block: Block, code: str, engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    path = folder / f"block_{block.line}_dag.py"
    path.write_text(code)
    # Names used only inside functions never run at import: pyflakes finds them.
    lint = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--no-cache",
            "--quiet",
            "--select",
            "E9,F63,F7,F82",
            "--output-format",
            "concise",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, f"{block}:\n{lint.stdout}{lint.stderr}"
    loaded = load_dag_file(str(path))
    assert loaded.errors == [], f"{block} does not import: {loaded.errors[0].message}"
    assert loaded.dags, (
        f"{block} defines no DAG, so nothing of it runs: make it a DAG file, or an excerpt "
        "of one (<!-- from: path -->)"
    )
    with DagHarness(engine, folder, log_folder=tmp_path / "logs") as harness:
        report = harness.parse()
        assert report.import_errors == 0
        runs = {dag_id: harness.trigger(dag_id) for dag_id in loaded.dags}
        failed = {
            dag_id: harness.summary(pk)
            for dag_id, pk in runs.items()
            if harness.run(pk, timeout=120)["state"] != "success"
        }
        assert failed == {}, f"{block}: DAGs that did not succeed"


@pytest.mark.parametrize("db_backend", ["sqlite"])
@pytest.mark.parametrize("block", blocks("python"))
def test_python_block_runs(block: Block, engine: Engine, tmp_path: Path) -> None:
    if block.role is not None:
        pytest.skip("runs with its page's tests (test_pytest_blocks_pass)")
    if block.source is not None:
        check_excerpt(block, block.source)
    else:
        run_as_dag_file(block, block.text, engine, tmp_path)


PYTEST_PAGES = sorted({b.page for b in BLOCKS if b.role is not None})


def test_role_markers_sit_on_python_blocks() -> None:
    misplaced = [str(b) for b in BLOCKS if b.role is not None and b.lang != "python"]
    assert misplaced == []
    assert PYTEST_PAGES, "the collector found no <!-- pytest --> blocks"


@pytest.mark.parametrize("page", PYTEST_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTEST_PAGES])
def test_pytest_blocks_pass(page: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    marked = [b for b in BLOCKS if b.page == page and b.role is not None]
    assert any(b.role == "pytest" for b in marked), f"{page}: files but no <!-- pytest -->"
    for block in marked:
        name = f"test_block_{block.line}.py" if block.role == "pytest" else str(block.role)
        target = project / name
        target.parent.mkdir(parents=True, exist_ok=True)
        assert not target.exists(), f"{block}: a second block writes {name}"
        target.write_text(block.text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "."],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    passed = re.search(r"(\d+) passed", done.stdout)
    tests = sum(b.text.count("\ndef test_") + b.text.startswith("def test_") for b in marked)
    assert done.returncode == 0, f"{page.relative_to(ROOT)}: its tests failed:\n{done.stdout}"
    assert passed is not None and int(passed[1]) == tests, done.stdout


@pytest.mark.parametrize("db_backend", ["sqlite"])
@pytest.mark.parametrize("block", blocks("diff"))
def test_the_new_side_of_a_diff_block_runs(block: Block, engine: Engine, tmp_path: Path) -> None:
    new = [line[1:] for line in block.text.splitlines() if line[:1] in ("+", " ")]
    assert any(line[:1] == "+" for line in block.text.splitlines()), f"{block}: no + lines"
    run_as_dag_file(block, "\n".join(new) + "\n", engine, tmp_path)


# -- shell -------------------------------------------------------------------------------

SEPARATORS = {"|", "||", "&", "&&", ";", "(", ")", "$(", "`"}
ROOT_COMMAND = typer.main.get_command(app)


def logical_lines(block: Block) -> Iterator[str]:
    pending = ""
    for raw in block.text.splitlines():
        line = raw
        if block.lang == "console":
            if not (line.startswith("$ ") or pending):
                continue  # output
            line = line.removeprefix("$ ")
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""


def tailrace_commands(line: str) -> Iterator[list[str]]:
    """The argument lists of the ``tailrace`` commands a shell line runs."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;()`")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    for i, token in enumerate(tokens):
        at_command = i == 0 or tokens[i - 1] in SEPARATORS or "=" in tokens[i - 1]
        is_path = token.endswith("bin/tailrace")
        if (token == "tailrace" and at_command) or is_path:
            args = []
            for arg in tokens[i + 1 :]:
                if arg in SEPARATORS:
                    break
                args.append(arg)
            yield args


def parse_command_line(args: list[str]) -> dict[str, Any]:
    """Parse ``tailrace <args>`` as the CLI would, without running it: the parameters of
    every level, or AssertionError naming what does not exist or does not parse."""
    command: Any = ROOT_COMMAND
    params: dict[str, Any] = {}
    try:
        ctx = command.make_context("tailrace", list(args))
        while hasattr(command, "list_commands"):  # a group: resolve the subcommand
            rest = [*ctx._protected_args, *ctx.args]
            assert rest, f"'{ctx.command_path}' needs a subcommand"
            name, *rest = rest
            command = command.get_command(ctx, name)
            assert command is not None, f"there is no command '{ctx.command_path} {name}'"
            # Options that would prompt (a password) get a value instead.
            prompted = {p.name: "x" for p in command.params if getattr(p, "prompt", None)}
            params.update(ctx.params)
            ctx = command.make_context(name, rest, parent=ctx, default_map=prompted)
        params.update(ctx.params)
    except typer.Exit:  # --help
        pass
    except Exception as exc:
        if not hasattr(exc, "format_message"):
            raise
        raise AssertionError(exc.format_message()) from None
    return params


def example_tasks(folder: Path) -> dict[str, set[str]]:
    """DAG id -> task ids of the DAG files in ``folder``."""
    return {
        dag_id: set(dag.task_dict)
        for path in list_dag_files(str(folder))
        for dag_id, dag in load_dag_file(path).dags.items()
    }


# Commands in the docs run against the bundled examples (standalone loads them) or,
# with --dags-folder docs/examples, against the docs' own.
EXAMPLES = {
    "bundled": example_tasks(EXAMPLE_DAGS_FOLDER),
    "docs/examples": example_tasks(ROOT / "docs" / "examples"),
}


def check_ids(params: dict[str, Any]) -> None:
    """A DAG id and task ids a command names exist in the examples it runs against."""
    dag_id = params.get("dag_id")
    if not isinstance(dag_id, str):
        return
    folder = params.get("dags_folder")
    # Without --dags-folder a command runs against a standalone that loaded the examples
    # and, beside them, your DAGs (the README copies docs/examples/my_dag.py there).
    dags = (
        EXAMPLES["docs/examples"]
        if folder is not None
        else {**EXAMPLES["docs/examples"], **EXAMPLES["bundled"]}
    )
    assert dag_id in dags, f"no DAG '{dag_id}' in the {'docs' if folder else 'bundled'} examples"
    named = params.get("task_id") or []
    for task_id in [named] if isinstance(named, str) else named:
        assert task_id in dags[dag_id], f"DAG '{dag_id}' has no task '{task_id}'"


def test_the_command_check_catches_what_does_not_exist() -> None:
    parse_command_line(["--dags-folder", "dags", "dags", "trigger", "d", "--conf", "{}"])
    for wrong in (
        ["dags", "trigger"],  # no DAG id
        ["dags", "trigger", "d", "--wiat"],
        ["dags", "trggr", "d"],
        ["tasks", "mark", "d", "r", "t", "--sate", "success"],
    ):
        with pytest.raises(AssertionError):
            parse_command_line(wrong)
    for wrong in (
        ["dags", "trigger", "example_nothing"],
        ["streams", "show", "example_streaming", "nothing"],
        ["--dags-folder", "docs/examples", "dags", "test", "example_streaming"],
    ):
        with pytest.raises(AssertionError):
            check_ids(parse_command_line(wrong))


def benchmark_commands(line: str) -> Iterator[tuple[str, list[str]]]:
    """``python -m benchmarks.<name> <args>`` in a shell line: (module, args)."""
    tokens = shlex.split(line, comments=True)
    for i, token in enumerate(tokens[:-2]):
        if Path(token).name.startswith("python") and tokens[i + 1] == "-m":
            module = tokens[i + 2]
            if module.startswith("benchmarks."):
                yield module, tokens[i + 3 :]


class Parsed(Exception):  # not an error: the arguments parsed, and the run stops there
    pass


def parse_benchmark_args(
    module: str,
    args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Parse a benchmark's arguments with its own parser, stopping before it runs."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *a: Any, **kw: Any) -> Any:
        raise Parsed(parse_args(self, *a, **kw))

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        m.syspath_prepend(str(ROOT))  # benchmarks/ is not an installed package
        try:
            importlib.import_module(module).main(args)
        except Parsed:
            return
        except SystemExit:
            raise AssertionError(capsys.readouterr().err.strip().splitlines()[-1]) from None
    raise AssertionError(f"{module}.main did not parse its arguments with argparse")


def test_the_shell_collectors_find_the_docs_commands() -> None:
    shell = [b for b in BLOCKS if b.lang in ("bash", "console")]
    lines = [line for block in shell for line in logical_lines(block)]
    assert sum(1 for line in lines for _ in tailrace_commands(line)) >= 40
    assert sum(1 for line in lines for _ in benchmark_commands(line)) > 15


@pytest.mark.parametrize("block", blocks("bash", "console"))
def test_shell_block_benchmark_commands_parse(
    block: Block, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    problems = []
    for line in logical_lines(block):
        for module, args in benchmark_commands(line):
            try:
                parse_benchmark_args(module, args, monkeypatch, capsys)
            except AssertionError as exc:
                problems.append(f"python -m {module} {' '.join(args)}: {exc}")
    assert problems == [], f"{block}"


def test_the_benchmark_check_catches_an_option_that_does_not_exist(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parse_benchmark_args(
        "benchmarks.bench_streaming", ["hops", "--pages", "3"], monkeypatch, capsys
    )
    with pytest.raises(AssertionError, match="--pagez"):
        parse_benchmark_args(
            "benchmarks.bench_streaming", ["hops", "--pagez", "3"], monkeypatch, capsys
        )


@pytest.mark.parametrize("block", blocks("bash", "console"))
def test_shell_block_commands_exist(block: Block) -> None:
    problems = []
    for line in logical_lines(block):
        for args in tailrace_commands(line):
            try:
                check_ids(parse_command_line(args))
            except AssertionError as exc:
                problems.append(f"tailrace {' '.join(args)}: {exc}")
    assert problems == [], f"{block}"


# -- data --------------------------------------------------------------------------------


@pytest.mark.parametrize("block", blocks("json"))
def test_json_block_parses(block: Block) -> None:
    json.loads(block.text)


@pytest.mark.parametrize("block", blocks("yaml"))
def test_yaml_block_parses(block: Block) -> None:
    import yaml

    yaml.safe_load(block.text)


@pytest.mark.parametrize("block", blocks("toml"))
def test_toml_block_is_a_config_file_tailrace_accepts(block: Block, tmp_path: Path) -> None:
    config = tmp_path / "tailrace.toml"
    config.write_text(block.text)
    load_settings({"TAILRACE_CONFIG": str(config), "HOME": str(tmp_path)})
