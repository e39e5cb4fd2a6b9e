"""The docs describe the product, not how it was made: every relative link in README.md,
CHANGELOG.md and docs/*.md resolves to a file, and no product file (code, docs, evidence)
speaks of working sessions or run ids ("twenty-third session", "run s22", `_s21_`)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECKED_SUFFIXES = {".py", ".md", ".pyx", ".pxi", ".pxd", ".cc", ".h", ".cu", ".sh", ".json"}

# A working session or run spoken of: an ordinal session, "this / that / same session", a
# run id ("run s22", runs/s7), a session tag in a name (`_s21_`).
SESSION_REFERENCE = re.compile(
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|\w+teenth|twentieth|twenty-\w+|later|earlier|previous|next|last|this|that|same|other"
    r"|working)\s+sessions?\b"
    r"|\bsession's\b"
    r"|\bruns?\s+s\d+\w*\b"
    r"|\bruns/s\d+\w*"
    r"|_s\d+_"
    r"|\b(?:twenty-(?:first|second|third|fourth|fifth)|nineteenth|eighteenth)\b",
    re.IGNORECASE)

# "session" in other senses: onnxruntime's and TensorFlow's sessions, a training loop's
# resumable session, pytest's session scope, a subprocess's new session.
ALLOWED = re.compile(r"InferenceSession|SessionOptions|tf\.compat\.v1\.Session|open_session"
                     r"|start_new_session|scope=\"session\"")


def product_files() -> list[Path]:
    """Files git tracks (or would track) with one of the checked suffixes."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    files = [ROOT / name for name in listed if name]
    return [f for f in files if f.suffix in CHECKED_SUFFIXES and f.is_file() and f.name != "test_docs.py"]


def session_references(path: Path) -> list[str]:
    """`path:line: text` for every line of the file that speaks of a working session or run."""
    found = []
    for number, line in enumerate(path.read_text(errors="replace").split("\n"), start=1):
        if SESSION_REFERENCE.search(ALLOWED.sub("", line)):
            found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return found


def test_the_pattern_finds_session_and_run_references_and_spares_other_sessions():
    assert SESSION_REFERENCE.search("measured in the twenty-third session")
    assert SESSION_REFERENCE.search("(docs/learned_agents.md, eleventh session)")
    assert SESSION_REFERENCE.search("run s22 evaluated again")
    assert SESSION_REFERENCE.search("--run runs/s9small")
    assert SESSION_REFERENCE.search("2026-11-27_h100_s21_eval.md")
    assert not SESSION_REFERENCE.search(ALLOWED.sub("", "sess = ort.InferenceSession(path)"))
    assert not SESSION_REFERENCE.search("session = open_session(model)")
    assert not SESSION_REFERENCE.search("the resumable training session restores Adam's state")


def test_no_product_file_speaks_of_working_sessions_or_run_ids():
    found = [hit for path in product_files() for hit in session_references(path)]
    assert not found, "session or run references:\n" + "\n".join(found)


def test_no_product_file_name_carries_a_session_or_run_id():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    named = [name for name in listed if re.search(r"_s\d+_|_s\d+\.|session", Path(name).name, re.IGNORECASE)]
    assert not named, f"file names with a session or run id: {named}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if p.is_file()]


def relative_links(page: Path) -> list[str]:
    """The page's markdown link targets that are paths in the repository (no URL, no anchor)."""
    targets = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](missing/file.py) [web](https://example.org) [here](#top)")
    assert relative_links(page) == ["page.md", "missing/file.py"]
    assert [t for t in relative_links(page) if not (page.parent / t).exists()] == ["missing/file.py"]


def test_docs_measured_keeps_only_evidence_that_results_md_cites():
    measured = sorted(p.name for p in (ROOT / "docs" / "measured").iterdir() if p.is_file())
    results = (ROOT / "docs" / "results.md").read_text()
    assert len(measured) <= 40, f"docs/measured holds {len(measured)} files (at most 40)"
    uncited = [name for name in measured if name not in results]
    assert not uncited, f"docs/measured files that docs/results.md does not cite: {uncited}"
