"""Mooncake's command lines (gflags: ``--name=value``, ``--name value``, ``-name``, booleans as
``--name``, ``--name=false`` or ``--noname``) mapped onto yuebing's commands, one table per
command: each Mooncake flag yuebing honours becomes yuebing flags; any other is refused by
name, so that a launch line never silently means something else."""

import os
import shutil
import sys


class FlagError(Exception):
    """A command line that cannot be run: the message says which flag and why."""


_TRUE, _FALSE = ("true", "1", "yes", "t", "y"), ("false", "0", "no", "f", "n")


def parse(argv, table, booleans):
    """``{name: value}`` of ``argv`` (names as Mooncake spells them). ``table`` holds the
    names known; ``booleans`` those that take no value."""
    out = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("-") or arg in ("-", "--"):
            raise FlagError(f"unexpected argument {arg!r}: flags are --name=value")
        name, eq, value = arg.lstrip("-").partition("=")
        if name not in table and name.startswith("no") and name[2:] in booleans and not eq:
            name, value, eq = name[2:], "false", "="
        if name not in table:
            raise FlagError(f"--{name}: not a flag yuebing's mooncake commands know "
                            "(or one yuebing cannot honour); see --help")
        if name in booleans:
            value = value.lower() if eq else "true"
            if value not in _TRUE + _FALSE:
                raise FlagError(f"--{name}={value}: expected true or false")
            value = value in _TRUE
        elif not eq:
            if not args:
                raise FlagError(f"--{name} needs a value")
            value = args.pop(0)
        out[name] = value
    return out


def refused(name, why):
    """A table entry for a Mooncake flag yuebing cannot honour: its use is an error."""
    def refuse(value):
        raise FlagError(f"--{name}: {why}")
    return refuse


def seconds_to_ms(flag):
    """A mapping of a Mooncake flag in seconds onto a yuebing flag in milliseconds."""
    return lambda v: [flag, str(int(float(v) * 1000))]


def duration_ms(flag):
    """A mapping of a Mooncake duration (raw milliseconds, or with a unit: ``5s``, ``500ms``,
    ``2m``, ``1h``) onto a yuebing flag in milliseconds."""
    units = (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000))

    def convert(v):
        text = str(v).strip().lower()
        for unit, scale in units:
            if text.endswith(unit) and text[:-len(unit)].replace(".", "", 1).isdigit():
                return [flag, str(int(float(text[:-len(unit)]) * scale))]
        if not text.isdigit():
            raise FlagError(f"{v!r} is not a duration (milliseconds, or 5s, 2m, 1h)")
        return [flag, text]
    return convert


def same(flag):
    """A Mooncake flag with the same meaning and units as a yuebing flag."""
    return lambda v: [flag, str(v)]


def ignored(value):
    """A Mooncake flag that changes nothing in yuebing (a tuning knob of its runtime)."""
    return []


def yuebing_binary():
    """The ``yuebing`` binary: ``$YUEBING_BIN``, else ``yuebing`` on ``PATH``."""
    path = os.environ.get("YUEBING_BIN") or shutil.which("yuebing")
    if not path:
        raise FlagError("the yuebing binary was not found: install it on PATH "
                        "(cargo install --path .) or set YUEBING_BIN")
    return path


def translate(argv, table, booleans):
    """yuebing's arguments for Mooncake's ``argv``, and the parsed Mooncake flags."""
    flags = parse(argv, table, booleans)
    out = []
    for name, value in flags.items():
        out += table[name](value)
    return out, flags


def fail(prog, e):
    """Reports a command line that cannot run, as gflags does (exit status 1)."""
    print(f"{prog}: {e}", file=sys.stderr)
    return 1
