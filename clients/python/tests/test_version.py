"""The package reports the extension's version, as installed (no cluster)."""

import re
from importlib.metadata import version
from pathlib import Path

import aedb_queue


def extension_version() -> str:
    manifest = Path(__file__).resolve().parents[3] / "Cargo.toml"
    package = manifest.read_text().split("[package]", 1)[1]
    return re.search(r'^version *= *"(.*)"', package, re.M).group(1)


def test_version_is_the_extensions():
    assert aedb_queue.__version__ == extension_version()
    assert version("aedb_queue") == aedb_queue.__version__
