#!/usr/bin/env python3
"""Every relative link of the project's Markdown resolves: the file exists and, with a #fragment,
the heading it names does (GitHub's anchors: lower case, punctuation dropped, spaces to -).

Usage: check_links.py SOURCE_DIR
"""
import pathlib
import re
import sys

LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)")


def slug(title):
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(slug(m.group(1)))
    return found


def broken_links(root):
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "deploy").glob("**/README.md"))]
    for page in pages:
        fenced = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for _, target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, fragment = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(root)}:{number}: {target}"
                if not dest.exists():
                    yield f"{where}: no such file"
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                    yield f"{where}: no heading with that anchor"


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    broken = list(broken_links(root))
    for line in broken:
        print(line)
    readme_lines = len((root / "README.md").read_text().splitlines())
    if readme_lines > 400:
        print(f"README.md: {readme_lines} lines, more than the 400 a newcomer reads")
    print(f"{len(broken)} broken links")
    return 1 if broken or readme_lines > 400 else 0


if __name__ == "__main__":
    sys.exit(main())
