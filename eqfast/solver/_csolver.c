/* _csolver: exact perfect-information solver for the play of one Texas 42 hand.
 *
 * What it computes (RULES.md "Values"): V(s), team 0's points minus team 1's points from
 * state s to the end of the hand under minimax play (team 0 maximizes), and Q(s, a) for
 * every legal move a of the player to act (the points of the trick a completes, if it
 * does, plus V of the next state). Everything is in the team-0 frame; the Python wrapper
 * (eqfast/solver/__init__.py) flips to the actor frame on request.
 *
 * Rules: this file knows no Texas 42 rule. The four tables it reads (FOLLOW_MASK, RANK,
 * LED_SUIT, POINTS from eqfast.rules.tables) are copied in once by init_tables(); legal
 * moves, the trick winner and the trick's points are lookups into them.
 *
 * Search: fail-soft alpha-beta over single plays. Within one deal the owner of every tile
 * is fixed, so a trick boundary is identified by (remaining-tile mask, leader): those are
 * the transposition-table (TT) keys. A TT entry keeps a lower and an upper bound of V plus
 * the best lead found there (tried first on the next visit). The TT persists across calls
 * while the calls stay on the same deal (same declaration, and no tile changes owner);
 * otherwise a generation counter invalidates every entry in O(1).
 *
 * Why C rather than numba: no new dependency, and the build is the setup.py that already
 * exists; the hot loop is a few hundred lines of integer code (see docs/SOLVER.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The search counts tiles with popcount at every trick boundary; without this the compiler
 * emits a library call per count. Every x86-64 CPU since 2008 has the instruction; module
 * import checks for it. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("popcnt")
#define CHECK_POPCNT 1
#endif

#define N_TILES 28
#define N_DECLS 10
#define N_SUITS 8
#define N_SEATS 4
#define TILE_BITS ((1u << N_TILES) - 1u)
#define NO_TILE 0xFF
#define INF 127 /* wider than any value to go, |V| <= 42 */
#define MAX_THREADS 64

/* ---------------------------------------------------------------- rules tables */

static uint32_t g_follow_mask[N_DECLS][N_SUITS]; /* tiles following suit s under decl d */
static int8_t g_rank[N_DECLS][N_SUITS][N_TILES]; /* argmax of the four keys wins a trick */
static int8_t g_led_suit[N_DECLS][N_TILES];      /* suit a lead tile opens */
static int8_t g_points[N_TILES];                 /* count points of a tile */
static uint32_t g_count_masks[N_TILES];          /* tiles worth 1, 2, ... points (popcount sums) */
static int g_count_values[N_TILES];
static int g_n_count_values = 0;
static int g_tables_ready = 0;

/* Equivalent tiles, derived from the four tables above (no rule of their own). Playing a
 * and keeping b, or playing b and keeping a (same hand), lead to positions that are the same
 * game with a and b swapped, hence the same value, when a and b carry the same count, lead
 * the same suit, and agree under every suit s that still matters: s is the suit a trick
 * could be led in while a or b is in play (the current trick's suit, their own suit, and
 * every suit another seat could still lead), and "agree" means both follow s or neither
 * does, and each live tile x outside the hand compares with a as it does with b under s.
 * Suits nobody else can lead any more stop mattering, so late in the hand tiles like 6-1
 * and 6-2 become interchangeable once the ones and twos are gone.
 * g_same_kind[d][a]: tiles b with the same count and led suit; g_member_diff[d][a][b]: the
 * suits exactly one of a, b follows; g_between[d][a][b][s]: the tiles x whose comparison
 * with a and with b differs under s. */
static uint32_t g_lead_mask[N_DECLS][N_SUITS];   /* tiles that open suit s when led */
static uint32_t g_same_kind[N_DECLS][N_TILES];
static uint8_t g_member_diff[N_DECLS][N_TILES][N_TILES];
static uint32_t g_between[N_DECLS][N_TILES][N_TILES][N_SUITS];

static inline int popcount(uint32_t x) { return __builtin_popcount(x); }

/* Count points held in `tiles`: one popcount per distinct nonzero point value (2 today). */
static inline int count_points(uint32_t tiles) {
    int total = 0;
    for (int i = 0; i < g_n_count_values; i++)
        total += g_count_values[i] * popcount(tiles & g_count_masks[i]);
    return total;
}

/* ---------------------------------------------------------------- transposition table */

/* 2^17 entries x 8 bytes = 1 MiB per thread, direct-mapped, replace-always. A world of the
 * E[Q] workload is a fresh deal, so its TT starts empty and is touched at random: a table
 * that stays in L2/L3 and in few TLB pages beats a big one. Captured generate rows, trick 1
 * (150 worlds): 2^20 entries 115.4K nodes and 2.97 ms per world, 2^18 116.0K / 2.71 ms,
 * 2^17 116.8K / 2.24 ms, 2^16 118.3K / 2.33 ms. */
#define TT_BITS 17
#define TT_SIZE (1u << TT_BITS)

