"""eqfast build: the Python package, `kernels/` installed as `eqfast.kernels`, and the C
solver extension (eqfast/solver/_csolver.c; why C: docs/ARCHITECTURE.md "Dependencies")."""
import re
from pathlib import Path

from setuptools import Extension, setup

here = Path(__file__).parent
version = re.search(r'__version__ = "([^"]+)"', (here / "eqfast/__init__.py").read_text()).group(1)

packages = ["eqfast"] + ["eqfast." + p.parent.relative_to(here / "eqfast").as_posix().replace("/", ".")
                         for p in sorted((here / "eqfast").rglob("__init__.py")) if p.parent != here / "eqfast"]

setup(
    name="eqfast",
    version=version,
    description="GPU-first E[Q] training-data engine for Texas 42 (Triton kernels, exact solver, Stage 1 oracle)",
    python_requires=">=3.10",
    packages=packages + ["eqfast.kernels"],
    package_dir={"eqfast.kernels": "kernels"},
    package_data={"eqfast": ["models/*.safetensors", "models/*.json"]},
    # optional: a machine without a C compiler still gets the network path (the exact
    # oracle then reports the missing extension when asked for)
    ext_modules=[Extension("eqfast.solver._csolver", ["eqfast/solver/_csolver.c"],
                           extra_compile_args=["-O3", "-std=c11"], optional=True)],
    # no torch pin here: the CPU machines' README command pins 2.13.0, GPU machines bring
    # their own CUDA build. triton >= 3.4: tl.randint4x with int64 offsets (the world
    # sampler's Philox streams) gives other numbers before 3.4.
    install_requires=["torch>=2.4", "triton>=3.4", "numpy>=1.24", "safetensors>=0.4"],
    extras_require={
        # the ONNX export and its check (eqfast-export-oracle --format onnx)
        "onnx": ["onnx>=1.16", "onnxscript>=0.2", "onnxruntime>=1.18"],
        "test": ["pytest>=7", "pytest-xdist>=3", "pytest-benchmark>=4", "onnx>=1.16",
                 "onnxscript>=0.2", "onnxruntime>=1.18", "ruff>=0.6", "matplotlib>=3.7"],
        # eqfast-report's figures
        "report": ["matplotlib>=3.7"],
        "bench": ["pytest-benchmark>=4"],
        # NVTX ranges through the `nvtx` package; without it torch.cuda.nvtx is used on CUDA
        "profile": ["nvtx>=0.2"],
    },
    entry_points={"console_scripts": [
        "eqfast-solve=eqfast.cli.solve:main",
        "eqfast-label-oracle=eqfast.cli.label_oracle:main",
        "eqfast-train-oracle=eqfast.cli.train_oracle:main",
        "eqfast-eval-oracle=eqfast.cli.eval_oracle:main",
        "eqfast-oracle-ladder=eqfast.cli.oracle_ladder:main",
        "eqfast-export-oracle=eqfast.cli.export_oracle:main",
        "eqfast-generate=eqfast.cli.generate:command",
        "eqfast-relabel=eqfast.cli.relabel:main",
        "eqfast-view=eqfast.cli.view:main",
        "eqfast-validate=eqfast.cli.validate:main",
        "eqfast-report=eqfast.cli.report:main",
        "eqfast-arena=eqfast.cli.arena:main",
        "eqfast-train-stage2=eqfast.cli.train_stage2:main",
        "eqfast-eval-stage2=eqfast.cli.eval_stage2:main",
        "eqfast-average-stage2=eqfast.cli.average_stage2:main",
        "eqfast-iterate=eqfast.cli.iterate:main",
        "eqfast-bid=eqfast.cli.bid:main",
    ]},
)
