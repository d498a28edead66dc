"""Comments that cannot drift: every repository path a comment cites exists,
the public headers' usage examples are the code tests/docs/header_examples.cpp
compiles (word for word), and the repository speaks of the software, not of its
making: no text cites a tracker item or a work session a reader cannot see."""
import os
import re

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SOURCE_DIRS = ["agent", "collectives", "include", "launcher", "rendezvous", "scripts", "store",
               "tests", "examples", "cmake"]
EXTENSIONS = (".h", ".cpp", ".py", ".sh")
# A path a comment cites: top-level folder, then folders, then a file with an extension.
TOP = "|".join(SOURCE_DIRS + ["docs", "configs"])
CITED = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w\.(?:h|cpp|py|sh|md|txt|yaml|yml|json|in))\b" % TOP)


def comment_text(path, text):
    """The comments of a source file (// and # lines, and Python docstrings)."""
    if path.endswith((".py", ".sh")):
        return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line) + \
            "\n" + "\n".join(re.findall(r'"""(.*?)"""', text, re.S))
    return "\n".join(m for m in re.findall(r"//(.*)", text)) + "\n" + \
        "\n".join(re.findall(r"/\*(.*?)\*/", text, re.S))


def source_files():
    for top in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, f)


def test_every_path_a_comment_cites_exists():
    missing = []
    for path in source_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            comments = comment_text(path, f.read())
        for cited in set(CITED.findall(comments)):
            if not os.path.exists(os.path.join(ROOT, cited)):
                missing.append(f"{os.path.relpath(path, ROOT)} cites {cited}")
    assert not missing, "comments cite files that do not exist:\n" + "\n".join(sorted(missing))


def normalize(line):
    """A code line without its trailing // comment, spaces collapsed."""
    code = re.sub(r"\s+//.*$", "", line.strip())
    return " ".join(code.split())


def banner(header):
    """The normalized example lines of a header's opening comment."""
    lines = []
    with open(header, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("//"):
                break
            if line.startswith("//   "):
                lines.append(normalize(line[2:]))
    return lines


def example_blocks():
    """{header: [normalized lines]} of tests/docs/header_examples.cpp."""
    blocks, current = {}, None
    with open(os.path.join(ROOT, "tests", "docs", "header_examples.cpp"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*// example: (\S+)$", line)
            if m:
                current = blocks.setdefault(m.group(1), [])
            elif re.match(r"\s*// end$", line):
                current = None
            elif current is not None and normalize(line):
                current.append(normalize(line))
    return blocks


def test_header_examples_are_the_headers_words():
    blocks = example_blocks()
    drift = []
    for header, lines in blocks.items():
        path = os.path.join(ROOT, "include", header)
        assert os.path.exists(path), f"header_examples.cpp has a block for {header}, which does not exist"
        words = banner(path)
        drift += [f"{header}: {line}" for line in lines if line not in words]
    assert not drift, ("header_examples.cpp holds lines its headers' examples no longer have "
                       "(update the example in both places):\n" + "\n".join(drift))


def test_every_header_example_is_compiled():
    blocks = example_blocks()
    uncovered = []
    for name in sorted(os.listdir(os.path.join(ROOT, "include", "ccrun"))):
        header = "ccrun/" + name
        code = [l for l in banner(os.path.join(ROOT, "include", header))
                if re.search(r"\w\(.*\);$|^\w[\w:<>]* \w+(\(.*\))?;$", l)]
        if header in blocks:
            uncovered += [f"{header}: {l}" for l in code if l not in blocks[header]]
        elif code:
            uncovered.append(f"{header}: no block in tests/docs/header_examples.cpp")
    # Examples with elided parts ("...") that cannot compile as they stand.
    allowed = {"ccrun/agent.h", "ccrun/job_spec.h", "ccrun/rendezvous.h", "ccrun/progress.h",
               "ccrun/stop_signals.h"}
    uncovered = [u for u in uncovered if u.split(":")[0] not in allowed]
    assert not uncovered, "header examples not compiled by header_examples.cpp:\n" + "\n".join(uncovered)


# A citation of a tracker item or a work session: "issue", "session", "item", "ticket" or
# "PR", singular or plural, then a number ("#12", "11.6", "10 (3)" included). The behaviour and
# its reason belong in the text instead; the history of a change belongs in git log.
CITATION = re.compile(r"\b(?:issues?|sessions?|items?|tickets?|PRs?|pull requests?)\s+#?\d", re.I)
# Where citations are looked for: the whole text (comments, strings, test names) of every file
# here with one of these endings, and README.md.
CITATION_DIRS = SOURCE_DIRS + ["docs", "configs", "logging", "packaging"]
CITATION_EXTENSIONS = EXTENSIONS + (".md", ".txt", ".cmake", ".in", ".yaml", ".yml")


def citation_files():
    yield os.path.join(ROOT, "README.md")
    for top in CITATION_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(CITATION_EXTENSIONS) or f == "CMakeLists.txt":
                    yield os.path.join(dirpath, f)


def citations(text):
    """(line number, line) of each line of `text` that cites a tracker item or session."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if CITATION.search(line)]


def test_citation_pattern():
    # Each written in two parts, so that this file does not cite anything itself.
    for word, rest in [("(issue", "11.6)"), ("Issue", "23's target"), ("session", "9"), ("issue", "#4"),
                       ("Item", "8: flags"), ("issues", "2 and 3"), ("see PR", "12")]:
        cited = word + " " + rest
        assert citations(cited), cited
    for fine in ["issued at the forward", "progress->issue(what, count)", "the session's socket",
                 "every rank issues the same operations", "all_reduce #20 of the world group",
                 "one item per line"]:
        assert not citations(fine), fine


def test_no_text_cites_a_tracker_item_or_session():
    found = []
    for path in citation_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            found += [f"{os.path.relpath(path, ROOT)}:{n}: {line}" for n, line in citations(f.read())]
    assert not found, ("these lines cite tracker items or work sessions, which a reader of the "
                       "repository cannot see; say the behaviour and why instead (history "
                       "belongs in git log):\n" + "\n".join(found))
