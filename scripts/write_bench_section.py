"""Replaces one benchmark's section of docs/benchmarks.md (between the markers
<!-- NAME:begin --> and <!-- NAME:end -->), or appends it under a heading.

    python3 scripts/write_bench_section.py DOC NAME HEADING SECTION_TEXT
"""
import os
import re
import sys

path, name, heading, body = sys.argv[1:5]
text = open(path).read() if os.path.exists(path) else "# ccrun benchmarks\n"
section = f"<!-- {name}:begin -->\n{body}\n<!-- {name}:end -->"
pattern = re.compile(rf"<!-- {re.escape(name)}:begin -->.*?<!-- {re.escape(name)}:end -->", re.S)
if pattern.search(text):
    text = pattern.sub(lambda m: section, text)
else:
    text = text.rstrip("\n") + f"\n\n## {heading}\n{section}\n"
open(path, "w").write(text)