typedef struct {
    uint32_t key;  /* remaining-tile mask << 2 | leader */
    uint8_t gen;   /* entry is valid only when gen == the table's gen */
    int8_t lo, hi; /* lower and upper bound of V (team-0 frame) */
    uint8_t best;  /* best lead found there (NO_TILE: none), tried first next time */
} TTEntry;

/* One TT with its deal bookkeeping; each worker thread owns one (g_tables[i]). */
typedef struct {
    TTEntry *tt;
    uint8_t gen;
    int deal_decl;          /* declaration of the current generation */
    int8_t owner[N_TILES];  /* seat of each tile seen in this generation, -1 unseen */
    long long generations;  /* statistics */
} Table;

static Table g_tables[MAX_THREADS];
/* Held (with the GIL released) by every call that searches: the tables are shared state. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void new_generation(Table *tab, int decl) {
    tab->gen++;
    if (tab->gen == 0) { /* wrapped: old entries could look valid again */
        memset(tab->tt, 0, sizeof(TTEntry) * TT_SIZE);
        tab->gen = 1;
    }
    tab->generations++;
    tab->deal_decl = decl;
    memset(tab->owner, -1, sizeof tab->owner);
}

/* Keep the TT when `hands` is consistent with the current generation's deal, start a new
 * generation otherwise. Only tiles still in hand matter: a TT key contains only those. */
static void enter_deal(Table *tab, const uint32_t hands[N_SEATS], int decl) {
    int conflict = decl != tab->deal_decl;
    for (int p = 0; p < N_SEATS && !conflict; p++)
        for (uint32_t h = hands[p]; h; h &= h - 1) {
            int t = __builtin_ctz(h);
            if (tab->owner[t] != -1 && tab->owner[t] != p) { conflict = 1; break; }
        }
    if (conflict) new_generation(tab, decl);
    for (int p = 0; p < N_SEATS; p++)
        for (uint32_t h = hands[p]; h; h &= h - 1) tab->owner[__builtin_ctz(h)] = (int8_t)p;
}

/* Allocate the TTs of tables [0, n); 0 or -1 when out of memory. No Python calls (runs
 * without the GIL). */
static int ensure_tables(int n) {
    for (int i = 0; i < n; i++) {
        Table *tab = &g_tables[i];
        if (tab->tt) continue;
        tab->tt = calloc(TT_SIZE, sizeof(TTEntry));
        if (!tab->tt) return -1;
        tab->gen = 0;
        new_generation(tab, -1);
    }
    return 0;
}

static inline uint32_t tt_index(uint32_t key) {
    return (uint32_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> (64 - TT_BITS));
}

/* ---------------------------------------------------------------- search state */

typedef struct {
    uint32_t hand[N_SEATS];
    const uint32_t *follow;            /* g_follow_mask[decl] */
    const int8_t (*rank)[N_TILES];     /* g_rank[decl] */
    const int8_t *led_suit;            /* g_led_suit[decl] */
    const uint32_t *lead_mask;         /* g_lead_mask[decl] */
    const uint32_t *same_kind;         /* g_same_kind[decl] */
    const uint8_t (*member_diff)[N_TILES];              /* g_member_diff[decl] */
    const uint32_t (*between)[N_TILES][N_SUITS];        /* g_between[decl] */
    Table *tab;                        /* this thread's TT */
    uint8_t killer[N_SEATS][8];        /* last lead that failed high, per leader and tricks left */
    long long nodes;                   /* tiles played in the search */
} Search;

/* The current trick, incrementally: who led, how many tiles, the led suit, the best key
 * and its seat so far, and its count points. */
typedef struct {
    int leader, n, led, win_key, win_seat, points;
    uint8_t tiles[N_SEATS];
} Trick;

static inline void trick_add(const Search *s, Trick *tr, int t) {
    int seat = (tr->leader + tr->n) & 3;
    if (tr->n == 0) {
        tr->led = s->led_suit[t];
        tr->win_key = s->rank[tr->led][t];
        tr->win_seat = seat;
    } else {
        int key = s->rank[tr->led][t];
        if (key > tr->win_key) { tr->win_key = key; tr->win_seat = seat; }
    }
    tr->points += g_points[t];
    tr->tiles[tr->n++] = (uint8_t)t;
}

static inline uint32_t legal_moves(const Search *s, const Trick *tr, int seat) {
    uint32_t h = s->hand[seat];
    if (tr->n == 0) return h;
    uint32_t f = h & s->follow[tr->led];
    return f ? f : h;
}

static int boundary(Search *s, int leader, int alpha, int beta);

/* Move ordering: at a lead, the TT's best lead, then the killer (the lead that last failed
 * high for this leader with as many tricks left), then the highest rank key in the tile's
 * own suit; when following and the partner is winning, count first (feed the partner), low keys
 * first; when an opponent is winning, the cheapest winning tile first (count first), then
 * the losers with the least count. Nodes over the benchmark's 200 deals: 54.5M with this
 * order; 58M leading count first, 92M leading low keys first, 64M without feeding count
 * to the partner, 59M winning with the highest tile first. The lead killer: trick-1 worlds
 * of the E[Q] workload 116.8K -> 109.8K nodes (-6%), 1.38 -> 1.32 ms; a history table for
 * leads instead gave +6%, two killers +2%, killers for following moves +49%. */
