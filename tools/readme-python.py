"""Runs the README's Python snippets as written: every ```python block of the "## Python" section, in order, in one
namespace (a later block may use an earlier one's names), from a scratch directory. A block whose info string names
modules (```python torch) runs only where they import; it says so when skipped."""

import importlib.util
import os
import re
import sys
import tempfile


def main() -> None:
    text = open(sys.argv[1], encoding="utf-8").read()
    section = re.search(r"^## Python\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not section:
        sys.exit("README: no '## Python' section")
    blocks = re.findall(r"^```python([^\n]*)\n(.*?)^```", section.group(1), re.S | re.M)
    if not blocks:
        sys.exit("README: no python snippets in '## Python'")
    namespace: dict = {"__name__": "__readme__"}
    ran = 0
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        for i, (info, code) in enumerate(blocks, 1):
            needs = info.split()
            missing = [m for m in needs if importlib.util.find_spec(m) is None]
            if missing:
                print(f"[pvmm-skip] README python snippet {i}: needs {', '.join(missing)}")
                continue
            exec(compile(code, f"README.md python snippet {i}", "exec"), namespace)
            ran += 1
    print(f"README python snippets: {ran} ran, {len(blocks) - ran} skipped")


if __name__ == "__main__":  # a "spawn" child imports this file again: it must run nothing then
    main()
