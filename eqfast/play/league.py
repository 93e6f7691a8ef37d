"""A league: every pair of a panel of policies plays the same duplicate deals until its
point differential is resolved, and one rating per policy sums it up.

Why a league: a single match says who is better between two players; a benchmark must
place every player on one scale, with intervals, from results that are cheap to extend
(a new policy adds its pairs; a stopped run continues). This module plays and rates;
eqfast/cli/arena.py (`eqfast-arena --league DIR`) is the command and docs/PLAY.md
("League") the user's view.

Deals. Pair (A, B) plays deals seed_start, seed_start + 1, ... in that order, each twice
(A as team 0, then as team 1; eqfast/play/arena.py), so every pair's first n deals are the
same n deals. `DEFAULT_SEED_START` = 3,000,000,000 lies above every seed range the project
trains, labels or evaluates on (Stage 2 data from 0; oracle labels at DEAL_BASE + 10^7 w,
below 2 x 10^8, and at 2 x 10^9; oracle evaluations at 10^9; benchmarks at 5..9 x 10^6 and
8.8 x 10^8; arena runs at 0, 10^6, 2 x 10^6) and below eqfast-iterate's (matches of a
generation against its parent from 4 x 10^9, its games from 10^10:
eqfast/cli/iterate.py), so no policy has seen a league deal. Seeds
are 64-bit everywhere (`eqfast.rules.deal`); the E[Q] player's seeds travel as int64.

Stopping. Pairs play in chunks of `chunk_hands`; after each chunk a pair is finished when
it has at least `min_hands` hands and the half-width of its 95% Student-t interval of
points per hand (over deals) is at most `target_ci`, or when it reaches `max_hands`. The
rule looks only at the interval's width, a function of the spread of the per-deal results
and of n, never at the mean, so it cannot stop a pair on a lucky streak in either
direction: the interval keeps (very nearly) its 95% coverage. (A rule "stop when the
interval excludes 0" would not: it peeks at the mean.)

Schedule. The next chunk goes to the unfinished pair that has spent the least time so far
(seconds inside both sides' decisions), ties to the fewest deals: every pair gets its
first chunk, then each gets the same time until it is resolved. Pairs of cheap players
resolve in minutes while one chunk of an expensive player (eq:exact:100 decides about 10
times a second on one core) is under way, and a run cut short by a time budget or a kill
leaves the expensive pairs with equal shares of what was left.

State, in DIR: `league_state.json` (the settings that shape the games: seed start, run
seed, declaration mode; the panel, with a fingerprint of each weights file) and
`pairs/pair-I-J.npz` per pair (panel indices I < J; A's points in both plays of every
deal, the declarer's team, decisions and seconds of both sides), each written atomically
(eqfast/utils/atomic.py) after every chunk. A kill loses at most the chunk in flight;
running again continues every pair where its file ends and never replays a saved deal.
A different seed start, run seed or declaration mode, a panel that drops a policy or
weights that changed under a policy's name are refused (`LeagueStateError`); a panel
that adds policies appends them and plays their pairs. `rename_entry` re-points a stored
policy to another spec with the same weights (a shipped model kept under a new name when a
new one takes the default name), in the state and in every pair file. The stopping rule (target, minimum,
maximum, chunk) may change between runs: it decides only how far each pair goes.

Ratings:
- points (the headline): r_A - r_B = the expected points per hand of A against B, fit by
  weighted least squares over the pairs' mean differentials (weight 1 / the squared
  standard error of each mean), anchored at `rules` = 0 when it is in the panel (else
  the panel mean = 0). Intervals: +-1.96 standard errors from the sandwich covariance
  A (sum over deals of v_d v_d') A, A = (X' W X)^-1, v_d = X' W u_d, u_d what deal d
  adds to each pair's mean: every pair plays the same deals, and a deal that favours a
  player favours it against all its opponents, so pairs that share a player are not
  independent (on the league of docs/PLAY.md this widens the ratings' intervals 1.4 to
  1.8 times over (X' W X)^-1, the covariance of independent pairs). chi^2 = the weighted
  sum of squared residuals on P - (K - 1) degrees of freedom: near 1 per degree of
  freedom when the differentials are additive; well above, the ratings summarize a matrix
  that is not (read the matrix) and their intervals are too narrow.
- Bradley-Terry on hands won (more than 21 points; a 21-21 tie counts half): P(A wins a
  hand against B) = 1 / (1 + exp(theta_B - theta_A)), fit by Newton's method with one
  virtual tied hand per pair so a whitewash still has a finite fit (with thousands of
  hands per pair it moves theta by about 1e-4). Intervals: the sandwich of the Fisher
  information with the scores summed by deal (the two hands of a deal, and one deal
  across pairs, are not independent). It is shown in log-odds and in Elo points
  (400 / ln 10 per unit).

Contract view: the declarer's team (first leader, `setup_games`) makes a 30 bid when it
takes >= 30 of the 42 points and all 42 for a 42 bid; the defenders set a 30 bid when the
declarer's team takes < 30. In a duplicate deal a policy declares in exactly one of the two
plays, so it declares in half its hands and defends in the other half. Per policy the
shares pool all its hands (against every opponent; pairs that played longer weigh more).
Every pair plays the same deals, so the hands pooled over opponents are not independent:
the 95% interval is Wilson's on the effective number of hands, n p (1 - p) over the
variance of the hits summed by deal (capped at n), which on the league's panel is a fifth
to a third of the hands. The declarations come from the declarer's heuristic
(eqfast/engine/games.py), not from an auction, so "made 30" reads "would have made a 30
bid on this declaration".
"""
from __future__ import annotations