static int order_moves(const Search *s, const Trick *tr, uint32_t legal, int first,
                       uint8_t out[7]) {
    int score[7], n = 0;
    int seat = (tr->leader + tr->n) & 3;
    for (uint32_t m = legal; m; m &= m - 1) {
        int t = __builtin_ctz(m), sc;
        if (tr->n == 0) {
            sc = s->rank[s->led_suit[t]][t];
            if (t == s->killer[seat][popcount(s->hand[seat])]) sc = 999;
            if (t == first) sc = 1000;
        } else {
            int key = s->rank[tr->led][t];
            int pts = g_points[t];
            if (((tr->win_seat ^ seat) & 1) == 0)
                sc = 64 * pts - key;
            else if (key > tr->win_key)
                sc = 2000 + 64 * pts - key;
            else
                sc = -64 * pts - key;
        }
        int i = n++;
        while (i > 0 && score[i - 1] < sc) { score[i] = score[i - 1]; out[i] = out[i - 1]; i--; }
        score[i] = sc;
        out[i] = (uint8_t)t;
    }
    return n;
}

static int in_trick(Search *s, const Trick *tr, int alpha, int beta, int *best_tile);

/* What equivalent_tile needs of a node, computed on its first use there: the live tiles
 * outside the mover's hand (other hands + the current trick) and the suits that still
 * matter apart from the tile's own (those another seat can lead, and the current one). */
typedef struct {
    int ready;
    uint32_t live;
    unsigned need;
} EqCtx;

/* A tile of `done` (same hand, already searched) that t is interchangeable with, or -1
 * (see g_same_kind above). */
static inline int equivalent_tile(const Search *s, const Trick *tr, int seat, int t,
                                  uint32_t done, EqCtx *eq) {
    uint32_t cand = s->same_kind[t] & done;
    if (!cand) return -1;
    if (!eq->ready) {
        uint32_t others = (s->hand[0] | s->hand[1] | s->hand[2] | s->hand[3]) & ~s->hand[seat];
        eq->live = others;
        for (int i = 0; i < tr->n; i++) eq->live |= 1u << tr->tiles[i];
        eq->need = tr->n ? 1u << tr->led : 0;
        for (int st = 0; st < N_SUITS; st++)
            if (s->lead_mask[st] & others) eq->need |= 1u << st;
        eq->ready = 1;
    }
    unsigned need = eq->need | 1u << s->led_suit[t];
    for (; cand; cand &= cand - 1) {
        int b = __builtin_ctz(cand);
        if (s->member_diff[t][b] & need) continue;
        uint32_t differ = 0;
        for (unsigned u = need; u; u &= u - 1) differ |= s->between[t][b][__builtin_ctz(u)];
        if (!(differ & eq->live)) return b;
    }
    return -1;
}

/* Value (team-0 frame) after the player to act in `tr` plays t: the trick's points when t
 * completes it, plus the value to go of the next state. */
static int play_value(Search *s, const Trick *tr, int t, int alpha, int beta) {
    int seat = (tr->leader + tr->n) & 3;
    Trick next = *tr;
    int v;
    s->nodes++;
    s->hand[seat] &= ~(1u << t);
    trick_add(s, &next, t);
    if (next.n == N_SEATS) {
        int pts = 1 + next.points;
        int signed_pts = (next.win_seat & 1) ? -pts : pts;
        v = signed_pts + boundary(s, next.win_seat, alpha - signed_pts, beta - signed_pts);
    } else {
        v = in_trick(s, &next, alpha, beta, NULL);
    }
    s->hand[seat] |= 1u << t;
    return v;
}

/* Minimax value of the rest of the hand from inside (or at the start of) trick `tr`. */
static int in_trick(Search *s, const Trick *tr, int alpha, int beta, int *best_tile) {
    int seat = (tr->leader + tr->n) & 3;
    int first = best_tile ? *best_tile : NO_TILE;
    uint8_t moves[7];
    int n = order_moves(s, tr, legal_moves(s, tr, seat), first, moves);
    int maximize = (seat & 1) == 0;
    int best = maximize ? -INF : INF, best_t = NO_TILE;
    uint32_t searched = 0;
    EqCtx eq = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        if (equivalent_tile(s, tr, seat, moves[i], searched, &eq) >= 0) continue;
        searched |= 1u << moves[i];
        int v = play_value(s, tr, moves[i], alpha, beta);
        if (maximize) {
            if (v > best) { best = v; best_t = moves[i]; }
            if (best > alpha) alpha = best;
        } else {
            if (v < best) { best = v; best_t = moves[i]; }
            if (best < beta) beta = best;
        }
        if (alpha >= beta) break;
    }
    if (best_tile) *best_tile = best_t;
    return best;
}

