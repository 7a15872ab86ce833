#!/usr/bin/env python3
"""Every repository path and every exporter flag the project's Markdown names exists.

Pages: README.md, docs/**/*.md and deploy/**/README.md (the pages check_links.py reads).

Paths. Looked for in inline code spans (which may wrap onto the next line) and in fenced code
blocks; prose and link targets are left to the reader and to check_links.py. A token is a
repository path when it contains a `/` and
  - its first component is a top-level directory of the repository (those of TOP_DIRS and any
    other the checkout has): resolved from the repository root;
  - or it starts with `./`: resolved from the root (`./run.sh`);
  - or its first component is one of the directories the libraries share (LIBRARY_SUBDIRS:
    `src/`, `include/`, `tools/`, `config/`), as docs/layout.md's tree names files under the
    library they sit in: resolved from the root, then from each top-level directory, and it
    exists if it exists under any of them.
A bare file name with a source file's extension (.h, .cpp, .py, .sh, .pl; layout.md's
`unique_fd.h`, `probe_api.*` is not one) must be the name of some file of the repository: the
directory is the reader's to infer, the name can still rot.
Forms: `path:123` and `path:12-40` (the line is dropped), `path/{a,b}.h` (every member must
exist), globs `src/foo.*` (at least one match), `dir/` (must be a directory), upper-case
placeholders `tests/e2e/NAME_test.sh` (read as `*` when the literal path does not exist; at
least one match). Not repository paths, and never checked: absolute paths (/sys, /etc, /usr),
`~/`, URLs, and build outputs, anything under build/ or build-*/ (a build directory's layout
is CMake's, and docs name it to show where a binary lands).

Flags. Every `--a.b` token (dotted: the exporter's flags all are, perftest's, ibprobe_probe's
run options and lab.sh's are not) anywhere in a page must be a flag `ibprobe_exporter --help`
lists, `--flag=value` included. `--no-X` must be listed as such: CLI11 prints each negation
the exporter accepts, and a flag without one (`--fabric.enabled`) rejects `--no-` in front.
An upper-case component is a placeholder (`--collector.NAME`): it must match at least one
flag. ibprobe_probe's one dotted option, `--path.sysfs`, is the exporter's too; the exporter's
internal `--fabric.discover-once` (its discovery child) is not in --help, and docs have no
reason to name it. Flags after the name of another program in the same code span, fenced line
or prose line (FOREIGN_PROGRAMS: Prometheus, node_exporter, Alertmanager and their tools), up
to a following `ibprobe_exporter`, are that program's: they share the exporter's dotted style
(`--web.listen-address`, `--collector.infiniband`); write the program's name in the span.

Output: `file:line: what` per problem, then a count. Exit status 1 when there is any.

Usage: check_names.py [--docs DIR] SOURCE_DIR EXPORTER
       check_names.py --self-test SOURCE_DIR EXPORTER
--docs DIR reads the pages from DIR instead of SOURCE_DIR (paths still resolve in SOURCE_DIR);
--self-test plants errors in a copy of the pages and checks that exactly those are reported.
"""
import fnmatch
import glob
import itertools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# The top-level directories: named even if one disappears, so that paths into it are still
# checked (and fail) instead of no longer looking like paths.
TOP_DIRS = {"collectors", "fabric", "probes", "mesh", "exporter", "common", "dashboards",
            "deploy", "docs", "tests", "scripts", "cmake"}
LIBRARY_SUBDIRS = {"src", "include", "tools", "config"}
FOREIGN_PROGRAMS = {"prometheus", "prometheus-node-exporter", "node_exporter", "alertmanager",
                    "promtool", "amtool", "grafana-server"}

# A path token: names, `/`, globs and brace lists; a colon (`:123`), spaces, quotes and
# parentheses end it.
PATH_TOKEN = re.compile(r"(?:[\w.*+\-/]|\{[\w.,*\-]*\})+")
FLAG = re.compile(r"(?<![\w-])--(?:no-)?[a-z][\w-]*(?:\.[\w-]+)+")
PLACEHOLDER = re.compile(r"(?<![A-Za-z])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*(?![a-z])")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
PROGRAM = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, FOREIGN_PROGRAMS)) +
                     r"|ibprobe_exporter)(?![\w.-])")
SOURCE_NAME = re.compile(r"[\w.*-]+\.(?:h|cpp|py|sh|pl)")