import datetime
import json
import math
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..engine.games import parse_decl_mode
from ..rules.tables import TOTAL_POINTS
from ..utils.atomic import atomic_path, atomic_write_text
from .arena import (HALF, Clock, mean_interval, play_batch, t_quantile, wilson_by_deal,
                    won_by_deal)
# the panel, first deal and stopping defaults (defined without torch, for --help)
from .names import (DEFAULT_CHUNK_HANDS, DEFAULT_MAX_HANDS, DEFAULT_MIN_HANDS,  # noqa: F401
                    DEFAULT_PANEL, DEFAULT_SEED_START, DEFAULT_TARGET_CI)
from .policies import Policy

#: the rating anchor (rating 0) when it is in the panel
ANCHOR = "rules"
MADE = 30
STATE_FILE = "league_state.json"
REPORT_FILE = "league.json"
PAIRS_DIR = "pairs"
STATE_VERSION = 1
Z95 = 1.959963984540054
#: Elo points per unit of Bradley-Terry log-odds
ELO_PER_LOGIT = 400 / math.log(10)
#: floor of a pair's squared standard error in the WLS weights (a pair whose every deal
#: gave the same differential, e.g. two policies that play alike, would get infinite weight)
MIN_VAR = 1e-6


#: the command's flag of each setting, for messages
FLAGS = {"seed_start": "--seed-start", "run_seed": "--run-seed", "decl": "--decl",
         "target_ci": "--target-ci", "min_hands": "--min-hands", "max_hands": "--max-hands",
         "chunk_hands": "--chunk"}


class LeagueStateError(ValueError):
    """DIR holds a league that this run may not continue (another seed start, a missing
    policy, changed weights, an unreadable state file)."""


@dataclass(frozen=True)
class LeagueSettings:
    seed_start: int = DEFAULT_SEED_START
    run_seed: int = 0
    decl: str = "hand"
    target_ci: float = DEFAULT_TARGET_CI
    min_hands: int = DEFAULT_MIN_HANDS
    max_hands: int = DEFAULT_MAX_HANDS
    chunk_hands: int = DEFAULT_CHUNK_HANDS

    #: the settings that shape the games: a state written with others is refused
    SHAPING = ("seed_start", "run_seed", "decl")

    def problem(self) -> str | None:
        """The first invalid setting, named by its flag (None if none)."""
        if self.seed_start < 0:
            return f"--seed-start must be >= 0, got {self.seed_start}"
        try:
            parse_decl_mode(self.decl)
        except ValueError:
            return f"--decl must be 'hand', 'uniform' or a declaration 0..9, got {self.decl!r}"
        if not (self.target_ci > 0 and math.isfinite(self.target_ci)):
            return f"--target-ci must be a positive number of points, got {self.target_ci}"
        for flag, v in (("--chunk", self.chunk_hands), ("--min-hands", self.min_hands),
                        ("--max-hands", self.max_hands)):
            if v < 4 or v % 2:
                return f"{flag} must be an even number >= 4 (hands = 2 x deals), got {v}"
        if self.max_hands < self.min_hands:
            return (f"--max-hands {self.max_hands} is below --min-hands {self.min_hands}")
        return None


# ---------------------------------------------------------------------------- one pair
@dataclass
class PairState:
    """The deals pair (panel[i], panel[j]) has played: row k is deal seed_start + k.
    a_points [n, 2]: A's team points with A as team 0 (column 0) and as team 1 (column 1);
    declarer_team [n]: the declarer's team, so A declared in column declarer_team."""
    i: int
    j: int
    a: str
    b: str
    a_points: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int8))
    declarer_team: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    decisions: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(2, np.float64))

    @property
    def deals(self) -> int:
        return len(self.a_points)

    @property
    def hands(self) -> int:
        return 2 * self.deals

    @property
    def deal_diffs(self) -> np.ndarray:
        return (2 * self.a_points.astype(np.float64) - TOTAL_POINTS).mean(axis=1)

    @property
    def deal_wins(self) -> np.ndarray:
        """A's hands won on each deal (0..2; a 21-21 tie counts half)."""
        return won_by_deal(self.a_points)

    def half_width(self) -> float | None:
        """Half-width of the 95% t interval of points per hand (None below 2 deals)."""
        if self.deals < 2:
            return None
        return t_quantile(0.975, self.deals - 1) * float(self.deal_diffs.std(ddof=1)) \
            / math.sqrt(self.deals)

    def status(self, s: LeagueSettings) -> str:
        """'target' (resolved), 'cap' (max hands reached) or 'playing'."""
        if self.hands >= s.max_hands:
            return "cap"
        hw = self.half_width()
        if self.hands >= s.min_hands and hw is not None and hw <= s.target_ci:
            return "target"
        return "playing"

    def append(self, points: np.ndarray, declarer: np.ndarray, clocks: dict[str, Clock]):
        self.a_points = np.concatenate([self.a_points, points.astype(np.int8)])
        self.declarer_team = np.concatenate([self.declarer_team, declarer.astype(np.int8)])
        self.decisions = self.decisions + [clocks["a"].decisions, clocks["b"].decisions]
        self.seconds = self.seconds + [clocks["a"].seconds, clocks["b"].seconds]

    # ------------------------------------------------------------------ files
    def save(self, path: Path, seed_start: int) -> None:
        """Write atomically: a kill leaves the previous file or this one, whole."""
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:        # a file object: np.savez would add ".npz"
                np.savez(f, a=np.array(self.a), b=np.array(self.b),
                         seed_start=np.int64(seed_start), a_points=self.a_points,
                         declarer_team=self.declarer_team, decisions=self.decisions,
                         seconds=self.seconds)

    @classmethod
    def load(cls, path: Path, i: int, j: int, a: str, b: str, seed_start: int) -> "PairState":
        try:
            with np.load(path) as z:
                got = (str(z["a"]), str(z["b"]), int(z["seed_start"]))
                pair = cls(i, j, a, b, z["a_points"].astype(np.int8),
                           z["declarer_team"].astype(np.int8), z["decisions"].astype(np.int64),
                           z["seconds"].astype(np.float64))
        except (OSError, ValueError, KeyError) as e:
            raise LeagueStateError(f"{path}: not a readable pair state ({e})") from None
        if got != (a, b, seed_start):
            raise LeagueStateError(f"{path}: holds {got[0]} v {got[1]} from seed {got[2]}, "
                                   f"expected {a} v {b} from seed {seed_start}")
        if pair.a_points.ndim != 2 or pair.a_points.shape[1] != 2 \
                or pair.declarer_team.shape != (pair.deals,):
            raise LeagueStateError(f"{path}: arrays of inconsistent shapes")
        return pair