/* The last trick: one tile per seat, every play forced. */
static int last_trick(Search *s, int leader) {
    Trick tr = {leader, 0, 0, 0, 0, 0, {0}};
    for (int i = 0; i < N_SEATS; i++) trick_add(s, &tr, __builtin_ctz(s->hand[(leader + i) & 3]));
    s->nodes += N_SEATS;
    int pts = 1 + tr.points;
    return (tr.win_seat & 1) ? -pts : pts;
}

/* Value to go at a trick boundary (every seat holds the same number of tiles). */
static int boundary(Search *s, int leader, int alpha, int beta) {
    uint32_t rem = s->hand[0] | s->hand[1] | s->hand[2] | s->hand[3];
    if (!rem) return 0;
    int tricks_left = popcount(s->hand[0]);
    if (tricks_left == 1) return last_trick(s, leader);
    /* |V| <= the points still to be won: a window outside that range is decided. */
    int bound = tricks_left + count_points(rem);
    if (bound <= alpha) return bound;
    if (-bound >= beta) return -bound;

    uint32_t key = rem << 2 | (uint32_t)leader;
    uint32_t idx = tt_index(key);
    Table *tab = s->tab;
    TTEntry *e = &tab->tt[idx];
    int lo = -bound, hi = bound, first = NO_TILE;
    if (e->gen == tab->gen && e->key == key) {
        lo = e->lo;
        hi = e->hi;
        if (lo >= beta) return lo;
        if (hi <= alpha) return hi;
        if (lo == hi) return lo;
        if (lo > alpha) alpha = lo;
        if (hi < beta) beta = hi;
        first = e->best;
    }
    Trick tr = {leader, 0, 0, 0, 0, 0, {0}};
    int best_t = first;
    int v = in_trick(s, &tr, alpha, beta, &best_t);
    /* Fail-soft: v <= alpha is an upper bound, v >= beta a lower bound, else exact. */
    if (v <= alpha) hi = v;
    else if (v >= beta) { lo = v; s->killer[leader][tricks_left] = (uint8_t)best_t; }
    else lo = hi = v;
    e->key = key;
    e->gen = tab->gen;
    e->lo = (int8_t)lo;
    e->hi = (int8_t)hi;
    e->best = (uint8_t)best_t;
    return v;
}

/* ---------------------------------------------------------------- one position */

typedef struct {
    int v;                 /* value to go, team-0 frame */
    int n_moves;
    uint8_t moves[7];      /* legal moves, ascending tile id */
    int8_t q[7];           /* Q of each, team-0 frame */
    int pv_len;
    uint8_t pv[N_TILES];
} Solution;

/* Checks a state for consistency; returns NULL or an error message. `trick` holds the
 * n_trick tiles already played from `leader` (removed from the hands). */
static const char *check_state(const uint32_t hands[N_SEATS], int decl, int leader,
                               const int *trick, int n_trick) {
    if (!g_tables_ready) return "init_tables() has not been called";
    if (decl < 0 || decl >= N_DECLS) return "decl must be 0..9";
    if (leader < 0 || leader >= N_SEATS) return "leader must be 0..3";
    if (n_trick < 0 || n_trick > 3) return "trick must hold 0..3 tiles";
    uint32_t seen = 0;
    for (int p = 0; p < N_SEATS; p++) {
        if (hands[p] & ~TILE_BITS) return "hand mask has bits above tile 27";
        if (seen & hands[p]) return "a tile is in two hands";
        seen |= hands[p];
    }
    for (int i = 0; i < n_trick; i++) {
        if (trick[i] < 0 || trick[i] >= N_TILES) return "trick tile id out of 0..27";
        if (seen >> trick[i] & 1) return "a trick tile is also in a hand (or twice in the trick)";
        seen |= 1u << trick[i];
    }
    /* Seats that played to this trick hold one tile fewer than those still to play. */
    int k = popcount(hands[(leader + n_trick) & 3]);
    if (k < 1) return "the player to act has no tile";
    for (int i = 0; i < N_SEATS; i++) {
        int want = i < n_trick ? k - 1 : k;
        if (popcount(hands[(leader + i) & 3]) != want)
            return "hand sizes do not match the trick (seats that played hold one tile fewer)";
    }
    /* Each trick tile must be a legal play given what its player still holds. */
    if (n_trick > 0) {
        int led = g_led_suit[decl][trick[0]];
        for (int i = 1; i < n_trick; i++) {
            uint32_t h = hands[(leader + i) & 3];
            int t = trick[i];
            if ((h & g_follow_mask[decl][led]) && !(g_follow_mask[decl][led] >> t & 1))
                return "a trick tile did not follow suit although its player holds the led suit";
        }
    }
    return NULL;
}

