"""Contracts and bid levels, and what it takes to make them.

A contract is a declaration 0..9 (docs/RULES.md "Declarations"; 8 = doubles as a suit is one of
them). A bid level is either a point bid of 30..41 points or a mark bid of m marks (shown
as 42, 84, ... = 42 m). Every mark bid needs all 42 points: the marks set the stake, not
the make condition. The stake of a point bid (and of 42 = 1 mark) is 1 mark.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..rules.tables import DECL_NAMES, N_DECLS, TOTAL_POINTS

CONTRACTS = tuple(range(N_DECLS))
MIN_POINT_BID = 30
MAX_MARKS = 7


@dataclass(frozen=True)
class BidLevel:
    label: str      # "30".."41", "42" (1 mark), "84" (2 marks), ...
    need: int       # the bidder team's points needed to make (at most 42)
    marks: int      # the stake: marks won when made, lost when set

    def made(self, points):
        return points >= self.need


def bid_levels(max_marks: int = 2) -> tuple[BidLevel, ...]:
    """30..41 points, then 1..max_marks marks (42, 84, ...)."""
    if not 1 <= max_marks <= MAX_MARKS:
        raise ValueError(f"max_marks must be 1..{MAX_MARKS}, got {max_marks}")
    points = [BidLevel(str(k), k, 1) for k in range(MIN_POINT_BID, TOTAL_POINTS)]
    marks = [BidLevel(str(TOTAL_POINTS * m), TOTAL_POINTS, m) for m in range(1, max_marks + 1)]
    return tuple(points + marks)


def contract_name(decl: int) -> str:
    name = DECL_NAMES[decl]
    return f"{name} trump" if decl < 7 else name


def parse_contracts(text: str) -> tuple[int, ...]:
    """"all" or a comma list of declarations 0..9."""
    if text.strip() == "all":
        return CONTRACTS
    try:
        out = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        out = ()
    if not out or any(not 0 <= d < N_DECLS for d in out):
        raise ValueError(f"contracts must be 'all' or declarations 0..9 separated by commas, "
                         f"got {text!r}")
    return out
