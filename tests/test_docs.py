"""The docs say what the code does: every `eqfast-*` command and `--flag` they show exists,
every relative link and repository path they cite resolves, and none narrates its own
history (the word "session", issue numbers).

The checker is `check_doc(text, path)`; the tests run it on the real docs and on planted
bad text, so a broken check fails too. Cheap: the commands' parsers are built in-process
(no subprocess, no torch work)."""
from __future__ import annotations

import argparse
import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md",
               ROOT / "profiling" / "README.md", *(ROOT / "docs").glob("*.md")])

# `eqfast-...` names in the docs that are not commands: file formats and a thread name
NOT_COMMANDS = {"eqfast-stage2", "eqfast-writer"}
# flags of the other programs the docs show (pytest and its plugins, launchers, profilers,
# pip); a flag after one of these programs is theirs and not checked
EXTERNAL = ("pytest", "torchrun", "sbatch", "pip", "nsys", "ncu", "compute-sanitizer",
            "nvidia-smi", "git", "ruff", "nice", "bash", "uptime", "timeout")
# those programs' flags that the docs name on their own, in prose
EXTERNAL_FLAGS = {"run-path", "clock-control", "benchmark-enable"}
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")
COMMAND = re.compile(r"(?<![\w./-])(?:eqfast-[a-z0-9]+(?:-[a-z0-9]+)*|python -m eqfast\.cli\.\w+)"
                     r"(?![\w/-])")
SCRIPT = re.compile(r"(?<![\w/.-])((?:benchmarks|profiling|tests)/[\w/]+\.(?:py|sh))"
                    r"|python -m (eqfast\.(?!cli\.)[\w.]+)")
LINK = re.compile(r"(?<![\w\]!])\[[^\]\n]+\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w/.-])((?:docs|benchmarks|eqfast|tests|profiling|kernels)/"
                       r"[\w./-]*\w\.(?:md|py|sh|txt|json|jsonl|c|safetensors|toml))(?![\w*{<])")
SESSION = re.compile(r"\bsessions?\b", re.I)
ISSUE = re.compile(r"(?<![\w&/])#\d+\b|\bissues? #?\d+\b", re.I)


def console_scripts() -> dict[str, str]:
    """setup.py's console scripts: name -> module."""
    text = (ROOT / "setup.py").read_text()
    return dict(re.findall(r'"(eqfast-[\w-]+)=([\w.]+):\w+"', text))


def _parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        flags.update(s[2:] for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _parser_flags(sub)
    return flags


@functools.lru_cache(maxsize=None)
def command_flags() -> dict[str, frozenset[str]]:
    """Every console script's long flags, from its parser built in-process
    (`build_parser()`, or the module's `_parser()`)."""
    out = {}
    for name, module in console_scripts().items():
        mod = importlib.import_module(module)
        build = getattr(mod, "build_parser", None) or getattr(mod, "_parser")
        out[name] = frozenset(_parser_flags(build()))
    return out


@functools.lru_cache(maxsize=None)
def script_path(match: re.Match) -> str:
    """The file of a SCRIPT match: a path, or a module run with python -m."""
    return match.group(1) or match.group(2).replace(".", "/") + ".py"


def script_flags(path: str) -> frozenset[str] | None:
    """The long flags a benchmark or profiling script declares (add_argument or a shell
    `case` branch), read from its source; None if the file is missing."""
    p = ROOT / path
    if not p.is_file():
        return None
    src = p.read_text()
    return frozenset(re.findall(r"""["'\s|(]--([a-z0-9][a-z0-9-]*)""", src))


def _segments(code: str):
    """(program, text) pieces of a code text: one per command it runs. A backslash
    continues a line; `&&`, `|`, `;` and a new line (outside a continuation) end a command;
    an eqfast command inside another's arguments (torchrun ... bash -c 'eqfast-...')
    starts its own piece."""
    code = re.sub(r"\\\n", " ", code)
    for line in re.split(r"\n|&&|\|\||(?<![\w-])\|(?![\w-])|;", code):
        line = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        starts = sorted([m.start() for m in COMMAND.finditer(line)]
                        + [m.start() for m in SCRIPT.finditer(line)])
        head = line[:starts[0]] if starts else line
        yield None, head
        for a, b in zip(starts, starts[1:] + [len(line)]):
            m = COMMAND.match(line, a)
            yield (m.group(0) if m else None), line[a:b]


def _program(head: str) -> str | None:
    """What runs a piece with no eqfast command: a repository script, another program, or
    nothing named (a bare flag in prose)."""
    m = SCRIPT.match(head)
    if m:
        return script_path(m)
    words = re.findall(r"[\w./-]+", head)
    if any(w.split("/")[-1] in EXTERNAL for w in words) or re.search(r"-m (pytest|pip)", head):
        return "external"
    return None


def check_flags(code: str, where: str, bare: frozenset[str] | None = None) -> list[str]:
    """Problems of the commands and flags in one code text. A flag after an eqfast command
    must be that command's; after a repository script, the script's (or an eqfast command's
    it passes on); a bare flag in prose, one of `bare` (default: any eqfast command's)."""
    problems = []
    known = command_flags()
    everything = frozenset().union(*known.values())
    bare = everything if bare is None else bare
    for cmd, text in _segments(code):
        flags = FLAG.findall(text)
        if cmd is None:
            prog = _program(text)
            if prog == "external":
                continue
            if prog is not None:
                declared = script_flags(prog)
                if declared is None:
                    problems.append(f"{where}: {prog} does not exist")
                    continue
                # a flag of the script, or of an eqfast command it hands flags on to
                allowed = declared | everything
            else:
                allowed = bare
            problems += [f"{where}: --{f} is no flag of any eqfast command"
                         + (f" or of {prog}" if prog else "")
                         for f in flags if f not in allowed]
            continue
        name = cmd if cmd.startswith("eqfast-") else None
        if name is None:                          # python -m eqfast.cli.X
            module = cmd.split()[-1]
            name = next((n for n, m in console_scripts().items() if m == module), None)
            if name is None:
                problems.append(f"{where}: {cmd}: no such command module")
                continue
        if name in NOT_COMMANDS:
            continue
        if name not in known:
            problems.append(f"{where}: {name} is not a command (setup.py console_scripts)")
            continue
        if name == "eqfast-iterate":              # its --label-args "..." are eqfast-generate's
            quoted = re.findall(r'--label-args[ =]"([^"]*)"', text)
            flags = FLAG.findall(re.sub(r'--label-args[ =]"[^"]*"', "--label-args", text))
            problems += [f"{where}: eqfast-generate has no flag --{f} (in --label-args)"
                         for q in quoted for f in FLAG.findall(q)
                         if f not in known["eqfast-generate"]]
        problems += [f"{where}: {name} has no flag --{f}" for f in flags
                     if f not in known[name] and f != "help"]
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        s = slug(h)
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def check_links(text: str, path: Path) -> list[str]:
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):          # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{path.name}: link {target}: {file} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{path.name}: link {target}: no heading #{anchor} in {dest.name}")
    for p in REPO_PATH.findall(FENCE.sub("", text)):
        if not (ROOT / p).exists():
            problems.append(f"{path.name}: {p} does not exist")
    return problems


