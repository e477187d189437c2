"""A rank prefixing its own output (simharness.launch.output), in a real process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, subprocess, sys
    from simharness.launch.output import prefix_output
    drain = prefix_output("[rank7]:")
    print("from print")
    print("to stderr", file=sys.stderr)
    os.write(1, b"fd one, no newline")
    os.write(2, b"\\nfd two\\n")
    subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
    sys.stdout.write("unfinished")
    drain()
    print("after drain", file=sys.stderr)
""")


def test_every_line_of_the_process_and_its_children_is_prefixed_on_stderr():
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""                       # nothing reaches stdout
    lines = res.stderr.splitlines()
    assert lines[-1] == "after drain"             # after drain(): the plain stderr again
    assert sorted(lines[:-1]) == sorted([
        "[rank7]:from print", "[rank7]:to stderr", "[rank7]:fd one, no newline",
        "[rank7]:fd two", "[rank7]:from a child", "[rank7]:unfinished"]), lines
