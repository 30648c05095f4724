"""Airflow 3's authoring API next to Tailrace's: every public name and parameter, and
whether Tailrace supports or refuses it.

Airflow's side is read from the installed ``apache-airflow-task-sdk`` and
``apache-airflow-providers-standard`` packages — their source's syntax trees, so neither
needs Airflow's core or its dependencies installed. Tailrace's side comes from the SDK
itself: its exports and signatures, and the refusal tables in ``tailrace.sdk._callbacks``.

``python -m tailrace.testing.airflow_compat [--check]`` writes (or checks)
docs/airflow-compatibility.md; tests/docs/test_airflow_compatibility.py fails when an
Airflow name or parameter has neither status, or the page is stale.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tailrace
import tailrace.sdk as sdk
from tailrace.sdk import _callbacks
from tailrace.sdk._decorators import TaskDecoratorCollection

DOC = Path(__file__).resolve().parents[3] / "docs" / "airflow-compatibility.md"
PACKAGES = "apache-airflow-task-sdk==1.3.2 apache-airflow-providers-standard==1.21.0"

# Airflow classes whose parameters are listed, by the file that defines them.
BASE_CLASSES = {
    "DAG": "sdk/definitions/dag.py",
    "BaseOperator": "sdk/bases/operator.py",
    "BaseSensorOperator": "sdk/bases/sensor.py",
}


@dataclass(frozen=True)
class Entry:
    section: str  # "name" or the class whose parameter this is
    name: str
    status: str | None  # "supported", "refused", or None: neither (a gap)
    note: str = ""


def airflow_root() -> Path | None:
    """Where the ``airflow`` namespace package is installed (None: it is not)."""
    if importlib.util.find_spec("airflow") is None:
        return None
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations is not None
    for location in spec.submodule_search_locations:
        if (Path(location) / "sdk" / "__init__.py").exists():
            return Path(location)
    return None


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _class(path: Path, name: str) -> ast.ClassDef:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"no class {name} in {path}")


def init_parameters(path: Path, name: str) -> list[str]:
    """The keyword parameters of a class's own ``__init__`` (of an attrs class: its init
    fields, by their aliases)."""
    node = _class(path, name)
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            return [
                a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self"
            ]
    fields = []
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        annotation = item.annotation
        if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") in (
            "ClassVar",
        ):
            continue
        field, alias, init = item.target.id, None, True
        if isinstance(item.value, ast.Call):
            for keyword in item.value.keywords:
                value = keyword.value
                if keyword.arg == "init" and isinstance(value, ast.Constant):
                    init = bool(value.value)
                if keyword.arg == "alias" and isinstance(value, ast.Constant):
                    alias = str(value.value)
        if init:
            fields.append(alias or field.lstrip("_"))
    return fields


def sdk_names(root: Path) -> list[str]:
    for node in _tree(root / "sdk" / "__init__.py").body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            assert isinstance(node.value, ast.List | ast.Tuple)
            return [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
    raise LookupError("airflow.sdk has no __all__")


def provider_classes(root: Path) -> dict[str, Path]:
    """The standard provider's public operator and sensor classes, by name."""
    found: dict[str, Path] = {}
    for folder in ("operators", "sensors"):
        for path in sorted((root / "providers" / "standard" / folder).glob("*.py")):
            if path.name.startswith("_"):
                continue
            for node in _tree(path).body:
                if (
                    isinstance(node, ast.ClassDef)
                    and not node.name.startswith("_")
                    and re.search(r"(Operator|Sensor)$", node.name)
                ):
                    found[node.name] = path
    return found


def task_decorators(root: Path) -> list[str]:
    """``task.<name>`` decorators the standard provider registers."""
    text = (root / "providers" / "standard" / "get_provider_info.py").read_text()
    block = text[text.index('"task-decorators"') :]
    block = block[: block.index("]")]
    return sorted(set(re.findall(r'"name":\s*"([a-z_]+)"', block)))


