"""The policy names and the league's defaults, in a module without torch so that
eqfast-arena --help and its argument errors answer at once (importing torch takes 1.5-12
s). policies.py builds the policies these names stand for; league.py uses the defaults."""

#: the names a policy spec starts with (policies.POLICIES has one builder each)
POLICY_NAMES = ("random", "rules", "expert", "eq", "perfect", "stage2", "search", "endgame",
                "split")
#: how a policy that takes an argument is written, for messages and --help
USAGE = {"eq": "eq:ORACLE[:N][:posterior[=BEHAVIOUR]]", "stage2": "stage2[:WEIGHTS]",
         "search": "search[:N[:T[:WEIGHTS]]]", "endgame": "endgame[:T[:WEIGHTS]]",
         "split": "split:T:LATE[:EARLY]"}

#: the league's panel when none is named: floor, baselines, the E[Q] players, the shipped
#: Stage 2 and the cheating ceiling
DEFAULT_PANEL = ("random", "rules", "expert", "eq:exact:100", "eq:default:32",
                 "eq:default:32:posterior", "stage2", "perfect")
#: first deal of the league: far above every training, labelling and evaluation seed range
#: (eqfast/play/league.py)
DEFAULT_SEED_START = 3_000_000_000
DEFAULT_TARGET_CI = 0.3
DEFAULT_MIN_HANDS = 1000
DEFAULT_MAX_HANDS = 20000
DEFAULT_CHUNK_HANDS = 200