static void search_init(Search *s, Table *tab, const uint32_t hands[N_SEATS], int decl) {
    memcpy(s->hand, hands, sizeof s->hand);
    s->tab = tab;
    memset(s->killer, NO_TILE, sizeof s->killer);
    s->follow = g_follow_mask[decl];
    s->rank = (const int8_t(*)[N_TILES])g_rank[decl];
    s->led_suit = g_led_suit[decl];
    s->lead_mask = g_lead_mask[decl];
    s->same_kind = g_same_kind[decl];
    s->member_diff = (const uint8_t(*)[N_TILES])g_member_diff[decl];
    s->between = (const uint32_t(*)[N_TILES][N_SUITS])g_between[decl];
    s->nodes = 0;
}

/* Exact value of playing t, by MTD(f): null-window searches from `guess` until the lower
 * and upper bounds meet (the TT carries the work from one probe to the next). */
static int exact_value(Search *s, const Trick *tr, int t, int guess) {
    int lo = -INF, hi = INF, g = guess;
    while (lo < hi) {
        int beta = g == lo ? g + 1 : g;
        g = play_value(s, tr, t, beta - 1, beta);
        if (g < beta) hi = g; else lo = g;
    }
    return g;
}

/* Exact value V (team-0 frame) of a position, by MTD(f) on the position itself: each probe
 * is one null-window search of the node (the TT's table at a trick boundary, the trick's
 * move loop inside one), so a move that cannot beat the bound is cut off instead of being
 * valued exactly as solve_position does for every legal move. */
static int position_value(Search *s, int leader, const int *trick, int n_trick) {
    Trick tr = {leader, 0, 0, 0, 0, 0, {0}};
    for (int i = 0; i < n_trick; i++) trick_add(s, &tr, trick[i]);
    int lo = -INF, hi = INF, g = 0;
    while (lo < hi) {
        int beta = g == lo ? g + 1 : g;
        g = n_trick == 0 ? boundary(s, leader, beta - 1, beta)
                         : in_trick(s, &tr, beta - 1, beta, NULL);
        if (g < beta) hi = g; else lo = g;
    }
    return g;
}

static int find_move(const Solution *sol, int t) {
    int i = 0;
    while (sol->moves[i] != t) i++;
    return i;
}

/* Exact Q of every legal move, V, and (if want_pv) a principal variation to the end. */
static void solve_position(Search *s, int leader, const int *trick, int n_trick, int want_pv,
                           Solution *out) {
    Trick tr = {leader, 0, 0, 0, 0, 0, {0}};
    for (int i = 0; i < n_trick; i++) trick_add(s, &tr, trick[i]);
    int seat = (leader + n_trick) & 3;
    int maximize = (seat & 1) == 0;
    uint32_t legal = legal_moves(s, &tr, seat);
    out->n_moves = 0;
    out->v = maximize ? -INF : INF;
    int guess = 0;
    uint32_t searched = 0;
    EqCtx eq = {0, 0, 0};
    for (uint32_t m = legal; m; m &= m - 1) {
        int t = __builtin_ctz(m);
        int twin = equivalent_tile(s, &tr, seat, t, searched, &eq);
        int q = twin >= 0 ? out->q[find_move(out, twin)] : exact_value(s, &tr, t, guess);
        searched |= 1u << t;
        guess = q;
        out->moves[out->n_moves] = (uint8_t)t;
        out->q[out->n_moves++] = (int8_t)q;
        if (maximize ? q > out->v : q < out->v) out->v = q;
    }
    out->pv_len = 0;
    if (!want_pv) return;

    /* Walk down: at each step play the lowest-id move whose value equals the value to go
     * (a null-window test around it; the TT makes these cheap). */
    uint32_t saved[N_SEATS];
    memcpy(saved, s->hand, sizeof saved);
    int target = out->v;
    for (;;) {
        int p = (tr.leader + tr.n) & 3;
        if (!s->hand[p]) break;
        uint32_t lm = legal_moves(s, &tr, p);
        int chosen = -1;
        for (uint32_t m = lm; m; m &= m - 1) {
            int t = __builtin_ctz(m);
            if (play_value(s, &tr, t, target - 1, target + 1) == target) { chosen = t; break; }
        }
        if (chosen < 0) break; /* cannot happen for an exact search */
        out->pv[out->pv_len++] = (uint8_t)chosen;
        s->hand[p] &= ~(1u << chosen);
        trick_add(s, &tr, chosen);
        if (tr.n == N_SEATS) {
            int pts = 1 + tr.points;
            target -= (tr.win_seat & 1) ? -pts : pts;
            Trick nt = {tr.win_seat, 0, 0, 0, 0, 0, {0}};
            tr = nt;
        }
    }
    memcpy(s->hand, saved, sizeof saved);
}

/* ---------------------------------------------------------------- Python bindings */

