"""docs/cli.md documents every command and option the CLI has, and it and the README's
CLI table name no other."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from tailrace.cli import app

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
ROOT_COMMAND = typer.main.get_command(app)


def leaf_commands() -> Iterator[tuple[str, Any]]:
    """("dags trigger", command) for every command that is not a group."""

    def walk(group: Any, ctx: typer.Context, path: list[str]) -> Iterator[tuple[str, Any]]:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            sub = typer.Context(command, info_name=name, parent=ctx)
            if hasattr(command, "list_commands"):
                yield from walk(command, sub, [*path, name])
            else:
                yield " ".join([*path, name]), command

    yield from walk(ROOT_COMMAND, typer.Context(ROOT_COMMAND, info_name="tailrace"), [])


def entries() -> list[tuple[str, str]]:
    """(signature, text): each heading with its section, each table row of commands."""
    found = []
    for section in re.split(r"^(?=#{2,3} )", CLI_MD.read_text(), flags=re.M):
        heading = section.split("\n", 1)[0]
        found += [(sig, section) for sig in re.findall(r"`([^`]+)`", heading)]
        found += re.findall(r"^\| `([^`]+)` (\|.*)$", section, flags=re.M)
    return [(sig.removeprefix("tailrace "), body) for sig, body in found]


def options(command: Any) -> list[list[str]]:
    """Each option's names (``["--yes", "-y"]``), ``--help`` left out."""
    named = [p.opts + p.secondary_opts for p in command.params if p.opts[0].startswith("-")]
    return [names for names in named if "--help" not in names]


def split_signature(signature: str) -> tuple[str, list[str]]:
    """``dags trigger DAG_ID [--wait]`` -> ("dags trigger", ["DAG_ID", "[--wait]"])."""
    words, path = signature.split(), []
    while words and any(
        c == " ".join([*path, words[0]]) or c.startswith(" ".join([*path, words[0]]) + " ")
        for c in COMMANDS
    ):
        path.append(words.pop(0))
    return " ".join(path), words


# "" is the root: its options are the global ones.
COMMANDS = {"": ROOT_COMMAND, **dict(leaf_commands())}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_and_option_is_documented(name: str) -> None:
    text = "".join(body for sig, body in entries() if split_signature(sig)[0] == name)
    if not name:
        text = CLI_MD.read_text().split("\n## ", 1)[0]  # the global options, at the top
    assert text, f"docs/cli.md has no heading or table row for `{name}`"
    undocumented = [
        names[0]
        for names in options(COMMANDS[name])
        if not any(re.search(re.escape(n) + r"\b", text) for n in names)
    ]
    assert undocumented == [], f"`tailrace {name}`: options docs/cli.md does not mention"


def readme_rows() -> list[str]:
    """The signatures in the README's CLI table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## CLI") : text.index("## Configuration")]
    rows = re.findall(r"^\| `tailrace ([^`]+)`", table, flags=re.M)
    return [sig.replace("\\|", "|") for sig in rows]


def test_every_documented_signature_names_real_commands_and_options() -> None:
    wrong = []
    signatures = [sig for sig, _ in entries()] + readme_rows()
    assert len(readme_rows()) > 15
    for signature in signatures:
        name, words = split_signature(signature)
        if not name and not words[0].startswith("-"):  # "-": a global option
            wrong.append(f"`{signature}`: no such command")
        if name not in COMMANDS:
            continue  # a group's heading, such as `tailrace dags`
        known = {n for names in options(COMMANDS[name]) for n in names}
        named = {
            re.split(r"[\]=.]", w.lstrip("["))[0] for w in words if w.lstrip("[").startswith("-")
        }
        if unknown := named - known:
            wrong.append(f"`{signature}`: {sorted(unknown)} are not options of `{name}`")
    assert len(entries()) > 25
    assert wrong == []


def test_the_check_sees_what_is_not_there() -> None:
    name, words = split_signature("dags trigger DAG_ID [--wiat]")
    assert (name, words) == ("dags trigger", ["DAG_ID", "[--wiat]"])
    assert "--wiat" not in {n for names in options(COMMANDS[name]) for n in names}
    assert "--wait" in {n for names in options(COMMANDS[name]) for n in names}
