"""scripts/doc-paths.py's item check against this repository's own code: a
quoted Rust path that names an item ours defines passes, a planted wrong one
(a renamed method, a constant that does not exist) is caught, and another
crate's path is left alone."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "doc-paths.py"
spec = importlib.util.spec_from_file_location("doc_paths", SCRIPT)
doc_paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc_paths)
SOURCES = doc_paths.rust_sources()


@pytest.mark.parametrize(
    "path",
    ["drain::throttler::TICK", "Running::update_blocks", "surge_bbos::policy::DrainPolicyKind", "stages::CACHES"],
)
def test_an_item_our_code_defines_passes(path):
    assert not doc_paths.missing_item(path, SOURCES)


@pytest.mark.parametrize(
    "path",
    ["drain::throttler::NO_SUCH_TICK", "Running::update_block", "stages::NO_SUCH_LIST", "SchedulingPoint::no_such_method"],
)
def test_a_planted_wrong_item_is_reported_missing(path):
    assert doc_paths.missing_item(path, SOURCES)


def test_another_crates_path_is_not_checked():
    assert not doc_paths.missing_item("std::fs::read_to_string", SOURCES)
