"""The documentation stays true: README.md and docs/*.md name scripts and modules that exist, show
only options their commands accept, and link to files and headings that exist.

Command lines are read from fenced code blocks (```bash, ```sh, ```shell or no language) and
from inline code (`...`). A command line is one of

* ``scripts/NAME.sh ...`` (also after ``bash`` or ``./``): its ``--help`` must answer, and every
  ``--option`` after it must be listed there, or in the help of the command the script says it
  passes its other arguments to (a line of its help with "options of `COMMAND`" or
  "those of `COMMAND`");
* ``python -m MODULE [SUBCOMMAND] ...`` (any python): the module's (subcommand's) ``--help``;
* ``fairseq-train`` / ``fairseq-generate`` / ``fairseq-validate`` / ``fairseq-interactive``: the
  options of the parser fairseq builds with ``--user-dir rfa_doc_mt --task doc_translation``, for
  fairseq-train once per architecture of this plugin and once with its optimizer (an option is
  accepted when one of them lists it: the architecture of a line usually comes from a config).
  Their own ``--help`` exits before fairseq adds the task's and model's options.

Other programs (``pip``, ``torchrun``, ``make``, ``pytest``) are not checked. An inline code span
that starts with an option (`--rfa-gate {none,sgate}`) belongs to no command line: each of its
options must be accepted by one of the commands checked. Each distinct command's help is asked
once: bash scripts in parallel, every Python command in one process (tests/help_texts.py).
"""

import functools
import glob
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ["README.md"] + sorted(os.path.relpath(path, ROOT)
                                   for path in glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL_BLOCKS = {"", "bash", "sh", "shell"}
FAIRSEQ_PROGRAMS = {"fairseq-train", "fairseq-generate", "fairseq-validate", "fairseq-interactive"}
OPTION = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")
DELEGATE = re.compile(r"(?:options of|those of) `([^`]+)`")


# ---- reading the documents ----------------------------------------------------------------------


def read(document):
    with open(os.path.join(ROOT, document), encoding="utf-8") as f:
        return f.read()


def split_blocks(text):
    """(prose, [(language, code)]) of a markdown text: fenced blocks out of the prose."""
    prose, blocks, code, language = [], [], None, None
    for line in text.splitlines():
        fence = re.match(r"^\s*```\s*([\w-]*)\s*$", line)
        if fence and code is None:
            code, language = [], fence.group(1).lower()
        elif fence:
            blocks.append((language, "\n".join(code)))
            code = None
        elif code is not None:
            code.append(line)
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def inline_spans(prose):
    """The inline code spans of markdown prose, table cells' escaped pipes restored."""
    return [span.replace("\\|", "|") for span in re.findall(r"`([^`\n]+)`", prose)]


def logical_lines(code):
    """A shell block's lines, continuation lines joined."""
    return code.replace("\\\n", " ").splitlines()


def tokens(line, comments):
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    if not comments:
        lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote in prose: read it by whitespace
        return line.split()


def command_lines(line, comments=True):
    """The simple commands of a shell line: each a token list starting with the program (leading
    VAR=value assignments and ``time`` dropped; redirections and their targets dropped)."""
    commands, current, skip = [], [], False
    for token in tokens(line, comments):
        if skip:
            skip = False
        elif token in ("|", "||", "&&", ";", "&", "(", ")"):
            commands.append(current)
            current = []
        elif re.fullmatch(r"\d?[<>]+&?", token):
            skip = True
        elif not current and (re.fullmatch(r"[A-Za-z_]\w*=\S*", token) or token in ("time", "exec")):
            continue
        else:
            current.append(token)
    commands.append(current)
    return [command for command in commands if command]


def command_key(words):
    """("script", path) | ("module", module, first word after it or None) | ("fairseq", program), and
    the index of the first argument; None for a program this test does not check."""
    first = words[0]
    if first == "bash" and len(words) > 1:
        words, offset = words[1:], 1
        first = words[0]
    else:
        offset = 0
    first = first[2:] if first.startswith("./") else first
    if re.fullmatch(r"scripts/[\w.-]+\.sh", first):
        return ("script", first), offset + 1
    if os.path.basename(first) in FAIRSEQ_PROGRAMS:
        return ("fairseq", os.path.basename(first)), offset + 1
    if (re.fullmatch(r"(\S*/)?python(3(\.\d+)?)?", first) and len(words) > 2 and words[1] == "-m"
            and words[2].split(".")[0] == "rfa_doc_mt"):
        word = words[3] if len(words) > 3 and re.fullmatch(r"[a-z]\w*", words[3]) else None
        return ("module", words[2], word), offset + 3
    return None, None


def options_in(words):
    """The --options among a command's words (``[--x``, ``--x=1``, ``--a|--b`` and ``--a/--b`` read)."""
    found = []
    for word in words:
        found += [option for option in OPTION.findall(word) if word.lstrip("[({").startswith("--")
                  or re.search(r"[|/]--", word)]
    return found


@functools.lru_cache(maxsize=None)
def documented():
    """Every command line of the documents: [(document, line, key, options)], and the inline spans
    that are bare options: [(document, span, options)]."""
    commands, bare = [], []
    for document in DOCUMENTS:
        prose, blocks = split_blocks(read(document))
        lines = [(line, True) for language, code in blocks if language in SHELL_BLOCKS
                 for line in logical_lines(code)]
        for span in inline_spans(prose):
            if span.lstrip("[").startswith("--"):
                bare.append((document, span, options_in(tokens(span, comments=False))))
            else:
                lines.append((span, False))
        for line, comments in lines:
            for words in command_lines(line, comments):
                key, start = command_key(words)
                if key is not None:
                    commands.append((document, line.strip(), key, options_in(words[start:])))
    return commands, bare


# ---- asking the commands ------------------------------------------------------------------------


def script_help(path):
    source = read(path)
    if "--help" not in source and "help_requested" not in source:
        return None  # running it with --help would run it
    completed = subprocess.run(["bash", os.path.join(ROOT, path), "--help"], capture_output=True, text=True,
                               timeout=120, cwd=ROOT)
    return completed.stdout + completed.stderr if completed.returncode == 0 else None


def python_helps(requests):
    if not requests:
        return {}
    handle, out = tempfile.mkstemp(suffix=".json", prefix="help_texts.")
    os.close(handle)
    try:
        completed = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "help_texts.py"), out],
                                   input=json.dumps(sorted(requests)), capture_output=True, text=True,
                                   timeout=300, cwd=ROOT)
        assert completed.returncode == 0, completed.stderr[-3000:]
        with open(out) as f:
            return json.load(f)
    finally:
        if os.path.exists(out):
            os.remove(out)


