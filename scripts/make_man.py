#!/usr/bin/env python3
"""Writes the collector's man page (roff, section 1) from its --help texts: the top level's and each command's.

  scripts/make_man.py COLLECTOR OUT.1

CLI11's help has a description, a "Usage:" line, sections ("Options:", "Subcommands:", ...) of entries (two spaces,
a name, the description from a fixed column, continuation lines indented to it) and a footer. Sections become
.SS headings, entries .TP paragraphs, the rest plain text. Meson runs this at build time (collector/meson.build) and
installs the page; help2man is not needed.
"""
import re
import subprocess
import sys

ENTRY = re.compile(r"^  (\S.*?)(?: {2,}(\S.*))?$")


def esc(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def help_of(exe, *args):
    return subprocess.run([exe, *args, "--help"], check=True, capture_output=True, text=True).stdout


def section(text, title):
    """The roff of one --help text under the heading `title`."""
    out = [f'.SH "{title}"' if title else ""]
    entry = False
    for line in text.rstrip("\n").split("\n"):
        if not line.strip():
            out.append(".PP")
            entry = False
        elif line.startswith("Usage: "):
            out += [".PP", ".B " + esc(line[len("Usage: "):])]
        elif re.match(r"^[A-Z][A-Za-z ]*:$", line):
            out.append(f'.SS "{esc(line[:-1])}"')
        elif line.startswith("  ") and not line.startswith("   ") and ENTRY.match(line):
            name, desc = ENTRY.match(line).groups()
            out += [".TP", ".B " + esc(name.strip())]
            if desc:
                out.append(esc(desc))
            entry = True
        elif entry and line.startswith("   "):
            out.append(esc(line.strip()))
        else:
            out.append(esc(line.strip()))
    return [x for x in out if x]


def main():
    exe, dest = sys.argv[1], sys.argv[2]
    version = subprocess.run([exe, "--version"], check=True, capture_output=True, text=True).stdout.strip()
    top = help_of(exe)
    about, _, rest = top.partition("\nUsage: ")
    roff = [f'.TH NCCLWATCH-COLLECTOR 1 "" "{esc(version)}" "User Commands"', ".SH NAME",
            "ncclwatch\\-collector \\- name the rank that holds up a hung NCCL job", ".SH DESCRIPTION"]
    roff += section(about + "\nUsage: " + rest, "")
    # The commands as the help lists them (main.cpp's one table), but `help`.
    listed = top.partition("\nSubcommands:\n")[2].partition("\n\n")[0]
    commands = [c for c in re.findall(r"^  ([a-z]+)\s", listed, re.M) if c != "help"]
    for cmd in commands:
        roff += section(help_of(exe, cmd), f"ncclwatch-collector {cmd}")
    roff += [".SH SEE ALSO", "README.md and docs/ARCHITECTURE.md in the ncclwatch sources.", ".SH VERSION",
             esc(version)]
    with open(dest, "w") as f:
        f.write("\n".join(roff) + "\n")


if __name__ == "__main__":
    main()