def _accepted(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        init = inspect.unwrap(init)
        names |= {
            p.name
            for p in inspect.signature(init).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
    names.discard("self")
    return names


_DEFAULT_ONLY = {
    "DAG": _callbacks._IGNORED_DAG_ARGS,
    "BaseOperator": _callbacks._IGNORED_TASK_ARGS,
}


def _name_entry(name: str) -> Entry:
    if name in sdk.__all__ or (name.startswith("__") and hasattr(tailrace, name)):
        return Entry("name", name, "supported", f"`tailrace.{name}`")
    if name.startswith("task."):
        attr = name.removeprefix("task.")
        if attr in vars(TaskDecoratorCollection) or attr == "python":
            return Entry("name", name, "supported", f"`@{name}`")
    hint = _callbacks.REFUSED_NAMES.get(name)
    if hint is not None:
        return Entry("name", name, "refused", hint)
    return Entry("name", name, None)


def _param_entry(owner: str, cls: type, name: str) -> Entry:
    if name in _accepted(cls):
        rule = _DEFAULT_ONLY.get(owner, {}).get(name)
        if rule is not None:
            return Entry(owner, name, "refused", f"Accepted with its default only. {rule[1]}")
        hint = _callbacks.DEFAULT_ONLY_ARGS.get(owner, {}).get(name)
        if hint is not None:
            return Entry(owner, name, "refused", f"Accepted with its default only. {hint}")
        return Entry(owner, name, "supported")
    hint = _callbacks.REFUSED_ARGS.get(owner, {}).get(name)
    if hint is not None:
        return Entry(owner, name, "refused", hint)
    return Entry(owner, name, None)


def entries(root: Path) -> Iterator[Entry]:
    """Every Airflow name and parameter with Tailrace's status."""
    providers = provider_classes(root)
    for name in sdk_names(root):
        yield _name_entry(name)
    for name in sorted(providers):
        yield _name_entry(name)
    for name in task_decorators(root):
        yield _name_entry(f"task.{name}")
    classes: dict[str, Path] = {k: root / v for k, v in BASE_CLASSES.items()}
    classes.update((name, path) for name, path in sorted(providers.items()) if name in sdk.__all__)
    for owner, path in classes.items():
        cls = getattr(sdk, owner)
        for param in init_parameters(path, owner):
            yield _param_entry(owner, cls, param)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(all_entries: Sequence[Entry]) -> str:
    names = [e for e in all_entries if e.section == "name"]
    owners = list(dict.fromkeys(e.section for e in all_entries if e.section != "name"))
    supported = sum(e.status == "supported" for e in all_entries)
    refused = sum(e.status == "refused" for e in all_entries)
    out = [
        "# Airflow 3 compatibility reference",
        "",
        "Every public name and parameter of Airflow 3's authoring API — `airflow.sdk`'s",
        "`__all__`, the standard provider's operators, sensors and `task.<name>` decorators,",
        "and the parameters of `DAG` (and `@dag`), `BaseOperator` (and `@task`),",
        "`BaseSensorOperator` and of each standard operator Tailrace has — with Tailrace's",
        f"status: {supported} supported, {refused} refused. A refused name raises",
        "`UnsupportedNameError` (an `ImportError`) where it is imported or used; a refused",
        "argument raises `UnsupportedArgumentError` naming the DAG, the task and the argument",
        "when the DAG file is parsed. Either says what to do instead, as the notes below do.",
        "Nothing is accepted and ignored.",
        "",
        f"Read from {PACKAGES.replace(' ', ' and ')} by `tailrace.testing.airflow_compat`;",
        "`tests/docs/test_airflow_compatibility.py` fails when a name or parameter of those",
        "packages is neither supported nor refused, when a refusal does not raise, or when",
        "this page is stale (`python -m tailrace.testing.airflow_compat` rewrites it).",
        "How to port a DAG: [airflow-users.md](airflow-users.md).",
        "",
        "## Names",
        "",
        "| Airflow name | status | Tailrace / what to do |",
        "|---|---|---|",
    ]
    out += [f"| `{e.name}` | {e.status} | {_cell(e.note)} |" for e in names]
    for owner in owners:
        out += [
            "",
            f"## Parameters of `{owner}`",
            "",
            "| parameter | status | note |",
            "|---|---|---|",
        ]
        out += [
            f"| `{e.name}` | {e.status} | {_cell(e.note)} |"
            for e in all_entries
            if e.section == owner
        ]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Fail if the page is stale.")
    args = parser.parse_args(argv)
    root = airflow_root()
    if root is None:
        print(f"install {PACKAGES} (scripts/install-airflow-sdk)", file=sys.stderr)
        return 2
    found = list(entries(root))
    gaps = [f"{e.section}: {e.name}" for e in found if e.status is None]
    if gaps:
        print("neither supported nor refused:\n  " + "\n  ".join(gaps), file=sys.stderr)
        return 1
    text = render(found)
    if args.check:
        return 0 if DOC.read_text() == text else 1
    DOC.write_text(text)
    return 0


def _main_entry() -> Any:  # pragma: no cover - the module's command line
    raise SystemExit(main())


if __name__ == "__main__":
    _main_entry()