def pages(docs_root):
    return [docs_root / "README.md", *sorted((docs_root / "docs").rglob("*.md")),
            *sorted((docs_root / "deploy").glob("**/README.md"))]


def segments(text):
    """(line number, text, is code) of each code span, fenced line and prose line."""
    lines = text.splitlines()
    fenced = False
    prose = []  # (line number, line) outside fences, joined per paragraph for code spans
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line, True
        else:
            prose.append((number, line))
    for _, paragraph in itertools.groupby(prose, key=lambda nl: bool(nl[1].strip())):
        paragraph = list(paragraph)
        joined = "\n".join(line for _, line in paragraph)
        first = paragraph[0][0]
        for m in CODE_SPAN.finditer(joined):
            yield first + joined.count("\n", 0, m.start(2)), m.group(2), True
        outside = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), joined)
        for offset, line in enumerate(outside.split("\n")):
            yield first + offset, line, False


def line_of(segment_line, segment, position):
    return segment_line + segment.count("\n", 0, position)


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [expanded for member in m.group(1).split(",")
            for expanded in expand_braces(token[:m.start()] + member + token[m.end():])]


def exists(base, path):
    directory = path.endswith("/")
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        matches = glob.glob(glob.escape(str(base)) + "/" + path)
        return any(os.path.isdir(m) or not directory for m in matches)
    full = base / path
    return full.is_dir() if directory else full.exists()


def path_problem(root, top_dirs, token):
    token = token.rstrip(".,")
    if "/" not in token or token.startswith("/"):
        return None
    relative = token.startswith("./")
    if relative:
        token = token[2:]
    first = token.split("/", 1)[0]
    if first == "build" or first.startswith("build-"):
        return None
    if relative or first in top_dirs:
        bases = [root]
    elif first in LIBRARY_SUBDIRS:
        bases = [root, *(root / d for d in sorted(top_dirs))]
    else:
        return None
    missing = []
    for member in expand_braces(token):
        if any(exists(base, member) for base in bases):
            continue
        placeholders = PLACEHOLDER.sub("*", member)
        if placeholders != member and any(exists(base, placeholders) for base in bases):
            continue
        missing.append(member)
    if not missing:
        return None
    which = f" ({', '.join(missing)})" if missing != [token] else ""
    where = "" if bases == [root] else " (from the root or any top-level directory)"
    return f"no such path: {token}{which}{where}"


def name_problem(file_names, token):
    token = token.rstrip(".,")
    if "/" in token:
        return None
    missing = [member for member in expand_braces(token)
               if SOURCE_NAME.fullmatch(member) and not fnmatch.filter(file_names, member)]
    return f"no file of this name in the repository: {', '.join(missing)}" if missing else None


def exporter_flags(exporter):
    help_text = subprocess.run([exporter, "--help"], capture_output=True, text=True,
                               check=True).stdout
    flags = set()
    for line in help_text.splitlines():
        m = re.match(r"\s{1,4}(-\S+)", line)
        if not m:
            continue
        for name in m.group(1).split(","):
            name = re.sub(r"\{.*", "", name)
            if name.startswith("--"):
                flags.add(name)
    if "--web.listen-address" not in flags:
        raise SystemExit(f"{exporter} --help lists no --web.listen-address: not the exporter?")
    return flags


def flag_problem(flags, flag):
    if flag in flags:
        return None
    if PLACEHOLDER.search(flag):
        pattern = re.compile(PLACEHOLDER.sub("PLACEHOLDER", re.escape(flag))
                             .replace("PLACEHOLDER", r"[\w-]+") + "$")
        if any(pattern.match(f) for f in flags):
            return None
    if flag.startswith("--no-") and "--" + flag[5:] in flags:
        return f"{flag}: --{flag[5:]} has no negation"
    return f"not an ibprobe_exporter flag: {flag}"


def problems(docs_root, root, flags):
    top_dirs = TOP_DIRS | {p.name for p in root.iterdir() if p.is_dir()
                           and not p.name.startswith((".", "build"))}
    file_names = set()
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        file_names.update(files)
    for page in pages(docs_root):
        name = page.relative_to(docs_root)
        found = []
        for number, text, code in segments(page.read_text()):
            if code:
                for m in PATH_TOKEN.finditer(text):
                    if (problem := path_problem(root, top_dirs, m.group(0)) or
                            name_problem(file_names, m.group(0))):
                        found.append((line_of(number, text, m.start()), problem))
            programs = [(p.start(), p.group(1)) for p in PROGRAM.finditer(text)]
            for m in FLAG.finditer(text):
                before = [program for start, program in programs if start < m.start()]
                if before and before[-1] != "ibprobe_exporter":
                    continue
                if (problem := flag_problem(flags, m.group(0))):
                    found.append((line_of(number, text, m.start()), problem))
        for number, problem in sorted(set(found)):
            yield f"{name}:{number}: {problem}"