# ---------------------------------------------------------------------------- the league
def pair_path(directory: Path, i: int, j: int) -> Path:
    """The state file of pair (I, J), I < J panel indices."""
    return Path(directory) / PAIRS_DIR / f"pair-{i:02d}-{j:02d}.npz"


@dataclass
class Entry:
    """One panel member: the spec it was built from, its name, whether it cheats, and a
    fingerprint of its weights (None for a policy without a weights file)."""
    spec: str
    name: str
    cheating: bool
    identity: str | None


def policy_identity(spec: str, policy) -> str | None:
    """A fingerprint of what a policy's play depends on beyond its name: the sha256 of a
    Stage 2 weights file (`stage2`, `search`, `endgame`; of both for `split`), or of an E[Q] player's oracle
    weights, as the policy's `identity` gives it; None otherwise."""
    ident = getattr(policy, "identity", None)
    if isinstance(ident, dict) and ident.get("sha256"):
        return str(ident["sha256"])
    return None


class League:
    """The panel, the settings and every pair's state in `directory`. Build it with
    `open_league`; `run` plays, `report` summarizes."""

    def __init__(self, directory: Path, settings: LeagueSettings, entries: list[Entry],
                 policies: list[Policy]):
        self.directory = Path(directory)
        self.settings = settings
        self.entries = entries
        self.policies = policies
        self.pairs: list[PairState] = []
        for i in range(len(entries)):
            for j in range(i + 1, len(entries)):
                path = self.pair_path(i, j)
                a, b = entries[i].name, entries[j].name
                self.pairs.append(PairState.load(path, i, j, a, b, settings.seed_start)
                                  if path.exists() else PairState(i, j, a, b))

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def pair_path(self, i: int, j: int) -> Path:
        return pair_path(self.directory, i, j)

    def unfinished(self) -> list[PairState]:
        return [p for p in self.pairs if p.status(self.settings) == "playing"]

    def next_pair(self) -> PairState | None:
        """Least time spent first, then fewest deals, then panel order (module doc)."""
        todo = self.unfinished()
        return min(todo, key=lambda p: (float(p.seconds.sum()), p.deals, p.i, p.j)) \
            if todo else None

    def projected_hands(self) -> int:
        """Hands every pair will have when finished, projected from its spread so far (the
        spread of a pair with fewer than 2 deals is taken as 9 points per hand, about the
        widest measured: random against perfect)."""
        s, total = self.settings, 0
        for p in self.pairs:
            if p.status(s) != "playing":
                total += p.hands
                continue
            sd = float(p.deal_diffs.std(ddof=1)) if p.deals >= 2 else 9.0
            need = 2 * math.ceil((Z95 * sd / s.target_ci) ** 2)
            total += min(s.max_hands, max(s.min_hands, need, p.hands + s.chunk_hands))
        return total

    def play_chunk(self, pair: PairState, batch: int, device="cpu") -> int:
        """Play the pair's next chunk (up to max hands), save it; the hands played."""
        s = self.settings
        n = min(s.chunk_hands, s.max_hands - pair.hands) // 2
        first = s.seed_start + pair.deals
        seeds = list(range(first, first + n))
        clocks = {"a": Clock(), "b": Clock()}
        a, b = self.policies[pair.i], self.policies[pair.j]
        points, declarer = [], []
        for lo in range(0, n, batch):
            pts, dt = play_batch(a, b, seeds[lo:lo + batch], s.decl, device, clocks,
                                 with_declarer=True)
            points.append(pts)
            declarer.append(dt)
        pair.append(np.concatenate(points), np.concatenate(declarer), clocks)
        pair.save(self.pair_path(pair.i, pair.j), s.seed_start)
        return 2 * n

    def run(self, batch: int | None = None, device="cpu", budget_s: float | None = None,
            on_chunk: Callable[[PairState, int], None] | None = None,
            max_chunks: int | None = None) -> bool:
        """Play chunks until every pair is finished (True), or until `budget_s` seconds
        have passed or `max_chunks` chunks were played (False; the budget is checked
        before each chunk, so a run may overrun it by one chunk). on_chunk(pair, hands)
        after each saved chunk."""
        batch = batch or self.settings.chunk_hands // 2
        t0, played = time.monotonic(), 0
        while True:
            pair = self.next_pair()
            if pair is None:
                return True
            if budget_s is not None and time.monotonic() - t0 >= budget_s:
                return False
            if max_chunks is not None and played >= max_chunks:
                return False
            hands = self.play_chunk(pair, batch, device)
            played += 1
            if on_chunk is not None:
                on_chunk(pair, hands)

    def report(self) -> dict:
        return league_report(self)