static int parse_hands(PyObject *obj, uint32_t hands[N_SEATS]) {
    PyObject *seq = PySequence_Fast(obj, "hands must be a sequence of 4 int masks");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != N_SEATS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "hands must hold 4 masks");
        return -1;
    }
    for (int p = 0; p < N_SEATS; p++) {
        unsigned long long m = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, p));
        if (PyErr_Occurred()) { Py_DECREF(seq); return -1; }
        if (m & ~(unsigned long long)TILE_BITS) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "hand mask of seat %d has bits above tile 27", p);
            return -1;
        }
        hands[p] = (uint32_t)m;
    }
    Py_DECREF(seq);
    return 0;
}

static int parse_trick(PyObject *obj, int trick[3], int *n_trick) {
    PyObject *seq = PySequence_Fast(obj, "trick must be a sequence of tile ids");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 3) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "trick must hold 0..3 tiles");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        trick[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) { Py_DECREF(seq); return -1; }
    }
    *n_trick = (int)n;
    Py_DECREF(seq);
    return 0;
}

static inline int sign(int x) { return (x > 0) - (x < 0); }

static void build_equivalence_tables(void) {
    for (int d = 0; d < N_DECLS; d++) {
        for (int st = 0; st < N_SUITS; st++) {
            g_lead_mask[d][st] = 0;
            for (int t = 0; t < N_TILES; t++)
                if (g_led_suit[d][t] == st) g_lead_mask[d][st] |= 1u << t;
        }
        for (int a = 0; a < N_TILES; a++) {
            g_same_kind[d][a] = 0;
            for (int b = 0; b < N_TILES; b++) {
                if (a != b && g_led_suit[d][a] == g_led_suit[d][b] && g_points[a] == g_points[b])
                    g_same_kind[d][a] |= 1u << b;
                uint8_t diff = 0;
                for (int st = 0; st < N_SUITS; st++) {
                    if ((g_follow_mask[d][st] >> a & 1) != (g_follow_mask[d][st] >> b & 1))
                        diff |= (uint8_t)(1u << st);
                    const int8_t *r = g_rank[d][st];
                    uint32_t between = 0;
                    for (int x = 0; x < N_TILES; x++)
                        if (x != a && x != b && sign(r[a] - r[x]) != sign(r[b] - r[x]))
                            between |= 1u << x;
                    g_between[d][a][b][st] = between;
                }
                g_member_diff[d][a][b] = diff;
            }
        }
    }
}

PyDoc_STRVAR(init_tables_doc,
"init_tables(follow_mask, rank, led_suit, points)\n\n"
"Copy the rules tables in (bytes): follow_mask uint32 little-endian [10, 8], rank int8\n"
"[10, 8, 28], led_suit int8 [10, 28], points int8 [28]. Invalidates every TT.");

/* Takes g_lock without holding the GIL (a search in another thread holds the lock and may
 * wait for the GIL when it ends). */
static void lock_tables(void) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g_lock);
    Py_END_ALLOW_THREADS
}

static PyObject *py_init_tables(PyObject *self, PyObject *args) {
    Py_buffer fm, rk, ls, pt;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &fm, &rk, &ls, &pt)) return NULL;
    PyObject *ret = NULL;
    if (fm.len != (Py_ssize_t)sizeof g_follow_mask || rk.len != (Py_ssize_t)sizeof g_rank ||
        ls.len != (Py_ssize_t)sizeof g_led_suit || pt.len != (Py_ssize_t)sizeof g_points) {
        PyErr_SetString(PyExc_ValueError, "init_tables: a table has the wrong size");
        goto done;
    }
    lock_tables();
    if (ensure_tables(1) < 0) {
        pthread_mutex_unlock(&g_lock);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(g_follow_mask, fm.buf, sizeof g_follow_mask);
    memcpy(g_rank, rk.buf, sizeof g_rank);
    memcpy(g_led_suit, ls.buf, sizeof g_led_suit);
    memcpy(g_points, pt.buf, sizeof g_points);
    g_n_count_values = 0;
    for (int t = 0; t < N_TILES; t++) {
        if (g_points[t] == 0) continue;
        int i = 0;
        while (i < g_n_count_values && g_count_values[i] != g_points[t]) i++;
        if (i == g_n_count_values) { g_count_values[i] = g_points[t]; g_count_masks[i] = 0; g_n_count_values++; }
        g_count_masks[i] |= 1u << t;
    }
    build_equivalence_tables();
    g_tables_ready = 1;
    for (int i = 0; i < MAX_THREADS; i++)
        if (g_tables[i].tt) new_generation(&g_tables[i], -1);
    pthread_mutex_unlock(&g_lock);
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&fm); PyBuffer_Release(&rk); PyBuffer_Release(&ls); PyBuffer_Release(&pt);
    return ret;
}

PyDoc_STRVAR(solve_doc,
"solve(hands, decl, leader, trick=(), want_pv=True) -> (v, q, pv, nodes)\n\n"
"hands: 4 int masks of the seats' remaining tiles (trick tiles removed); trick: tile ids\n"
"already played from `leader`. v: value to go, team-0 frame; q: tuple of (tile, Q) for\n"
"every legal move in ascending tile order; pv: list of tiles to the end (empty unless\n"
"want_pv); nodes: tiles played in the search. The TT is kept while calls stay on one deal.");

