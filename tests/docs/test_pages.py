"""The prose around the code blocks: links that lead somewhere, tables that stay whole,
and the Airflow → Tailrace imports table naming things that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tailrace.config import SETTING_NAMES, setting_variable

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def prose(page: Path) -> str:
    """The page without its code blocks (keeping line numbers)."""
    return CODE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for number, line in enumerate(prose(page).splitlines(), 1):
        for link in LINK.finditer(line):
            target = link["target"].split("#", 1)[0]
            is_url = re.match(r"[a-z][a-z0-9+.-]*:", target)
            if target and not is_url and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}:{number}: {link['target']}")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_is_split_by_a_blank_line(page: Path) -> None:
    lines = prose(page).splitlines()
    splits = [
        f"{page.relative_to(ROOT)}:{i + 1}"
        for i in range(2, len(lines))
        if lines[i].startswith("|")
        and not lines[i - 1].strip()
        and lines[i - 2].startswith("|")
        # A new table starts with its header and a |---| row.
        and not (i + 1 < len(lines) and re.match(r"^\|[ :|-]+\|\s*$", lines[i + 1]))
    ]
    assert splits == [], "a blank line inside a table ends it: the rest renders as text"


def resolve(dotted: str) -> object:
    """``tailrace.a.b``: a module, or an attribute of the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(dotted)


AIRFLOW_USERS = ROOT / "docs" / "airflow-users.md"
TAILRACE_NAME = re.compile(r"`(tailrace(?:\.\w+)*)`")


def test_every_tailrace_name_on_the_airflow_page_exists() -> None:
    missing = []
    for name in sorted(set(TAILRACE_NAME.findall(prose(AIRFLOW_USERS)))):
        try:
            resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    assert missing == []


def imports_table() -> list[tuple[str, str]]:
    text = prose(AIRFLOW_USERS)
    section = text[text.index("## Imports") : text.index("## What behaves the same")]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows[1:]]
    return [(airflow, ours) for airflow, ours in cells]


def airflow_names(cell: str) -> list[str]:
    """Classes and functions an Airflow cell lists: `Name`, `Name[Async]`, `from x import a, b`."""
    names = []
    for code in re.findall(r"`([^`]+)`", cell):
        if code.startswith("from "):
            names += [n.strip() for n in code.split(" import ", 1)[1].split(",")]
        elif match := re.fullmatch(r"([A-Z]\w*)(\[(\w+)\])?", code):
            names.append(match[1])
            if match[3]:
                names.append(match[1] + match[3])
    return names


def test_the_imports_table_names_what_each_tailrace_module_has() -> None:
    rows = imports_table()
    assert len(rows) > 10
    missing = []
    for airflow, ours in rows:
        named = TAILRACE_NAME.findall(ours) + re.findall(r"`from (tailrace[\w.]*) import", ours)
        modules = [resolve(m) for m in named]
        for name in airflow_names(airflow):
            if modules and not any(hasattr(module, name) for module in modules):
                missing.append(f"{name} (row: {airflow[:40]}…)")
    assert missing == []


def test_the_readme_settings_table_lists_every_setting() -> None:
    text = prose(ROOT / "README.md")
    section = text[text.index("## Configuration") : text.index("## Performance")]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    listed = {
        "home" if cells[0].strip() == "home" else cells[0].strip().strip("`") for cells in rows[1:]
    }
    assert listed == set(SETTING_NAMES)
    for cells in rows[1:]:
        name = cells[0].strip().strip("`")
        assert cells[1].strip() == f"`{setting_variable(name)}`", name
