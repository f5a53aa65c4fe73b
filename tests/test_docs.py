"""The docs site (mkdocs.yml, docs/): every public name of the documented packages has a docstring for its API
reference entry, every package has its page, and the site builds strictly and renders in headless Chromium (slow:
the build takes ~10 s; CI also runs `scripts/docs.sh build`)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import griffe
import pytest

from tests._ci import skip_outside_ci

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / ".ci-artifacts" / "docs"

# Public names allowed without a docstring for now (none): the test fails once one gains its docstring, so the list
# only shrinks.
UNDOCUMENTED_FOR_NOW: set[str] = set()


def _api_reference() -> ModuleType:
    """docs/hooks/api_reference.py, the MkDocs hook that writes the reference's entries."""
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "hooks" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docstring(loader: griffe.GriffeLoader, path: str) -> str:
    """The docstring mkdocstrings shows for `path`, read from the source as griffe reads it."""
    top = path.split(".")[0]
    if top not in loader.modules_collection:
        loader.load(top)
    found = loader.modules_collection[path]
    if found.is_alias:
        found = found.final_target
    return found.docstring.value.strip() if found.docstring else ""


def test_every_public_name_has_a_docstring():
    api = _api_reference()
    loader = griffe.GriffeLoader(search_paths=[str(ROOT), str(ROOT / "integrations")])
    homes = api.home_pages()
    missing = sorted(path for path in homes if not _docstring(loader, path))
    assert len(homes) > 100  # the packages' exports were found (lazy ones too)
    assert [path for path in missing if path not in UNDOCUMENTED_FOR_NOW] == [], "write their docstrings"
    assert [path for path in UNDOCUMENTED_FOR_NOW if path not in missing] == [], "documented now: drop from the list"


def test_every_documented_package_has_its_api_page_in_the_nav():
    api = _api_reference()
    nav = (ROOT / "mkdocs.yml").read_text()
    for package in api.PACKAGES:
        page = api.page_of(package)
        assert f"<!-- api: {package} -->" in (ROOT / "docs" / page).read_text(), page
        assert page in nav, page


def test_every_lazy_name_is_found_where_its_package_says():
    """The reference's path for a name is where the name is defined (a moved module needs no edit of the docs)."""
    api = _api_reference()
    for package in api.PACKAGES:
        for name in api.public_names(package):
            path = api.reference_path(package, name)
            assert path.rsplit(".", 1)[-1] == name, (package, name, path)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow  # the build alone takes ~10 s; CI runs this and `scripts/docs.sh build`
def test_the_site_builds_strictly_and_its_pages_render(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-5000:]
    reference = (site / "api" / "tracktrain.trainer" / "index.html").read_text()
    for name in ("Trainer", "LoopModule", "DataModule", "max_epochs", "accumulate_grad_batches"):
        assert name in reference, f"{name} is not on the trainer's reference page"
    assert "val_every_n_epochs" in re.sub(r"<[^>]+>", "", reference)  # a signature's argument, rendered

    browser = chromium()
    if browser is None:
        skip_outside_ci("the site was built but not looked at: no chromium binary (scripts/install-chromium.sh)")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=5000",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages = {
        "docs-home": ("index.html", "Where to start"),
        "docs-tutorial": ("tutorials/loop-module/index.html", "A LoopModule from scratch"),
        "docs-api": ("api/tracktrain.trainer/index.html", "accumulate_grad_batches"),  # (a #fragment draws blank)
    }
    for name, (page, text) in pages.items():
        address = (site / page).as_uri()
        screenshot = ARTIFACTS / f"{name}.png"
        subprocess.run([browser, *flags, f"--screenshot={screenshot}", address], capture_output=True, timeout=120)
        dom = subprocess.run([browser, *flags, "--dump-dom", address], capture_output=True, text=True, timeout=120)
        assert text in dom.stdout, f"{page} does not show {text!r}"
        assert screenshot.stat().st_size > 10_000, f"{screenshot} is blank"  # a rendered page