static PyObject *py_solve(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"hands", "decl", "leader", "trick", "want_pv", NULL};
    PyObject *hands_obj, *trick_obj = NULL;
    int decl, leader, want_pv = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oii|Op", kwlist, &hands_obj, &decl, &leader,
                                     &trick_obj, &want_pv))
        return NULL;
    uint32_t hands[N_SEATS];
    int trick[3], n_trick = 0;
    if (parse_hands(hands_obj, hands) < 0) return NULL;
    if (trick_obj && parse_trick(trick_obj, trick, &n_trick) < 0) return NULL;
    const char *err = check_state(hands, decl, leader, trick, n_trick);
    if (err) { PyErr_SetString(PyExc_ValueError, err); return NULL; }

    Search s;
    Solution sol;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g_lock);
    enter_deal(&g_tables[0], hands, decl);
    search_init(&s, &g_tables[0], hands, decl);
    solve_position(&s, leader, trick, n_trick, want_pv, &sol);
    pthread_mutex_unlock(&g_lock);
    Py_END_ALLOW_THREADS

    PyObject *q = PyTuple_New(sol.n_moves);
    PyObject *pv = PyList_New(sol.pv_len);
    if (!q || !pv) { Py_XDECREF(q); Py_XDECREF(pv); return NULL; }
    for (int i = 0; i < sol.n_moves; i++)
        PyTuple_SET_ITEM(q, i, Py_BuildValue("(ii)", sol.moves[i], sol.q[i]));
    for (int i = 0; i < sol.pv_len; i++) PyList_SET_ITEM(pv, i, PyLong_FromLong(sol.pv[i]));
    return Py_BuildValue("(iNNL)", sol.v, q, pv, s.nodes);
}

/* A batch of checked rows shared by the worker threads. Rows are handed out in chunks of
 * BATCH_CHUNK consecutive rows, so consecutive positions of one deal (a game labelled in
 * order) mostly land on the same thread and share its TT. Q is exact whatever the TT holds,
 * so the output does not depend on the number of threads or on the schedule. */
#define BATCH_CHUNK 4

typedef struct {
    const uint8_t *hands_bytes; /* N*16 bytes, copied row by row (may be unaligned) */
    const uint8_t *decl, *leader;
    const int8_t *trick;
    int8_t *q;                  /* N*28 Q, or (value_only) N values */
    Py_ssize_t n;
    int value_only;
    atomic_llong next;
    atomic_llong nodes;
} Batch;

typedef struct {
    Batch *batch;
    Table *tab;
} Worker;

static void *batch_worker(void *arg) {
    Worker *w = arg;
    Batch *b = w->batch;
    long long nodes = 0;
    for (;;) {
        long long r0 = atomic_fetch_add(&b->next, BATCH_CHUNK);
        if (r0 >= b->n) break;
        long long r1 = r0 + BATCH_CHUNK < b->n ? r0 + BATCH_CHUNK : b->n;
        for (long long r = r0; r < r1; r++) {
            uint32_t hands[N_SEATS];
            memcpy(hands, b->hands_bytes + r * 16, 16);
            int decl = b->decl[r], leader = b->leader[r];
            int trick[3], n_trick = 0;
            for (int i = 0; i < 3 && b->trick[r * 3 + i] >= 0; i++) trick[n_trick++] = b->trick[r * 3 + i];
            enter_deal(w->tab, hands, decl);
            Search s;
            search_init(&s, w->tab, hands, decl);
            if (b->value_only) {
                b->q[r] = (int8_t)position_value(&s, leader, trick, n_trick);
            } else {
                Solution sol;
                solve_position(&s, leader, trick, n_trick, 0, &sol);
                for (int i = 0; i < sol.n_moves; i++) b->q[r * N_TILES + sol.moves[i]] = sol.q[i];
            }
            nodes += s.nodes;
        }
    }
    atomic_fetch_add(&b->nodes, nodes);
    return NULL;
}

PyDoc_STRVAR(q_batch_doc,
"q_batch(hands, decl, leader, trick, threads=1) -> (q, nodes)\n\n"
"Many positions in one call (consecutive positions of one deal share a TT).\n"
"hands: bytes of N*4 uint32 little-endian masks; decl, leader: bytes of N uint8; trick:\n"
"bytes of N*3 int8 tile ids, -1 padded. threads: worker threads (the GIL is released while\n"
"they search; the result does not depend on it). Returns q: bytes of N*28 int8, Q (team-0\n"
"frame) of each tile the actor may legally play, -128 elsewhere; nodes: total tiles played.\n"
"value_only=True: q is N int8 values V (team-0 frame) instead, searched for V alone.");