def self_test(root, exporter):
    """Plants wrong names, and names that only look wrong, in a copy of the pages."""
    planted = [
        ("`exporter/src/no_such_file.cpp:12`", "no such path: exporter/src/no_such_file.cpp"),
        ("`probes/src/{verbs,no_such}.h`",
         "no such path: probes/src/{verbs,no_such}.h (probes/src/no_such.h)"),
        ("`src/no_such_dir/`",
         "no such path: src/no_such_dir/ (from the root or any top-level directory)"),
        ("`tools/no_such_tool.cpp`",
         "no such path: tools/no_such_tool.cpp (from the root or any top-level directory)"),
        ("`no_such_header.h`", "no file of this name in the repository: no_such_header.h"),
        ("`ibprobe_exporter --web.no-such-flag=1`",
         "not an ibprobe_exporter flag: --web.no-such-flag"),
        ("`--no-fabric.enabled`", "--no-fabric.enabled: --fabric.enabled has no negation"),
        # A span wrapped onto the next line: the problem is on the flag's line.
        ("`ibprobe_exporter\n--mesh.no-such-flag`",
         "not an ibprobe_exporter flag: --mesh.no-such-flag"),
    ]
    # Each is a repository path or an exporter flag in form only, and must pass.
    decoys = ["`build/probes/ibprobe_probe`", "`build-asan/tests/ibprobe_unit_tests`",
              "`/sys/class/infiniband/mlx5_0/ports/1/counters/`", "`/etc/ibprobe/ibprobe.yml`",
              "`probes/src/verbs.*`", "`src/verbs.{h,cpp}`", "`tests/e2e/NAME_test.sh`",
              "`exporter/src/flags.cpp:41`", "`./build-deb/ibprobe_0.1.0_amd64.deb`",
              "`--collector.NAME`", "`--no-collector.NAME`",
              "`--log.level=debug`", "`prometheus --web.enable-lifecycle`",
              "`prometheus-node-exporter --collector.infiniband`", "`unique_fd.h`",
              "`client_watch.*`", "`--config.file=prometheus.yml`", "`dashboards/`", "`./run.sh`",
              "`ibprobe_probe run -d rxe0 --rx-depth 512 --path.sysfs /sys`"]
    def check(docs):
        run = subprocess.run([sys.executable, __file__, "--docs", docs, str(root), exporter],
                             capture_output=True, text=True)
        return run.returncode, run.stdout.splitlines(), run.stderr

    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        for page in pages(root):
            (copy / page.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(page, copy / page.relative_to(root))
        # What the pages have wrong already is docs.names' to report: expected here too, so
        # that this test fails only when the planted errors are missed or others invented.
        _, baseline, _ = check(tmp)
        target = copy / "docs" / "testing.md"
        lines = target.read_text().splitlines()
        expected = []
        for text, problem in planted:
            lines += ["", *f"Planted: {text}.".split("\n")]
            expected.append(f"docs/testing.md:{len(lines)}: {problem}")
        lines += ["", "Decoys: " + ",\n".join(decoys) + "."]
        target.write_text("\n".join(lines) + "\n")
        status, got, stderr = check(tmp)
    expected = sorted(baseline[:-1] + expected) + [f"{len(baseline) - 1 + len(planted)} problems"]
    if status != 1 or sorted(got[:-1]) + got[-1:] != expected:
        print(f"exit status {status}, expected 1; output:", *got, stderr, "expected:", *expected,
              sep="\n")
        return 1
    print(*got, sep="\n")
    print(f"self-test: the {len(planted)} planted errors, and only they, were reported")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"] and len(argv) == 3:
        return self_test(pathlib.Path(argv[1]).resolve(), argv[2])
    docs = None
    if argv[:1] == ["--docs"] and len(argv) == 4:
        docs, argv = pathlib.Path(argv[1]).resolve(), argv[2:]
    if len(argv) != 2:
        print(__doc__.strip().split("Usage:")[1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[0]).resolve()
    found = list(problems(docs or root, root, exporter_flags(argv[1])))
    for problem in found:
        print(problem)
    print(f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
