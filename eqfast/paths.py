"""Where the shipped weights live (eqfast/models), in a module without torch, so that a
command's --help can name them as defaults at once."""
from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = MODELS / "default.safetensors"       # the CPU oracle (docs/ORACLE.md)
ACCURATE_MODEL = MODELS / "accurate.safetensors"     # the GPU oracle
DEFAULT_STAGE2 = MODELS / "stage2.safetensors"       # the Stage 2 player (docs/STAGE2.md)