def python_request(key):
    return list(key) if key[0] == "fairseq" else ["module", key[1]] + ([key[2]] if key[2] else [])


def help_key(key, helps):
    """The key of ``key``'s help text in ``helps``: a module's subcommand when it has that one."""
    if key[0] == "fairseq":
        return key[1]
    if key[0] == "module":
        return f"{key[1]} {key[2]}" if key[2] and f"{key[1]} {key[2]}" in helps else key[1]
    return key[1]


@pytest.fixture(scope="module")
def helps():
    """{help key: help text or None} for every command the documents show, and the commands their
    scripts pass options to; "delegates": {script: [help keys]}. The Python commands' helps are
    asked while the scripts answer; a second round asks for delegates not asked for yet."""
    commands, _ = documented()
    keys = {key for _, _, key, _ in commands}
    scripts = sorted(key[1] for key in keys if key[0] == "script" and os.path.isfile(os.path.join(ROOT, key[1])))
    requests = {tuple(python_request(key)) for key in keys if key[0] != "script"}
    for script in scripts:  # prefetch: a script's help is usually its opening comment
        requests |= {tuple(python_request(key)) for command in DELEGATE.findall(read(script))
                     for words in command_lines(command) for key in [command_key(words)[0]]
                     if key is not None and key[0] != "script"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        python = pool.submit(python_helps, [list(request) for request in requests])
        texts = dict(zip(scripts, pool.map(script_help, scripts)))
        texts.update(python.result())
    delegates = {}
    for script, text in texts.items():
        for command in DELEGATE.findall(text or ""):
            for words in command_lines(command):
                key, _ = command_key(words)
                if key is not None:
                    delegates.setdefault(script, []).append(key)
    more = {tuple(python_request(key)) for found in delegates.values() for key in found if key[0] != "script"} \
        - requests
    texts.update(python_helps([list(request) for request in more]))
    # a script that passes its options to another script (scripts/gpu_run.sh to scripts/bench_gpu.sh)
    texts.update({key[1]: script_help(key[1]) for found in delegates.values() for key in found
                  if key[0] == "script" and key[1] not in texts})
    texts["delegates"] = {script: [help_key(key, texts) for key in found] for script, found in delegates.items()}
    return texts


def accepted(key, helps):
    """The options the command of ``key`` lists, with those of the commands it passes options to."""
    texts = [helps.get(help_key(key, helps))]
    if key[0] == "script":
        texts += [helps.get(delegate) for delegate in helps["delegates"].get(key[1], [])]
    return set(OPTION.findall("\n".join(text for text in texts if text)))


# ---- the tests ----------------------------------------------------------------------------------


def module_exists(module):
    if module.split(".")[0] == "rfa_doc_mt":
        path = os.path.join(ROOT, *module.split("."))
        return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__main__.py"))
    return importlib.util.find_spec(module) is not None


def test_named_scripts_and_modules_exist():
    missing = []
    for document in DOCUMENTS:
        text = read(document)
        for script in sorted(set(re.findall(r"(?<![\w/])scripts/[\w.-]+\.sh", text))):
            if not os.path.isfile(os.path.join(ROOT, script)):
                missing.append(f"{document}: {script} does not exist")
        for module in sorted(set(re.findall(r"python3?\s+-m\s+([A-Za-z_][\w.]*)", text))):
            if not module_exists(module):
                missing.append(f"{document}: python -m {module}: no such module")
    assert not missing, "\n".join(missing)


def test_every_command_answers_help(helps):
    commands, _ = documented()
    silent = sorted({f"{key[1]}{' ' + key[2] if key[0] == 'module' and key[2] else ''}"
                     for _, _, key, _ in commands
                     if not helps.get(help_key(key, helps)) or helps[help_key(key, helps)].startswith("ERROR")})
    assert not silent, "these commands print no --help (or fail to):\n" + "\n".join(
        f"{name}: {(helps.get(name) or '')[:300]}" for name in silent)


def test_every_option_shown_is_accepted_by_its_command(helps):
    commands, bare = documented()
    wrong = []
    for document, line, key, options in commands:
        if not helps.get(help_key(key, helps)):
            continue  # test_every_command_answers_help says so
        known = accepted(key, helps)
        wrong += [f"{document}: {option} is not an option of {help_key(key, helps)}: {line}"
                  for option in options if option not in known]
    every = set().union(*(accepted(key, helps) for _, _, key, _ in commands))
    wrong += [f"{document}: {option} (in `{span}`) is not an option of any command shown"
              for document, span, options in bare for option in options if option not in every]
    assert not wrong, "\n".join(wrong)


def heading_anchors(document):
    """GitHub's anchors of a markdown file's headings."""
    prose, _ = split_blocks(read(document))
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_relative_links_resolve():
    broken = []
    for document in DOCUMENTS:
        prose, _ = split_blocks(read(document))
        prose = re.sub(r"`[^`\n]*`", "", prose)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z][\w+.-]*:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(document), path)) if path else document
            if not os.path.exists(os.path.join(ROOT, linked)):
                broken.append(f"{document}: ({target}): {linked} does not exist")
            elif anchor and linked.endswith(".md") and anchor not in heading_anchors(linked):
                broken.append(f"{document}: ({target}): {linked} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_the_documents_are_read():
    """The parsing above finds what it is meant to check (guards against a test that checks nothing)."""
    commands, bare = documented()
    keys = {key[0] for _, _, key, _ in commands}
    assert keys == {"script", "module", "fairseq"}
    assert any(key == ("script", "scripts/train.sh") and "--distributed-world-size" in options
               for _, _, key, options in commands)
    assert any(options for _, _, options in bare)
