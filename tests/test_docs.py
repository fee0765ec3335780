"""The documentation says what the code does: its runnable blocks run, its tables match the code."""

from __future__ import annotations

import configparser
import dataclasses
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import Backoff, ChildSpec, SupervisorSpec
from runtime import BatchSettings, BusServer, FlowControl, TopicSettings
from runtime.broker._staging import StagingLimits
from runtime.cli._main import _build_parser
from runtime.errors import InvalidSettingsError

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", re.DOTALL)
# Blocks that need a Redis topic: run against a redis-server of their own, once the bus has
# the backend (they read the server's URL from REDIS_URL).
RUNNABLE_ON_REDIS = re.compile(r"<!-- runnable: redis -->\n```python\n(.*?)```", re.DOTALL)
EXAMPLE_INCLUDE = re.compile(r'--8<-- "(examples/[^"]+\.py)"')


def runnable_blocks(marker: re.Pattern[str]) -> list[tuple[str, str]]:
    """(page:index, code) for every block ``marker`` finds."""
    blocks = []
    for page in PAGES:
        for index, code in enumerate(marker.findall(page.read_text(encoding="utf-8")), 1):
            blocks.append((f"{page.relative_to(DOCS)}:{index}", code))
    return blocks


BLOCKS = runnable_blocks(RUNNABLE)
REDIS_BLOCKS = runnable_blocks(RUNNABLE_ON_REDIS)


def _run_block(where: str, code: str, folder: Path, env: dict[str, str] | None = None) -> None:
    script = folder / "snippet.py"
    script.write_text(code, encoding="utf-8")

    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=folder, env=env)

    assert result.returncode == 0, f"{where}:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{where} should print what it did"


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_runnable_docs_block_runs(where: str, code: str, tmp_path: Path) -> None:
    _run_block(where, code, tmp_path)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this module's own on a free loopback port (skips without one)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    try:
        TopicSettings(backend="redis").validate()
    except InvalidSettingsError as exc:
        if exc.args and exc.args[0] == "backend":
            pytest.skip("this runtime has no redis backend")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:  # the server says when it accepts connections
            if "Ready to accept connections" in line:
                break
        else:
            pytest.fail("redis-server exited before it accepted connections")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(("where", "code"), REDIS_BLOCKS, ids=[where for where, _ in REDIS_BLOCKS])
def test_runnable_redis_docs_block_runs(where: str, code: str, tmp_path: Path, redis_url: str) -> None:
    _run_block(where, code, tmp_path, env={**os.environ, "REDIS_URL": redis_url})


def test_every_how_to_runs_its_code_in_the_suite() -> None:
    guides = sorted((DOCS / "how-to").glob("*.md"))

    untested = [page.name for page in guides
                if not RUNNABLE.search(page.read_text(encoding="utf-8"))
                and not RUNNABLE_ON_REDIS.search(page.read_text(encoding="utf-8"))
                and not EXAMPLE_INCLUDE.search(page.read_text(encoding="utf-8"))]

    assert len(guides) >= 6
    assert untested == []


def test_included_examples_exist() -> None:
    included = {name for page in PAGES for name in EXAMPLE_INCLUDE.findall(page.read_text(encoding="utf-8"))}

    missing = sorted(name for name in included if not (ROOT / name).is_file())

    assert included and missing == []


def test_getting_started_shows_the_readme_quickstart() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = re.search(r"```python\n(.*?)```", readme.split("## Quickstart", 1)[1], re.DOTALL)
    assert quickstart is not None

    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")

    assert quickstart.group(1) in RUNNABLE.findall(page)


def test_the_extras_table_lists_each_extra_of_setup_cfg_with_its_packages() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    extras = {name: sorted(re.split(r"[<>=!~;]", line.strip())[0]
                           for line in value.strip().splitlines())
              for name, value in config["options.extras_require"].items()}
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    table = page.split("| extra |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `([\w-]+)` \| ([^|]+) \|", table, re.MULTILINE))

    assert {name: sorted(re.findall(r"`([^`]+)`", cell)) for name, cell in rows.items()} == extras


def _default_cells(text: str, name: str) -> list[str]:
    """The default column of every table row of ``text`` whose first cell is ``name``."""
    return re.findall(rf"^\| `{re.escape(name)}` \| ([^|]+) \|", text, re.MULTILINE)


