"""eqfast: posterior-weighted information-set E[Q] data generation for Texas 42.

Data flow: rules -> solver -> oracle -> engine (sample -> tokenize -> query -> reduce ->
select -> record) -> data. `eqfast.kernels` holds the Triton version of each device stage.
"""
__version__ = "0.1.0"


def __getattr__(name):
    # the one-call API, imported on first use so `import eqfast` stays light (no torch)
    if name == "generate_eq_game":
        from .engine.game import generate_eq_game
        return generate_eq_game
    raise AttributeError(f"module 'eqfast' has no attribute {name!r}")