def _read_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
        if state.get("version") != STATE_VERSION or not isinstance(state.get("panel"), list) \
                or not isinstance(state.get("settings"), dict):
            raise ValueError(f"version {state.get('version')!r}, expected {STATE_VERSION}")
        return state
    except (OSError, ValueError, AttributeError) as e:
        raise LeagueStateError(f"{path}: not a readable league state ({e})") from None


def resolve_settings(stored: dict | None, given: dict, directory="DIR") -> LeagueSettings:
    """The league's settings: each one given (not None) wins, else the stored one, else the
    default. A given shaping setting that differs from the stored one raises
    LeagueStateError; invalid values raise ValueError naming the flag."""
    stored = (stored or {}).get("settings", {})
    given = dict(given)
    if given.get("decl") is not None:       # "06" and "6" are the same declaration
        try:
            given["decl"] = str(parse_decl_mode(given["decl"]))
        except ValueError:
            pass                            # LeagueSettings.problem names it below
    unknown = set(given) - {f.name for f in fields(LeagueSettings)}
    if unknown:
        raise TypeError(f"unknown league settings {sorted(unknown)}")
    clash = [k for k in LeagueSettings.SHAPING if k in stored and given.get(k) is not None
             and given[k] != stored[k]]
    if clash:
        diff = ", ".join(f"{FLAGS[k]} {stored[k]} (asked for {given[k]})" for k in clash)
        raise LeagueStateError(
            f"--league {directory}: holds a league played with {diff}; continue it with the "
            f"stored settings (omit the flag) or use another directory")
    values = {f.name: given[f.name] if given.get(f.name) is not None else
              stored.get(f.name, f.default)
              for f in fields(LeagueSettings)}
    settings = LeagueSettings(**values)
    problem = settings.problem()
    if problem is not None:
        raise ValueError(problem)
    return settings


