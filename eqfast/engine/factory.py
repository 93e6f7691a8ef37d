"""One way to build an engine: every command (eqfast-generate) and the profiling scripts
call `build_engine`, and check their flags with `pipeline_problem` before anything is
loaded, so the choice between the two pipelines and its rules live here.

    pipeline   engine
    reference  `Engine` (pipeline.py): the readable loop; de-duplicates oracle rows; adaptive
               sampling (sem), per-trick world budgets and a control variate; any oracle
    fast       `FastEngine` (fast.py): static-shape steps, CUDA graphs on CUDA, a writer
               thread; a fixed N; on CUDA a network oracle only (the C solver cannot run
               inside a CUDA graph)
    auto       fast on CUDA, reference elsewhere

Both answer play(seeds) and run(batches, sink, on_batch) with the same records.
"""
from __future__ import annotations

import torch

from .fast import FastEngine
from .pipeline import Engine, EngineConfig

PIPELINES = ("auto", "fast", "reference")


def resolve_pipeline(pipeline: str, device) -> str:
    """'fast' or 'reference' for a pipeline name and a device."""
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {', '.join(PIPELINES)}, got {pipeline!r}")
    cuda = torch.device(device).type == "cuda"
    return "fast" if pipeline == "fast" or (pipeline == "auto" and cuda) else "reference"


def pipeline_problem(pipeline: str, device, cfg: EngineConfig, solver_in_step: bool,
                     own_behaviour: bool = False, play_policy: bool = False) -> str | None:
    """Why `cfg` cannot run on that pipeline and device (None if it can). solver_in_step:
    the oracle calls the exact solver (exact, or a hybrid); own_behaviour: the posterior has
    a behaviour model of its own (not the main oracle); play_policy: the moves come from a
    play policy (`Engine(play_policy=)`)."""
    if resolve_pipeline(pipeline, device) != "fast":
        return None
    cuda = torch.device(device).type == "cuda"
    if play_policy:
        return "--play-policy runs on the reference pipeline only; use --pipeline reference"
    if own_behaviour and cfg.posterior is not None:
        return "--behaviour-oracle runs on the reference pipeline only; use --pipeline reference"
    if cfg.cv_samples is not None:
        return ("a control variate (--control-variate) runs on the reference pipeline only; "
                "use --pipeline reference")
    if cfg.sem is not None or cfg.n_by_trick is not None or (solver_in_step and cuda):
        return ("the fast pipeline needs a fixed --n-samples (no --sem, no --n-by-trick) and, "
                "on CUDA, a pure network oracle (no exact/--exact-tricks: the C solver cannot "
                "run inside a CUDA graph); use --pipeline reference")
    return None


def uses_solver(oracle) -> bool:
    from ..oracle.exact import ExactOracle, HybridOracle

    return isinstance(oracle, (ExactOracle, HybridOracle))


def build_engine(oracle, cfg: EngineConfig, *, pipeline: str = "auto", backend: str = "auto",
                 device="cpu", graphs: bool | None = None, cv_oracle=None,
                 behaviour_oracle=None, play_policy=None):
    """The engine for (pipeline, device): `FastEngine` (graphs: None = on CUDA) or `Engine`
    (with the control variate's and the behaviour model's oracles and the play policy, if
    any). ValueError
    (the text of `pipeline_problem`) for a combination that cannot run."""
    problem = pipeline_problem(pipeline, device, cfg, uses_solver(oracle),
                               own_behaviour=behaviour_oracle is not None,
                               play_policy=play_policy is not None)
    if problem is not None:
        raise ValueError(problem)
    if resolve_pipeline(pipeline, device) == "fast":
        return FastEngine(oracle, cfg, backend=backend, device=device, graphs=graphs)
    return Engine(oracle, cfg, backend=backend, device=device, cv_oracle=cv_oracle,
                  behaviour_oracle=behaviour_oracle, play_policy=play_policy)


def pipeline_name(engine) -> str:
    """'reference', 'fast (CUDA graphs)' or 'fast (no graphs)'."""
    if isinstance(engine, FastEngine):
        return "fast (CUDA graphs)" if engine.graphs else "fast (no graphs)"
    return "reference"
