"""What every eqfast command shares: the --help layout, the --device check, and a quiet
exit when the reader of stdout goes away (`eqfast-view DS --print 50 | head -1`)."""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to each flag's help, except where X says nothing: an on/off
    switch (False) or None, whose help explains what happens when the flag is left out."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def path_arg(text: str) -> str:
    """argparse type of a path flag: refuses an empty value, which an unset shell variable
    gives (`--out "$DIR"`) and which would otherwise mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (an unset shell variable?): name a file "
                                         "or directory")
    return text


def path_type(text: str):
    """path_arg as a pathlib.Path."""
    from pathlib import Path
    return Path(path_arg(text))


def quiet_on_closed_stdout(main):
    """Wrap a command's main so that a reader closing the pipe ends it with status 0 and
    no traceback: the reader asked for less output, which is not an error of the command."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            status = main(*args, **kwargs)
            sys.stdout.flush()
            return status
        except BrokenPipeError:
            # the interpreter flushes stdout once more at exit, which would raise again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 0
    return wrapper


def records_dir_problem(data, splits) -> str | None:
    """Why `data` is not an eqfast-generate output with shards in each of `splits` (None
    if it is), as a --data message."""
    from pathlib import Path

    from ..data.shards import ShardError, split_shards

    root = Path(data)
    if not root.is_dir():
        return f"--data {data}: no such directory"
    for split in splits:
        try:
            if not split_shards(root / split):
                return (f"--data {data}: no shards in {root / split} (expected the output of "
                        "eqfast-generate --out DIR)")
        except ShardError as e:
            return f"--data {e}"
    return None


def device_problem(device: str) -> str | None:
    """Why --device cannot be used here (None if it can). Imports torch only to ask for
    CUDA, so a bad flag is reported at once."""
    if re.fullmatch(r"cpu(:0)?|cuda(:\d+)?", device or "") is None:
        return f"--device must be cpu, cuda or cuda:N, got {device!r}"
    if device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            return f"--device {device} but no CUDA device is available"
    return None