def open_league(directory, specs: Sequence[str] | None,
                build: Callable[[str, int], Policy], **given) -> League:
    """The league in `directory` (created if needed): a new one with the panel `specs`
    (DEFAULT_PANEL when None), or the stored one continued. Continuing, `specs` None keeps
    the stored panel; otherwise it must include every stored policy (new ones are appended).
    `given`: LeagueSettings fields chosen by the caller (None = the stored value, or the
    default for a new league; `resolve_settings`). build(spec, run_seed) -> policy
    (ValueError for a bad spec). LeagueStateError when the directory cannot hold this
    league (module doc)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise LeagueStateError(f"--league {directory}: is a file, not a directory")
    state_path = directory / STATE_FILE
    stored = _read_state(state_path) if state_path.exists() else None
    settings = resolve_settings(stored, given, directory)
    stored_entries = [Entry(**e) for e in stored["panel"]] if stored else []
    if specs is None:
        specs = [e.spec for e in stored_entries] if stored_entries else list(DEFAULT_PANEL)
    built: dict[str, tuple[Entry, Policy]] = {}
    for spec in specs:
        policy = build(spec, settings.run_seed)
        entry = Entry(spec, policy.name, bool(policy.cheating), policy_identity(spec, policy))
        if entry.name in built:
            raise ValueError(f"--policies: {built[entry.name][0].spec!r} and {spec!r} name the "
                             f"same policy {entry.name}")
        built[entry.name] = (entry, policy)
    missing = [e.name for e in stored_entries if e.name not in built]
    if missing:
        raise LeagueStateError(
            f"--league {directory}: its panel has {', '.join(missing)}, which --policies "
            f"leaves out; name every stored policy (new ones are added) or omit --policies")
    for e in stored_entries:
        now = built[e.name][0]
        if e.identity is not None and now.identity != e.identity:
            raise LeagueStateError(
                f"--league {directory}: the weights of {e.name} changed (fingerprint "
                f"{e.identity}, now {now.identity}); put the old file back, or start another "
                f"DIR (a league meant to outlive a new shipped model names it by path, "
                f"stage2:PATH)")
    order = [e.name for e in stored_entries] + [n for n in built if
                                                n not in {e.name for e in stored_entries}]
    entries = [stored_entries[k] if k < len(stored_entries) else built[n][0]
               for k, n in enumerate(order)]
    if len(entries) < 2:
        raise ValueError(f"--policies: a league needs at least two policies, got "
                         f"{', '.join(order) or 'none'}")
    (directory / PAIRS_DIR).mkdir(parents=True, exist_ok=True)
    state = {"version": STATE_VERSION, "settings": asdict(settings),
             "panel": [asdict(e) for e in entries]}
    if state != stored:
        atomic_write_text(state_path, json.dumps(state, indent=1) + "\n")
    return League(directory, settings, entries, [built[n][1] for n in order])


def rename_entry(directory, old: str, spec: str, build: Callable[[str, int], Policy]) -> Entry:
    """Re-point the stored policy named `old` to `spec`, which must play it with the same
    weights (the same fingerprint): how a league keeps a shipped model's pairs when a new
    model takes the default name (`stage2` -> `stage2:stage2_eq`, the old file kept under
    eqfast/models). The state file is written first, then each pair file holding `old`;
    running it again after a kill finishes the pair files. LeagueStateError naming the
    problem; ValueError for a bad spec."""
    directory = Path(directory)
    state_path = directory / STATE_FILE
    if not state_path.exists():
        raise LeagueStateError(f"--league {directory}: holds no league ({STATE_FILE} missing)")
    state = _read_state(state_path)
    settings = resolve_settings(state, {}, directory)
    entries = [Entry(**e) for e in state["panel"]]
    policy = build(spec, settings.run_seed)
    new = Entry(spec, policy.name, bool(policy.cheating), policy_identity(spec, policy))
    names = [e.name for e in entries]
    if old not in names:
        if new.name not in names:
            raise LeagueStateError(f"--rename: {directory} has no policy {old} (its panel: "
                                   f"{', '.join(names)})")
        k = names.index(new.name)          # a finished rename, or one cut short: pairs next
    else:
        if new.name in names:
            raise LeagueStateError(f"--rename: {directory} already has a policy {new.name}")
        k = names.index(old)
        if entries[k].identity is None or entries[k].identity != new.identity:
            raise LeagueStateError(
                f"--rename: {spec} is not the player stored as {old} (fingerprint "
                f"{new.identity}, stored {entries[k].identity}); only a policy with the same "
                f"weights file contents can be re-pointed")
        entries[k] = new
        atomic_write_text(state_path, json.dumps({**state, "panel": [asdict(e) for e in entries]},
                                                 indent=1) + "\n")
    for i in range(len(entries)):
        for j in range(i + 1, len(entries)):
            path = pair_path(directory, i, j)
            if k not in (i, j) or not path.exists():
                continue
            a, b = (old if i == k else entries[i].name), (old if j == k else entries[j].name)
            try:
                pair = PairState.load(path, i, j, a, b, settings.seed_start)
            except LeagueStateError:       # already renamed (this is checked on loading)
                PairState.load(path, i, j, entries[i].name, entries[j].name,
                               settings.seed_start)
                continue
            pair.a, pair.b = entries[i].name, entries[j].name
            pair.save(path, settings.seed_start)
    return new


# ---------------------------------------------------------------------------- ratings
def _anchor_transform(k: int, ref: int, center: bool, x: np.ndarray, cov: np.ndarray):
    """Values fit with x[ref] = 0, re-anchored to mean 0 when `center`."""
    if not center:
        return x, cov
    c = np.eye(k) - 1.0 / k
    return c @ x, c @ cov @ c.T


def _component(k: int, edges: Sequence[tuple[int, int]], ref: int) -> list[int]:
    """The policies connected to `ref` by pairs with data (only they can be rated)."""
    seen, stack = {ref}, [ref]
    while stack:
        u = stack.pop()
        for i, j in edges:
            for v, w in ((i, j), (j, i)):
                if v == u and w not in seen:
                    seen.add(w)
                    stack.append(w)
    return sorted(seen)


def _rated(names: Sequence[str], ref_name: str | None, edges) -> tuple[list[int], int, bool]:
    """(rated indices, reference index among them, centre?) for the anchor rule."""
    k = len(names)
    has = {u for e in edges for u in e}
    if ref_name in names and names.index(ref_name) in has:
        ref = names.index(ref_name)
        return _component(k, edges, ref), ref, False
    if not has:
        return [], 0, True
    # no anchor policy: rate the largest connected group, centred on its mean
    best = max((_component(k, edges, u) for u in sorted(has)), key=len)
    return best, best[0], True


def chi2_sf(x: float, dof: int) -> float:
    """P(chi^2_dof > x) by the Wilson-Hilferty normal approximation (about 1e-3 absolute
    for dof >= 3; enough to say whether a fit is plausible)."""
    h = 2.0 / (9 * dof)
    z = ((x / dof) ** (1 / 3) - (1 - h)) / math.sqrt(h)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _by_deal(columns: Sequence[np.ndarray]) -> np.ndarray:
    """[deals, len(columns)]: column p holds columns[p] from row 0, zeros below its end.
    Row k is deal seed_start + k for every pair (module doc: every pair's first n deals
    are the same n deals), so a row gathers what one deal did to every pair."""
    out = np.zeros((max((len(c) for c in columns), default=0), len(columns)))
    for p, c in enumerate(columns):
        out[:len(c), p] = c
    return out


def fit_points(names: Sequence[str], results: Sequence[tuple[int, int, float, float]],
               anchor: str | None = ANCHOR,
               deal_diffs: Sequence[np.ndarray] | None = None) -> dict:
    """Ratings on the points-per-hand scale from (i, j, mean diff of i against j, its
    variance) per pair: weighted least squares of mean = r_i - r_j, weights 1/variance
    (module doc). Policies with no pair linking them to the others get None.
    `deal_diffs` (one array per result, the pair's differential on deals 0, 1, ...) makes
    the intervals cluster-robust over deals (the pairs share their deals)."""
    results = [(i, j, m, max(v, MIN_VAR)) for i, j, m, v in results]
    rated, ref, center = _rated(names, anchor, [(i, j) for i, j, _, _ in results])
    out = {"method": "weighted least squares on pair means, weights 1/SE^2",
           "intervals": "by deal" if deal_diffs is not None else "pairs independent",
           "anchor": names[ref] if rated and not center else "panel mean",
           "ratings": {n: None for n in names}, "chi2": None, "dof": None,
           "chi2_per_dof": None, "p_value": None}
    if len(rated) < 2:
        return out
    pos = {u: q for q, u in enumerate(rated)}
    kept = [k for k, (i, j, _, _) in enumerate(results) if i in pos and j in pos]
    use = [results[k] for k in kept]
    free = [u for u in rated if u != ref]
    col = {u: q for q, u in enumerate(free)}
    x = np.zeros((len(use), len(free)))
    y = np.array([m for _, _, m, _ in use])
    w = np.array([1.0 / v for _, _, _, v in use])
    for row, (i, j, _, _) in enumerate(use):
        if i in col:
            x[row, col[i]] += 1
        if j in col:
            x[row, col[j]] -= 1
    info = x.T @ (w[:, None] * x)
    cov_free = np.linalg.inv(info)
    beta = cov_free @ (x.T @ (w * y))
    if deal_diffs is not None:
        # sandwich over deals: beta = A X'W y, and deal d moves the pair means y by u_d
        # (its residual / n, scaled by sqrt(n / (n - 1)) so that a pair alone gets its
        # var_mean back); pairs that share a deal move together
        cols = []
        for k in kept:
            d = np.asarray(deal_diffs[k], np.float64)
            n = len(d)
            cols.append((d - d.mean()) / n * math.sqrt(n / (n - 1)) if n >= 2 else 0 * d)
        v = _by_deal(cols) @ (w[:, None] * x)
        cov_free = cov_free @ (v.T @ v) @ cov_free
    kk = len(rated)
    r = np.zeros(kk)
    cov = np.zeros((kk, kk))
    idx = [pos[u] for u in free]
    r[idx] = beta
    cov[np.ix_(idx, idx)] = cov_free
    r, cov = _anchor_transform(kk, pos[ref], center, r, cov)
    resid = y - x @ beta
    chi2 = float((w * resid ** 2).sum())
    dof = len(use) - len(free)
    for u in rated:
        q = pos[u]
        se = math.sqrt(max(cov[q, q], 0.0))
        out["ratings"][names[u]] = {"rating": float(r[q]), "se": se,
                                    "ci95": [float(r[q]) - Z95 * se, float(r[q]) + Z95 * se]}
    out.update(chi2=chi2, dof=dof, chi2_per_dof=chi2 / dof if dof > 0 else None,
               p_value=chi2_sf(chi2, dof) if dof > 0 else None)
    return out


def fit_bradley_terry(names: Sequence[str], results: Sequence[tuple[int, int, float, float]],
                      anchor: str | None = ANCHOR, iterations: int = 100,
                      deal_wins: Sequence[np.ndarray] | None = None) -> dict:
    """Bradley-Terry log-odds from (i, j, hands won by i (ties half), hands) per pair, by
    Newton's method; intervals from the inverse Fisher information (module doc), or, with
    `deal_wins` (one array per result: i's wins on deals 0, 1, ..., two hands each), the
    sandwich of that information with the scores summed by deal."""
    # one virtual tied hand per pair: keeps a whitewash finite (module doc)
    use = [(k, i, j, w + 0.5, n + 1.0) for k, (i, j, w, n) in enumerate(results) if n > 0]
    rated, ref, center = _rated(names, anchor, [(i, j) for _, i, j, _, _ in use])
    out = {"method": "Bradley-Terry on hands won (ties half), Newton",
           "intervals": "by deal" if deal_wins is not None else "Fisher information",
           "anchor": names[ref] if rated and not center else
           "panel mean", "elo_per_logit": ELO_PER_LOGIT,
           "ratings": {n: None for n in names}, "iterations": 0}
    if len(rated) < 2:
        return out
    pos = {u: q for q, u in enumerate(rated)}
    kept = [k for k, i, j, _, _ in use if i in pos and j in pos]
    use = [(pos[i], pos[j], w, n) for _, i, j, w, n in use if i in pos and j in pos]
    kk = len(rated)
    ii = np.array([u[0] for u in use])
    jj = np.array([u[1] for u in use])
    wins = np.array([u[2] for u in use])
    hands = np.array([u[3] for u in use])
    free = np.array([q for q in range(kk) if q != pos[ref]])
    theta = np.zeros(kk)

    def grad_info(theta):
        p = 1.0 / (1.0 + np.exp(theta[jj] - theta[ii]))
        g = wins - hands * p
        h = hands * p * (1 - p)
        grad = np.zeros(kk)
        np.add.at(grad, ii, g)
        np.add.at(grad, jj, -g)
        info = np.zeros((kk, kk))
        np.add.at(info, (ii, ii), h)
        np.add.at(info, (jj, jj), h)
        np.add.at(info, (ii, jj), -h)
        np.add.at(info, (jj, ii), -h)
        return grad, info

    for it in range(1, iterations + 1):
        grad, info = grad_info(theta)
        step = np.linalg.solve(info[np.ix_(free, free)], grad[free])
        theta[free] += step
        out["iterations"] = it
        if float(np.abs(step).max()) < 1e-10:
            break
    _, info = grad_info(theta)
    cov = np.zeros((kk, kk))
    cov_free = np.linalg.inv(info[np.ix_(free, free)])
    if deal_wins is not None:
        # each deal's score (wins - 2 p on every pair that played it) as one draw: the
        # two hands of a deal, and one deal across pairs, are not independent
        p = 1.0 / (1.0 + np.exp(theta[jj] - theta[ii]))
        g = _by_deal([np.asarray(deal_wins[k], np.float64) - 2 * p[q]
                      for q, k in enumerate(kept)])
        e = np.zeros((len(kept), kk))
        e[np.arange(len(kept)), ii] = 1.0
        e[np.arange(len(kept)), jj] = -1.0
        score = (g @ e)[:, free]
        cov_free = cov_free @ (score.T @ score) @ cov_free
    cov[np.ix_(free, free)] = cov_free
    theta, cov = _anchor_transform(kk, pos[ref], center, theta, cov)
    for u in rated:
        q = pos[u]
        se = math.sqrt(max(cov[q, q], 0.0))
        t = float(theta[q])
        out["ratings"][names[u]] = {"theta": t, "se": se, "ci95": [t - Z95 * se, t + Z95 * se],
                                    "elo": t * ELO_PER_LOGIT}
    return out


# ---------------------------------------------------------------------------- summaries
def contract_by_deal(a_points: np.ndarray, declarer_team: np.ndarray) -> dict:
    """The contract view of one pair, deal by deal: for the A and B sides, boolean arrays
    over deals made30 and made42 (of the play where the side declared) and set (of the
    play where it defended). Each side declares in one play of every deal and defends in
    the other."""
    a_points = np.asarray(a_points, np.int64)
    dt = np.asarray(declarer_team, np.int64)
    rows = np.arange(len(dt))
    a_decl = a_points[rows, dt]                          # A declares in column dt
    b_decl = TOTAL_POINTS - a_points[rows, 1 - dt]       # B declares in the other play
    side = lambda own, other: {"made30": own >= MADE, "made42": own == TOTAL_POINTS,
                               "set": other < MADE}
    return {"a": side(a_decl, b_decl), "b": side(b_decl, a_decl)}


def contract_counts(a_points: np.ndarray, declarer_team: np.ndarray) -> dict:
    """Counts of the contract view for the A and B sides of one pair's deals: hands each
    declared, made 30, made 42; hands each defended and set (declarer below 30)."""
    n = len(declarer_team)
    return {side: {"declared": n, "made30": int(c["made30"].sum()),
                   "made42": int(c["made42"].sum()), "defended": n, "set": int(c["set"].sum())}
            for side, c in contract_by_deal(a_points, declarer_team).items()}


def clustered_share(hits: Sequence[np.ndarray]) -> dict:
    """The share of True over boolean arrays by deal (one per pair: row k is deal k of
    every pair), with a Wilson 95% interval on the effective number of hands: n p (1 - p)
    over the variance of the hits summed by deal (the same deal played against several
    opponents counts once as a draw), never more than the hands themselves."""
    m = _by_deal([np.asarray(h, np.float64) for h in hits])
    k_d, n_d = m.sum(axis=1), _by_deal([np.ones(len(h)) for h in hits]).sum(axis=1)
    n = int(n_d.sum())
    if n == 0:
        return {"count": 0, "hands": 0, "share": None, "ci95": [0.0, 1.0], "n_eff": 0.0}
    p, lo, hi, n_eff = wilson_by_deal(k_d, n_d)
    return {"count": int(k_d.sum()), "hands": n, "share": p, "ci95": [lo, hi], "n_eff": n_eff}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def pair_summary(p: PairState, s: LeagueSettings) -> dict:
    mean, lo, hi = mean_interval(p.deal_diffs) if p.deals else (None, None, None)
    wins = int((p.a_points > HALF).sum())
    ties = int((p.a_points == HALF).sum())
    _, w_lo, w_hi, _ = wilson_by_deal(p.deal_wins, np.full(p.deals, 2))
    rate = lambda d, t: d / t if t > 0 else None
    return {"a": p.a, "b": p.b, "deals": p.deals, "hands": p.hands, "status": p.status(s),
            "seed_range": [s.seed_start, s.seed_start + p.deals - 1] if p.deals else None,
            "mean_diff": mean, "diff_ci95": [lo, hi], "half_width": p.half_width(),
            "var_mean": float(p.deal_diffs.var(ddof=1)) / p.deals if p.deals >= 2 else None,
            "wins": wins, "ties": ties, "losses": p.hands - wins - ties,
            "win_share": (wins + ties / 2) / p.hands if p.hands else None,
            "win_ci95": [w_lo, w_hi], "contract": contract_counts(p.a_points, p.declarer_team),
            "decisions": {"a": int(p.decisions[0]), "b": int(p.decisions[1])},
            "seconds": {"a": float(p.seconds[0]), "b": float(p.seconds[1])},
            "decisions_per_s": {"a": rate(p.decisions[0], p.seconds[0]),
                                "b": rate(p.decisions[1], p.seconds[1])}}


def league_report(league: League) -> dict:
    """The league as a JSON-ready dict (what DIR/league.json holds)."""
    s, names = league.settings, league.names
    k = len(names)
    pairs = [pair_summary(p, s) for p in league.pairs]
    mean = [[None] * k for _ in range(k)]
    half = [[None] * k for _ in range(k)]
    wls, bt, wls_deals, bt_deals = [], [], [], []
    for p, ps in zip(league.pairs, pairs):
        if p.deals >= 1:
            mean[p.i][p.j], mean[p.j][p.i] = ps["mean_diff"], -ps["mean_diff"]
            half[p.i][p.j] = half[p.j][p.i] = ps["half_width"]
            bt_deals.append(p.deal_wins)
            bt.append((p.i, p.j, float(bt_deals[-1].sum()), p.hands))
        if p.deals >= 2:
            wls.append((p.i, p.j, ps["mean_diff"], ps["var_mean"]))
            wls_deals.append(p.deal_diffs)
    hits: dict[str, dict[str, list]] = {}
    dec_s: dict[str, list] = {n: [0, 0.0] for n in names}
    for p in league.pairs:
        by_deal = contract_by_deal(p.a_points, p.declarer_team)
        for side, name, q in (("a", p.a, 0), ("b", p.b, 1)):
            h = hits.setdefault(name, {"made30": [], "made42": [], "set": []})
            for key, v in by_deal[side].items():
                h[key].append(v)
            dec_s[name][0] += int(p.decisions[q])
            dec_s[name][1] += float(p.seconds[q])
    contract_view = {n: {key: clustered_share(v) for key, v in h.items()}
                     for n, h in hits.items()}
    return {
        "kind": "eqfast-league",
        "settings": asdict(league.settings),
        "panel": [asdict(e) for e in league.entries],
        "commit": _git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "complete": not league.unfinished(),
        "hands": sum(p.hands for p in league.pairs),
        "pairs": pairs,
        "matrix": {"policies": names, "mean_diff": mean, "half_width": half,
                   "meaning": "row's team points minus column's per hand; half_width of the "
                              "95% Student-t interval over deals"},
        "ratings": {"points": fit_points(names, wls, deal_diffs=wls_deals),
                    "bradley_terry": fit_bradley_terry(names, bt, deal_wins=bt_deals),
                    "headline": "points"},
        "contract": contract_view,
        "decisions_per_s": {n: {"decisions": d, "seconds": t,
                                "decisions_per_s": d / t if t > 0 else None}
                            for n, (d, t) in dec_s.items()},
    }


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _grid(rows: list[tuple], right: set[int]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_league(report: dict) -> str:
    """The text report: ratings (best first), the points matrix, the contract view."""
    s = report["settings"]
    names = report["matrix"]["policies"]
    cheat = {e["name"]: e["cheating"] for e in report["panel"]}
    label = lambda n: f"{n} (CHEATING)" if cheat.get(n) else n
    pts, bt = report["ratings"]["points"], report["ratings"]["bradley_terry"]
    hands = {n: 0 for n in names}
    for p in report["pairs"]:
        hands[p["a"]] += p["hands"]
        hands[p["b"]] += p["hands"]
    order = sorted(names, key=lambda n: -(pts["ratings"][n] or {"rating": -1e9})["rating"])
    rows = [("policy", "points/hand [95%]", "BT log-odds [95%]", "Elo", "hands")]
    for n in order:
        r, b = pts["ratings"][n], bt["ratings"][n]
        anchored = lambda v: v is not None and v["se"] == 0
        rows.append((label(n),
                     "-" if r is None else "0 (anchor)" if anchored(r) else
                     f"{r['rating']:+.2f} [{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]",
                     "-" if b is None else "0 (anchor)" if anchored(b) else
                     f"{b['theta']:+.3f} [{b['ci95'][0]:+.3f}, {b['ci95'][1]:+.3f}]",
                     "-" if b is None else f"{b['elo']:+.0f}", str(hands[n])))
    unfinished = sum(p["status"] == "playing" for p in report["pairs"])
    out = [f"League: {len(names)} policies, {len(report['pairs'])} pairs, "
           f"{report['hands']} hands; deals from seed {s['seed_start']}; each pair to a 95% "
           f"half-width <= {s['target_ci']} points/hand ({s['min_hands']}..{s['max_hands']} "
           f"hands)" + ("" if report["complete"] else f"; {unfinished} pairs unfinished"),
           "",
           f"Ratings: points per hand ({pts['anchor']} = 0; WLS, 95%; chi2/dof "
           f"{_fmt(pts['chi2_per_dof'], '.2f')} on {_fmt(pts['dof'], 'd')} dof, p "
           f"{_fmt(pts['p_value'], '.3f')}) and Bradley-Terry on hands won", ""]
    out += _grid(rows, {4})
    out += ["", "Points per hand, row against column (+- 95% half-width over deals)", ""]
    m, h = report["matrix"]["mean_diff"], report["matrix"]["half_width"]
    short = {n: n if len(n) <= 24 else n[:21] + "..." for n in names}
    rows = [("",) + tuple(short[n] for n in order)]
    for a in order:
        ia = names.index(a)
        cells = []
        for b in order:
            ib = names.index(b)
            v = m[ia][ib]
            cells.append("." if a == b else "-" if v is None
                         else f"{v:+.2f}" + ("" if h[ia][ib] is None else f"±{h[ia][ib]:.2f}"))
        rows.append((short[a],) + tuple(cells))
    out += _grid(rows, set(range(1, len(rows[0]))))
    out += ["", "Contract view (declarer's team took >= 30 / all 42; as defender, held it "
                "below 30), Wilson 95% on the hands' effective number (a deal played against "
                "several opponents counts once)", ""]
    rows = [("policy", "declared", "made 30", "made 42", "defended", "set 30")]
    ci = lambda c: "-" if c["share"] is None else \
        f"{c['share']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
    for n in order:
        c = report["contract"].get(n)
        if c is None:
            continue
        rows.append((label(n), str(c["made30"]["hands"]), ci(c["made30"]), ci(c["made42"]),
                     str(c["set"]["hands"]), ci(c["set"])))
    out += _grid(rows, {1, 4})
    out += ["", "decisions/s: " + ", ".join(
        f"{n} {_fmt(report['decisions_per_s'][n]['decisions_per_s'], '.0f')}" for n in order)]
    return "\n".join(out)


def write_report(league: League) -> dict:
    """Write DIR/league.json atomically; the report."""
    report = league_report(league)
    atomic_write_text(league.directory / REPORT_FILE, json.dumps(report, indent=1) + "\n")
    return report


__all__ = ["DEFAULT_PANEL", "DEFAULT_SEED_START", "LeagueSettings", "LeagueStateError",
           "League", "PairState", "open_league", "fit_points", "fit_bradley_terry",
           "contract_counts", "contract_by_deal", "clustered_share", "league_report",
           "format_league", "write_report",
           "policy_identity", "REPORT_FILE", "STATE_FILE"]
