"""eqfast: posterior-weighted information-set E[Q] data generation for Texas 42.

Data flow: rules -> solver -> oracle -> engine (sample -> tokenize -> query -> reduce ->
select -> record) -> data. `eqfast.kernels` holds the Triton version of each device stage.
"""
__version__ = "0.1.0"
