"""`python -m build` gives a wheel users can type-check against and an sdist
whose test suite runs from its unpacked tree.

The sdist and the wheel (built from that sdist, as `python -m build` does)
are made once per module, offline (`--no-isolation`: the test extra brings
`build`, `setuptools` and `trove-classifiers`), from a copy of the checkout,
so nothing is written into the working tree.
"""

from __future__ import annotations

import email.message
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import trove_classifiers
from paths import ROOT
from readme import readme_repo_paths

import trio_agent

REPO_URL = "https://github.com/trio-agent/trio-agent"

# What never belongs in an sdist: environments, caches, build output.
JUNK = re.compile(
    r"(^|/)(\.git|\.venv|venv|build|dist|[^/]*\.egg-info|__pycache__|\.hypothesis"
    r"|\.pytest_cache|\.mypy_cache|\.ruff_cache)(/|$)|\.py[cod]$"
)
# Tracked, but for the repository only.
NOT_SHIPPED = re.compile(r"^(\.gitignore|\.github/.*)$")


@dataclass(frozen=True)
class Dists:
    source: Path  # the copy of the checkout they were built from
    sdist: Path
    sdist_files: frozenset[str]  # paths inside the sdist's top directory
    wheel_files: frozenset[str]
    metadata: email.message.Message  # the wheel's METADATA
    license_text: str  # the wheel's copy of the license


