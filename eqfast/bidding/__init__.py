"""The bidding evaluator (docs/BIDDING.md): contract x bid-level matrices of one hand from
exact perfect-information values over sampled completions, labelled by completion model
and method, with Wilson intervals, score quantiles and CVaR, the fused number beside the
valid contract choice, a lower bracket from imperfect-information play, sequential
stopping, and a network path with exact audits.

    from eqfast.bidding import evaluate
    r = evaluate("6-6,6-5,6-4,5-5,4-4,3-3,2-2", n=500)
    r["contracts"][6]["cells"][0]["p_upper"]   # sixes trump, bid 30
"""
from .audit import AuditConfig, audit_network
from .completions import MODELS, CompletionModel, UniformCompletions, completion_model
from .hand import HandError, format_hand, parse_hand
from .levels import CONTRACTS, BidLevel, bid_levels, contract_name, parse_contracts
from .matrix import SCHEMA, evaluate
from .report import format_table
from .stats import contract_summary, cvar, fusion, sample_quantile, wilson
from .stopping import StoppingRule
from .values import exact_values, network_values

__all__ = ["AuditConfig", "audit_network", "MODELS", "CompletionModel", "UniformCompletions",
           "completion_model", "HandError", "format_hand", "parse_hand", "CONTRACTS", "BidLevel",
           "bid_levels", "contract_name", "parse_contracts", "SCHEMA", "evaluate", "format_table",
           "contract_summary", "cvar", "fusion", "sample_quantile", "wilson", "StoppingRule",
           "exact_values", "network_values"]
