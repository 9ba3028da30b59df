"""The floors contract (pyproject.toml, import-linter ``layers``) holds for
the tree as it is, and breaks on an upward import: ``make lint`` runs it."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[2]


def _floors() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (floors,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return floors


def _check(graph: grimp.ImportGraph) -> bool:
    floors = _floors()
    options = {k: v for k, v in floors.items() if k not in ("name", "type")}
    options["exhaustive"] = str(options.get("exhaustive", False)).lower()
    contract = LayersContract(floors["name"], {"root_packages": ["logstrand"]}, options)
    return bool(contract.check(graph, verbose=False).kept)


def _house() -> Any:
    spec = importlib.util.spec_from_file_location("house", ROOT / "tools" / "house.py")
    assert spec is not None
    assert spec.loader is not None
    house = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(house)
    return house


@pytest.fixture
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("logstrand")  # cached by grimp: built once a run


def test_the_tree_keeps_its_floors(graph: grimp.ImportGraph) -> None:
    assert _check(graph)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("logstrand.errors", "logstrand.wire"),  # a ground-floor module reaching up
        ("logstrand.client._async", "logstrand.storage._node"),  # the client into the node
        ("logstrand.kafka._data", "logstrand.spark._source"),  # sideways on one floor
    ],
)
def test_an_upward_or_sideways_import_breaks_them(
    graph: grimp.ImportGraph, importer: str, imported: str
) -> None:
    graph.add_import(importer=importer, imported=imported)
    assert not _check(graph)


def test_the_architecture_page_shows_the_floors_as_they_are() -> None:
    """docs/architecture.md's floors are ``tools/house.py --table``'s: made
    from the contract and the code, never written by hand."""
    house = _house()
    page = (ROOT / "docs" / "architecture.md").read_text()
    begin = page.index("<!-- floors: begin")
    shown = page[page.index("\n", begin) + 1 : page.index("<!-- floors: end -->")]
    assert shown == house.table(ROOT), "run: python tools/house.py --table"


def test_a_new_private_import_across_packages_is_a_breach(tmp_path: Path) -> None:
    """``tools/house.py`` (make lint) refuses an import of another package's
    private module that its list does not hold, and a listed one the code
    no longer has; the tree as it is passes."""
    house = _house()
    assert house.private_breaches(ROOT / "logstrand") == []
    tree = tmp_path / "logstrand"
    (tree / "kafka").mkdir(parents=True)
    (tree / "client").mkdir()
    (tree / "kafka" / "_x.py").write_text(
        "from ..client._reader import ReadStream\n"
        "from ..client import _lazy\n"
        "from ..client import connect\n"
    )
    (tree / "client" / "_y.py").write_text("from ._reader import ReadStream\n")
    found = house.private_imports(tree)
    assert found == {
        "logstrand.kafka._x -> logstrand.client._reader",
        "logstrand.kafka._x -> logstrand.client._lazy",
    }
