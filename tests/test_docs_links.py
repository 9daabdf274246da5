"""Every relative link in README.md and docs/ resolves: the file exists and its #anchor is a heading there
(GitHub's slugs), so a page moved or a heading renamed cannot leave a dead link behind."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```.*?^```$", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(CODE.sub("", FENCE.sub("", page.read_text())))


def dead_links() -> list[str]:
    dead = []
    for page in pages():
        for target in links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = unquote(target).partition("#")
            where = (page.parent / path).resolve() if path else page
            name = f"{page.relative_to(ROOT)}: {target}"
            if not where.exists():
                dead.append(f"{name} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                dead.append(f"{name} (no heading #{anchor})")
    return dead


def test_slugs_are_githubs():
    assert slug("Full-size models, built offline: `s2st-stage --size full`") == \
        "full-size-models-built-offline-s2st-stage---size-full"
    assert slug("Inputs the gate will not be fooled by") == "inputs-the-gate-will-not-be-fooled-by"


def test_every_relative_link_and_anchor_resolves():
    assert sum(len(links(p)) for p in pages()) > 20  # the pages were read
    assert dead_links() == []


def test_every_option_and_command_named_exists():
    """The docs name only options pytest-s2st registers and console scripts pyproject.toml installs."""
    import tomllib

    from pytest_s2st.settings import SETTINGS

    options = {s.flag for s in SETTINGS} | {"--s2st-config"}
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    unknown = []
    for page in pages():
        text = page.read_text()
        prose = LINK.sub(lambda m: m.group(0).split("](")[0], text)  # anchors hold option-like slugs
        unknown += [f"{page.relative_to(ROOT)}: {o}" for o in set(re.findall(r"--s2st-[a-z0-9-]*[a-z0-9]", prose))
                    - options]
        for block in re.findall(r"^```(?:bash|sh|)\n(.*?)^```$", text, re.S | re.M):
            for line in block.splitlines():
                words = [w for w in line.split() if not re.match(r"[A-Z_][A-Z0-9_]*=", w)]  # VAR=value first
                if words and words[0].startswith("s2st-") and words[0] not in scripts:
                    unknown.append(f"{page.relative_to(ROOT)}: command {words[0]}")
    assert sorted(unknown) == []