def repository_files() -> list[str]:
    """What the sdist must hold: every file git tracks (outside the
    checkout, every file of the tree) except the repository's own."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")
        files = [name for name in listed if name and (ROOT / name).is_file()]
    else:
        files = []
        for directory, subdirectories, names in os.walk(ROOT):
            base = Path(directory).relative_to(ROOT)
            subdirectories[:] = [n for n in subdirectories if not JUNK.search(f"{base}/{n}")]
            files += [(base / name).as_posix() for name in names]
    return sorted(name for name in files if not JUNK.search(name) and not NOT_SHIPPED.match(name))


def _ignore_junk(directory: str, names: list[str]) -> set[str]:
    base = Path(directory).relative_to(ROOT).as_posix()
    top = {".git", ".venv", "build", "dist"} if base == "." else set()
    return top | {name for name in names if name.endswith(".egg-info")}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    # Caches are copied on purpose (and one of each planted): the manifest must leave them out.
    shutil.copytree(ROOT, source, ignore=_ignore_junk, symlinks=True)
    for planted in ("tests/.hypothesis/examples/x", "tests/__pycache__/x.cpython-311.pyc"):
        (source / planted).parent.mkdir(parents=True, exist_ok=True)
        (source / planted).write_text("")
    out = work / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: a loaded machine took minutes
        check=False,
        env={**os.environ, "VALIDATE_PYPROJECT_NO_NETWORK": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    with tarfile.open(sdist) as archive:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        sdist_files = frozenset(
            member.name.removeprefix(top) for member in archive.getmembers() if member.isfile()
        )
    with zipfile.ZipFile(wheel) as archive:
        wheel_files = frozenset(archive.namelist())
        [metadata] = [name for name in wheel_files if name.endswith(".dist-info/METADATA")]
        [license_file] = [name for name in wheel_files if name.endswith("/licenses/LICENSE")]
        parsed = email.parser.BytesParser().parsebytes(archive.read(metadata))
        license_text = archive.read(license_file).decode()
    return Dists(source, sdist, sdist_files, wheel_files, parsed, license_text)


def test_the_sdist_holds_every_file_of_the_repository(dists):
    wanted = repository_files()
    assert {"tests/conftest.py", "tests/support/helpers.py", "tests/support/loopback.py"} <= set(
        wanted
    )
    assert any(name.startswith("tests/support/fixtures/") for name in wanted)
    missing = [name for name in wanted if name not in dists.sdist_files]
    assert missing == [], "add them to MANIFEST.in"
    for needed in ("README.md", "LICENSE", "ARCHITECTURE.md", "pyproject.toml", ".ci/rooms.py"):
        assert needed in dists.sdist_files
    assert {name for name in dists.sdist_files if name.startswith("tests/")} >= {
        "tests/support/make_fixtures.py",
        *(f"tests/support/{path.name}" for path in (ROOT / "tests" / "support").glob("*_child.py")),
    }


def test_the_sdist_holds_no_cache_or_build_output(dists):
    assert (dists.source / "tests/.hypothesis/examples/x").exists()  # planted, left out:
    generated = re.compile(r"^[^/]+\.egg-info/[^/]+$")  # setuptools' own, in every sdist
    junk = sorted(n for n in dists.sdist_files if JUNK.search(n) and not generated.match(n))
    assert junk == [], "prune them in MANIFEST.in"


def test_the_tests_collect_from_the_unpacked_sdist(dists, tmp_path):
    # Collection imports every test module, with its helpers, loopback and
    # conftest: the failure the sdist used to have ("No module named 'helpers'").
    with tarfile.open(dists.sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
            archive.extractall(tmp_path, filter="data")
        else:  # pragma: no cover - our own sdist
            archive.extractall(tmp_path)
    [unpacked] = tmp_path.iterdir()
    done = subprocess.run(
        # collected in one process (-n 0): four workers collecting the same tests on
        # a loaded machine took past two minutes
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
        ],
        cwd=unpacked,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^\d+ tests collected", done.stdout, re.M), done.stdout[-500:]


def test_the_wheel_ships_py_typed_and_the_license(dists):
    assert "trio_agent/py.typed" in dists.wheel_files
    assert dists.license_text == (ROOT / "LICENSE").read_text()
    assert dists.license_text.startswith("MIT License\n\nCopyright (c) 2026 the trio-agent authors")
    tops = {name.split("/")[0] for name in dists.wheel_files}
    assert tops == {"trio_agent", f"trio_agent-{trio_agent.__version__}.dist-info"}


def test_the_wheel_ships_the_serving_page(dists):
    """The page at / is served from the package: its files must be in the wheel."""
    page = {f"trio_agent/serve/page/{name}" for name in ("index.html", "page.js", "page.css")}
    assert page <= dists.wheel_files


def test_the_metadata_says_what_the_package_is(dists):
    meta = dists.metadata
    assert meta["Name"] == "trio-agent" and meta["Version"] == trio_agent.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier")
    unknown = [name for name in classifiers if name not in trove_classifiers.classifiers]
    assert unknown == []
    assert not any(name.startswith("License ::") for name in classifiers)  # PEP 639
    assert {
        "Development Status :: 3 - Alpha",
        "Framework :: Trio",
        "Typing :: Typed",
        "Intended Audience :: Developers",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
    } <= set(classifiers)
    assert any(name.startswith("Topic ::") for name in classifiers)
    assert meta["Keywords"] and "trio" in meta["Keywords"].split(",")


def test_the_python_versions_agree(dists):
    minimum = re.fullmatch(r">=3\.(\d+)", dists.metadata["Requires-Python"])
    assert minimum is not None
    versions = sorted(
        int(name.rsplit(".", 1)[1])
        for name in dists.metadata.get_all("Classifier")
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", name)
    )
    assert versions == list(range(int(minimum.group(1)), versions[-1] + 1))
    assert versions[-1] >= 13


def test_the_project_urls_point_at_the_repository(dists):
    urls = dict(entry.split(", ", 1) for entry in dists.metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Repository", "Issues", "Changelog"}
    assert all(url == REPO_URL or url.startswith(f"{REPO_URL}/") for url in urls.values())


def test_the_long_description_is_the_readme_and_what_it_links_to_ships(dists):
    assert dists.metadata["Description-Content-Type"] == "text/markdown"
    # the body as bytes, decoded as the UTF-8 it is (get_payload() alone reads
    # non-ASCII text, such as the README's ellipses, as surrogates)
    body = dists.metadata.get_payload(decode=True).decode("utf-8")
    assert body == (ROOT / "README.md").read_text(encoding="utf-8")
    linked = readme_repo_paths()
    assert "ARCHITECTURE.md" in linked
    assert [path for path in linked if path not in dists.sdist_files] == []
