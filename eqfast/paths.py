"""Where the shipped weights live (eqfast/models), in a module without torch, so that a
command's --help can name them as defaults at once."""
from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = MODELS / "default.safetensors"       # the CPU oracle (docs/ORACLE.md)
ACCURATE_MODEL = MODELS / "accurate.safetensors"     # the GPU oracle
DEFAULT_STAGE2 = MODELS / "stage2.safetensors"       # the Stage 2 player (docs/STAGE2.md)


def stage2_weights(arg: "str | Path | None" = None) -> Path:
    """The file a Stage 2 spec's WEIGHTS part names: the shipped model when empty,
    eqfast/models/NAME.safetensors for the bare name of a file there (`stage2:stage2_eq`,
    portable across checkouts, as `eq:default` is for the oracle), else the path as given
    (a Path always)."""
    if arg is None or arg == "":
        return DEFAULT_STAGE2
    if not isinstance(arg, str):
        return Path(arg)
    if "/" not in arg and "." not in arg and (MODELS / f"{arg}.safetensors").is_file():
        return MODELS / f"{arg}.safetensors"
    return Path(arg)