def _value_of(cell: str) -> Any:
    match = re.match(r"\s*`([^`]+)`", cell)
    if match is None:
        return cell.strip()
    # The cell is a literal expression, or a settings object built with its defaults.
    return eval(match.group(1), {"__builtins__": {}}, {"StagingLimits": StagingLimits})


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return "required"


@pytest.mark.parametrize("settings", [TopicSettings, BatchSettings, FlowControl, ChildSpec,
                                      SupervisorSpec, Backoff], ids=lambda cls: cls.__name__)
def test_settings_page_gives_every_setting_with_its_default(settings: type) -> None:
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    fields = dataclasses.fields(settings)

    wrong = {}
    for field in fields:
        documented = [_value_of(cell) for cell in _default_cells(text, field.name)]
        if _field_default(field) not in documented:
            wrong[field.name] = (_field_default(field), documented)

    assert fields and wrong == {}


def test_settings_page_gives_every_broker_limit_with_its_default() -> None:
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    parameters = [p for p in inspect.signature(BusServer).parameters.values()
                  if p.name not in ("bus", "clock")]

    wrong = {}
    for parameter in parameters:
        default = "required" if parameter.default is inspect.Parameter.empty else parameter.default
        documented = [_value_of(cell) for cell in _default_cells(text, parameter.name)]
        if default not in documented:
            wrong[parameter.name] = (default, documented)

    assert len(parameters) >= 7 and wrong == {}


def test_cli_page_shows_every_command_and_option() -> None:
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    parser = _build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")

    missing = []
    for name, subparser in commands.choices.items():  # type: ignore[union-attr]
        if f"## `actorbus {name}`" not in text:
            missing.append(name)
        missing += [f"{name} {option}" for action in subparser._actions
                    for option in action.option_strings if option not in text]

    assert len(commands.choices) >= 5 and missing == []  # type: ignore[arg-type]


def test_benchmark_page_shows_the_committed_run() -> None:
    rows = json.loads((DOCS / "benchmarks.json").read_text(encoding="utf-8"))["results"]
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")

    charted = [row for row in rows if row["ratio"] is not None]
    absent = [row["name"] for row in charted
              if f"| `{row['name']}` |" not in page or f"| {row['ratio']:.2f} |" not in page]

    assert rows and absent == []
    assert (DOCS / "img" / "ratios.svg").is_file()


DEVELOPMENT_TALK = [
    (re.compile(r"\b[Ss]top \d+\b"), "an internal stop number"),
    (re.compile(r"\brun \d+\b|\brun #\d+"), "an internal run number"),
    (re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])"), "a commit hash"),
    (re.compile(r"/tmp/"), "a /tmp path"),
    (re.compile(r"\bissue \d+", re.IGNORECASE), "an issue number"),
]
USER_TEXT = [ROOT / "README.md", ROOT / "CHANGELOG.md", *PAGES]


@pytest.mark.parametrize("path", USER_TEXT, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_facing_text_does_not_speak_of_development(path: Path) -> None:
    text = path.read_text(encoding="utf-8")

    found = [f"{what}: {match.group(0)!r}" for pattern, what in DEVELOPMENT_TALK
             for match in pattern.finditer(text)]

    assert found == []


def _docstrings(path: Path) -> str:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    texts = [ast.get_docstring(node) or "" for node in ast.walk(tree)
             if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    return "\n".join(texts)


CLEANED = sorted([*(ROOT / "actors").rglob("*.py"), *(ROOT / "runtime" / "cli").rglob("*.py"),
                  *(ROOT / "benchmarks").rglob("*.py")])


@pytest.mark.parametrize("path", CLEANED, ids=lambda p: str(p.relative_to(ROOT)))
def test_docstrings_do_not_speak_of_development(path: Path) -> None:
    text = _docstrings(path)

    found = [f"{what}: {match.group(0)!r}" for pattern, what in DEVELOPMENT_TALK
             for match in pattern.finditer(text)]

    assert found == []


def test_every_test_the_reliability_page_cites_exists() -> None:
    text = (DOCS / "reliability.md").read_text(encoding="utf-8")
    defined = {(path.name, name) for path in (ROOT / "tests").rglob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE)}
    cited = re.findall(r"`(?:tests/[\w/]+/)?(test_\w+\.py)::(test_\w+)`", text)

    missing = sorted(f"{file}::{name}" for file, name in cited if (file, name) not in defined)

    assert len(cited) >= 20 and missing == []