def check_doc(text: str, path: Path) -> list[str]:
    """Every problem of one doc (module docstring). A bare flag in its prose may belong to
    an eqfast command, to a script the doc names, to another program's command the doc shows,
    or be in EXTERNAL_FLAGS."""
    try:
        where = str(path.relative_to(ROOT))
    except ValueError:
        where = path.name
    scripts = {script_path(m) for m in SCRIPT.finditer(text)}
    codes = FENCE.findall(text) + INLINE.findall(FENCE.sub("", text))
    shown = {f for code in codes for cmd, piece in _segments(code)
             if cmd is None and _program(piece) == "external" for f in FLAG.findall(piece)}
    bare = frozenset().union(*command_flags().values(), EXTERNAL_FLAGS, shown,
                             *(script_flags(s) or () for s in scripts))
    problems = []
    for i, line in enumerate(text.splitlines(), 1):
        for pattern, what in ((SESSION, "narrates history"), (ISSUE, "cites an issue")):
            m = pattern.search(line)
            if m:
                problems.append(f"{where}:{i}: {what}: {m.group(0)!r}")
    for code in codes:
        problems += check_flags(code, where, bare)
    return problems + check_links(text, path)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc(path):
    problems = check_doc(path.read_text(), path)
    assert not problems, "\n".join(problems)


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = [n for n in console_scripts() if f"`{n}" not in readme]
    assert not missing, f"README's command table lacks {missing}"


def test_the_checker_finds_planted_errors(tmp_path):
    """Planted: a flag no parser knows (in a code block and inline), a command that does
    not exist, a broken link and anchor, a missing path, the word session, an issue."""
    (tmp_path / "other.md").write_text("# A heading\n")
    planted = tmp_path / "planted.md"
    text = ("# Planted\n\nRun:\n\n```bash\neqfast-generate --games 8 --gmaes 8 \\\n"
            "    --out runs/x && eqfast-view runs/x --split train\n```\n\n"
            "Then `eqfast-bid --hand 6-6 --leadz`, `eqfast-frobnicate --out x` and "
            "`--no-such-flag`. See [the other](other.md#a-heading), [gone](gone.md), "
            "[bad anchor](other.md#no-heading) and docs/NOPE.md. The last session "
            "found it (issue 31, #31).\n")
    problems = "\n".join(check_doc(text, planted))
    for needle in ("eqfast-generate has no flag --gmaes", "eqfast-bid has no flag --leadz",
                   "eqfast-frobnicate is not a command", "--no-such-flag is no flag",
                   "gone.md does not exist", "no heading #no-heading",
                   "docs/NOPE.md does not exist", "narrates history: 'session'",
                   "cites an issue: 'issue 31'"):
        assert needle in problems, f"{needle!r} not reported in:\n{problems}"
    for fine in ("games", "out", "split", "hand"):
        assert f"no flag --{fine}\n" not in problems + "\n"
    assert "#a-heading" not in problems
    # the real flags of the same text pass
    assert check_flags("eqfast-generate --games 8 --out x --oracle exact", "ok") == []
    # eqfast-iterate's --label-args "..." hold eqfast-generate's flags
    assert check_flags('eqfast-iterate --run r --label-args "--n-by-trick 16,1 --sem 1"', "ok") == []
    assert "no flag --gmaes (in --label-args)" in "\n".join(
        check_flags('eqfast-iterate --run r --label-args "--gmaes 1"', "bad"))