static PyObject *py_q_batch(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"hands", "decl", "leader", "trick", "threads", "value_only", NULL};
    Py_buffer hb, db, lb, tb;
    int threads = 1, value_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*y*y*|ip", kwlist, &hb, &db, &lb, &tb,
                                     &threads, &value_only))
        return NULL;
    PyObject *ret = NULL, *qbytes = NULL;
    Py_ssize_t n = db.len;
    if (hb.len != n * 16 || lb.len != n || tb.len != n * 3) {
        PyErr_SetString(PyExc_ValueError, "q_batch: hands must be N*16 bytes, leader N, trick N*3");
        goto done;
    }
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "q_batch: threads must be 1..%d", MAX_THREADS);
        goto done;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        uint32_t hands[N_SEATS];
        memcpy(hands, (const char *)hb.buf + r * 16, 16);
        int decl = ((const uint8_t *)db.buf)[r], leader = ((const uint8_t *)lb.buf)[r];
        int trick[3], n_trick = 0;
        for (int i = 0; i < 3; i++) {
            int t = ((const int8_t *)tb.buf)[r * 3 + i];
            if (t < 0) break;
            trick[n_trick++] = t;
        }
        const char *err = check_state(hands, decl, leader, trick, n_trick);
        if (err) {
            PyErr_Format(PyExc_ValueError, "q_batch row %zd: %s", r, err);
            goto done;
        }
    }
    Py_ssize_t width = value_only ? 1 : N_TILES;
    qbytes = PyBytes_FromStringAndSize(NULL, n * width);
    if (!qbytes) goto done;
    Batch batch = {hb.buf, db.buf, lb.buf, tb.buf, (int8_t *)PyBytes_AS_STRING(qbytes), n,
                   value_only};
    atomic_init(&batch.next, 0);
    atomic_init(&batch.nodes, 0);
    memset(batch.q, -128, (size_t)(n * width));
    if (threads > (n + BATCH_CHUNK - 1) / BATCH_CHUNK) threads = (int)((n + BATCH_CHUNK - 1) / BATCH_CHUNK);
    if (threads < 1) threads = 1;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g_lock);
    if (ensure_tables(threads) < 0) {
        failed = 1;
    } else {
        Worker workers[MAX_THREADS];
        pthread_t tids[MAX_THREADS];
        int started = 0;
        for (int i = 0; i < threads; i++) workers[i] = (Worker){&batch, &g_tables[i]};
        /* The calling thread is worker 0; a thread that fails to start leaves its rows to
         * the others. */
        for (int i = 1; i < threads; i++)
            if (pthread_create(&tids[started], NULL, batch_worker, &workers[i]) == 0) started++;
        batch_worker(&workers[0]);
        for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
    }
    pthread_mutex_unlock(&g_lock);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        Py_CLEAR(qbytes);
        goto done;
    }
    ret = Py_BuildValue("(NL)", qbytes, (long long)atomic_load(&batch.nodes));
done:
    PyBuffer_Release(&hb); PyBuffer_Release(&db); PyBuffer_Release(&lb); PyBuffer_Release(&tb);
    return ret;
}

PyDoc_STRVAR(clear_doc, "clear()\n\nInvalidate every TT entry (start a new generation).");

static PyObject *py_clear(PyObject *self, PyObject *unused) {
    if (!g_tables_ready) { PyErr_SetString(PyExc_RuntimeError, "init_tables() has not been called"); return NULL; }
    lock_tables();
    for (int i = 0; i < MAX_THREADS; i++)
        if (g_tables[i].tt) new_generation(&g_tables[i], -1);
    pthread_mutex_unlock(&g_lock);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stats_doc, "stats() -> dict\n\nTT size (per thread), tables allocated, generations so far.");

static PyObject *py_stats(PyObject *self, PyObject *unused) {
    long long generations = 0;
    int allocated = 0;
    lock_tables();
    for (int i = 0; i < MAX_THREADS; i++)
        if (g_tables[i].tt) { allocated++; generations += g_tables[i].generations; }
    pthread_mutex_unlock(&g_lock);
    return Py_BuildValue("{s:I,s:I,s:i,s:L}", "tt_entries", TT_SIZE, "tt_bytes",
                         (unsigned)(TT_SIZE * sizeof(TTEntry)), "tables", allocated,
                         "generations", generations);
}

static PyMethodDef methods[] = {
    {"init_tables", py_init_tables, METH_VARARGS, init_tables_doc},
    {"solve", (PyCFunction)(void (*)(void))py_solve, METH_VARARGS | METH_KEYWORDS, solve_doc},
    {"q_batch", (PyCFunction)(void (*)(void))py_q_batch, METH_VARARGS | METH_KEYWORDS, q_batch_doc},
    {"clear", py_clear, METH_NOARGS, clear_doc},
    {"stats", py_stats, METH_NOARGS, stats_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csolver",
    "Exact alpha-beta solver for Texas 42 play (see eqfast.solver for the Python API).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__csolver(void) {
#ifdef CHECK_POPCNT
    if (!__builtin_cpu_supports("popcnt")) {
        PyErr_SetString(PyExc_ImportError, "_csolver needs a CPU with the POPCNT instruction");
        return NULL;
    }
#endif
    return PyModule_Create(&module);
}
