"""Pictures of a dataset, of an oracle training run or of a league, for a first look.

A dataset (eqfast-generate output): E[Q] of the move taken and sigma by decision index; the
ESS and max_w distributions, sampled decisions apart from enumerated ones (an enumerated
late position has exact weights and as few worlds as exist); exploration modes and the
q_gap of off-greedy moves; E[Q] of the move taken against the realized value to go (the
records' outcome fields) with Pearson r per decision index; legal-move counts; the
declaration mix. A training run (eqfast-train-oracle's run directory): the learning curve
(val q_gap and q_mae against rows seen) and, when the weights file holds them, the errors
per trick.
A league (eqfast-arena --league DIR; its DIR/league.json): the points-per-hand ratings
with their 95% intervals, best at the top, and the pairwise matrix (row's points minus
column's per hand) as a heatmap with the numbers in the cells.

The figures are matplotlib (an optional extra: `pip install -e '.[report]'`), drawn with
the non-interactive Agg backend; `write_report` saves one PNG, or one HTML page with the
figures embedded and the numbers they show as tables.
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np
import torch

from ..data.metadata import LOW_ESS
from ..data.schema import DecisionRecords
from ..engine.pipeline import N_DECISIONS
from ..engine.policy import MODE_NAMES
from ..engine.transcript import F_DECL
from ..rules.tables import DECL_NAMES
from .validation import pearson


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("eqfast-report draws with matplotlib, an optional extra: "
                          "pip install -e '.[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---------------------------------------------------------------------------- numbers
def dataset_figures(records: DecisionRecords) -> dict:
    """The numbers the dataset figures show (JSON-ready)."""
    legal = records["legal_mask"]
    act = records["action_taken"]
    taken = records["e_q_mean"].gather(1, act[:, None])[:, 0].double()
    sd_taken = records["e_q_var"].gather(1, act[:, None])[:, 0].clamp(min=0).sqrt().double()
    d = records["decision_idx"]
    by_dec = []
    for k in range(N_DECISIONS):
        m = d == k
        if not bool(m.any()):
            continue
        q = taken[m]
        by_dec.append({"decision": k, "n": int(m.sum()), "e_q_mean": float(q.mean()),
                       "e_q_p10": float(q.quantile(0.1)), "e_q_p90": float(q.quantile(0.9)),
                       "sigma_mean": float(sd_taken[m].mean())})
    enum = records["enumerated"]
    ess, max_w, n_worlds = records["ess"].double(), records["max_w"].double(), records["n_worlds"]
    mode = records["exploration_mode"].long()
    off = mode != 0
    out = {
        "n_records": len(records), "n_games": int(torch.unique(records["game_idx"]).numel()),
        "by_decision": by_dec,
        "ess_sampled": ess[~enum].tolist(), "ess_enumerated": ess[enum].tolist(),
        "ess_ratio_sampled": (ess[~enum] / n_worlds[~enum].double()).tolist(),
        "max_w_sampled": max_w[~enum].tolist(),
        "low_ess_sampled": int((ess[~enum] < LOW_ESS).sum()),
        "enumerated": int(enum.sum()),
        "modes": {name: int((mode == i).sum()) for i, name in enumerate(MODE_NAMES)},
        "q_gap_off_greedy": records["q_gap"][off].double().tolist(),
        "legal_moves": np.bincount(legal.sum(1).numpy(), minlength=8)[1:].tolist(),
        "declarations": {},
    }
    first = d == 0
    decl = records["transcript_tokens"][first, 0, F_DECL].long()
    out["declarations"] = {DECL_NAMES[i]: int((decl == i).sum()) for i in range(len(DECL_NAMES))}
    if records.has_outcomes:
        real = records["realized_to_go"].double()
        out["outcome"] = {"e_q_taken": taken.tolist(), "realized": real.tolist(),
                          "decision": d.tolist(),
                          "pearson_by_decision": [pearson(taken[d == k], real[d == k])
                                                  for k in range(N_DECISIONS)],
                          "pearson": pearson(taken, real)}
    return out


def run_figures(run_dir) -> dict:
    """The numbers of a training run's figures: history.jsonl, and the per-trick errors of
    best.safetensors when its metadata holds them."""
    run_dir = Path(run_dir)
    path = run_dir / "history.jsonl"
    try:
        history = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable training history ({e})") from None
    if not history:
        raise ValueError(f"{path}: no evaluations yet")
    out = {"history": history, "per_trick": None}
    best = run_dir / "best.safetensors"
    if best.exists():
        from ..oracle.weights import read_weights
        _, meta = read_weights(best)
        metrics = meta.get("metrics") or {}
        for part in (metrics, *(v for v in metrics.values() if isinstance(v, dict))):
            if isinstance(part, dict) and isinstance(part.get("per_trick"), list):
                out["per_trick"] = part["per_trick"]
                break
    return out


# ---------------------------------------------------------------------------- drawing
def draw_dataset(numbers: dict):
    plt = _pyplot()
    fig, ax = plt.subplots(2, 3, figsize=(15, 8.5))
    bd = numbers["by_decision"]
    x = [b["decision"] for b in bd]
    a = ax[0, 0]
    a.plot(x, [b["e_q_mean"] for b in bd], label="E[Q] of the move taken (mean)")
    a.fill_between(x, [b["e_q_p10"] for b in bd], [b["e_q_p90"] for b in bd], alpha=0.25,
                   label="10-90% of records")
    a.plot(x, [b["sigma_mean"] for b in bd], label="sigma of that move (mean)")
    a.set(xlabel="decision index", ylabel="points (actor frame)", title="E[Q] and sigma")
    a.legend(fontsize=8)
    a = ax[0, 1]
    bins = np.linspace(0, 1, 21)
    a.hist(numbers["ess_ratio_sampled"], bins=bins, alpha=0.7, label="sampled: ESS / n_worlds")
    a.hist(numbers["max_w_sampled"], bins=bins, alpha=0.5, label="sampled: max_w")
    a.set(title=f"weights ({numbers['enumerated']} enumerated records not shown; "
                f"{numbers['low_ess_sampled']} sampled with ESS < {LOW_ESS})",
          xlabel="fraction", ylabel="records")
    a.title.set_fontsize(9)
    a.legend(fontsize=8)
    a = ax[0, 2]
    modes = numbers["modes"]
    a.bar(list(modes), list(modes.values()))
    a.set(title="exploration modes", ylabel="records")
    if numbers["q_gap_off_greedy"]:
        inset = a.inset_axes([0.5, 0.45, 0.45, 0.45])
        inset.hist(numbers["q_gap_off_greedy"], bins=20)
        inset.set_title("q_gap off greedy", fontsize=8)
        inset.tick_params(labelsize=7)
    a = ax[1, 0]
    if "outcome" in numbers:
        o = numbers["outcome"]
        a.scatter(o["e_q_taken"], o["realized"], s=3, alpha=0.3)
        r = o["pearson"]
        a.set(title=f"E[Q] of the move taken vs realized value to go (r = "
                    f"{'-' if r is None else f'{r:.2f}'})",
              xlabel="E[Q] (points)", ylabel="realized (points)")
        a.title.set_fontsize(9)
        inset = a.inset_axes([0.62, 0.08, 0.35, 0.3])
        rs = [np.nan if v is None else v for v in o["pearson_by_decision"]]
        inset.plot(range(N_DECISIONS), rs)
        inset.set_title("r by decision", fontsize=7)
        inset.tick_params(labelsize=6)
    else:
        a.text(0.5, 0.5, "no outcome fields in these records", ha="center", va="center")
        a.set_axis_off()
    a = ax[1, 1]
    a.bar(range(1, 8), numbers["legal_moves"])
    a.set(title="legal moves per decision", xlabel="legal moves", ylabel="records")
    a = ax[1, 2]
    decl = numbers["declarations"]
    a.barh(list(decl), list(decl.values()))
    a.set(title="declarations (games)", xlabel="games")
    fig.suptitle(f"{numbers['n_games']} games, {numbers['n_records']} records")
    fig.tight_layout()
    return fig


def draw_run(numbers: dict):
    plt = _pyplot()
    has_trick = numbers["per_trick"] is not None
    fig, ax = plt.subplots(1, 2 if has_trick else 1, figsize=(12 if has_trick else 7, 4.5),
                           squeeze=False)
    h = numbers["history"]
    rows = [p["rows_seen"] for p in h]
    a = ax[0, 0]
    a.plot(rows, [p["q_gap"] for p in h], label="val q_gap")
    a.set(xlabel="rows seen", ylabel="q_gap (points)", title="learning curve")
    twin = a.twinx()
    twin.plot(rows, [p["q_mae"] for p in h], color="tab:orange", label="val q_mae")
    twin.set_ylabel("q_mae (points)")
    a.legend(loc="upper right", fontsize=8)
    twin.legend(loc="center right", fontsize=8)
    if has_trick:
        a = ax[0, 1]
        pt = numbers["per_trick"]
        t = np.arange(1, len(pt) + 1)
        a.bar(t - 0.2, [p.get("q_gap") or 0 for p in pt], width=0.4, label="q_gap")
        a.bar(t + 0.2, [p.get("q_mae") or 0 for p in pt], width=0.4, label="q_mae")
        a.set(xlabel="trick", ylabel="points", title="errors per trick (best weights)")
        a.legend(fontsize=8)
    fig.tight_layout()
    return fig


def read_league(source) -> dict | None:
    """The league report of `source` (a league.json, or a directory holding one); None
    when `source` is not a league."""
    from ..play.league import REPORT_FILE

    source = Path(source)
    path = source / REPORT_FILE if source.is_dir() else source
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable league report ({e})") from None
    if not isinstance(report, dict) or report.get("kind") != "eqfast-league":
        raise ValueError(f"{path}: not a league report (eqfast-arena --league writes one)")
    return report


def draw_league(report: dict):
    plt = _pyplot()
    names = report["matrix"]["policies"]
    cheat = {e["name"]: e["cheating"] for e in report["panel"]}
    label = lambda n: f"{n} (CHEATING)" if cheat.get(n) else n
    pts = report["ratings"]["points"]
    rated = [n for n in names if pts["ratings"][n] is not None]
    order = sorted(rated, key=lambda n: pts["ratings"][n]["rating"]) + \
        [n for n in names if n not in rated]
    k = len(names)
    fig, ax = plt.subplots(1, 2, figsize=(6 + 1.1 * k, 1.6 + 0.55 * k),
                           gridspec_kw={"width_ratios": [1, 1.35]})
    a = ax[0]
    y = np.arange(len(rated))
    r = [pts["ratings"][n] for n in order[:len(rated)]]
    a.errorbar([v["rating"] for v in r], y,
               xerr=[[v["rating"] - v["ci95"][0] for v in r],
                     [v["ci95"][1] - v["rating"] for v in r]],
               fmt="o", capsize=4)
    for yy, v in zip(y, r):
        a.annotate(f"{v['rating']:+.2f}", (v["rating"], yy), xytext=(0, 6),
                   textcoords="offset points", ha="center", fontsize=8)
    a.set_yticks(y, [label(n) for n in order[:len(rated)]])
    a.set_ylim(-0.6, max(len(rated), 1) - 0.3)      # room for the top label
    a.axvline(0, color="grey", lw=0.8)
    fit = pts["chi2_per_dof"]
    a.set(xlabel=f"points per hand ({pts['anchor']} = 0)",
          title="ratings, 95% intervals (chi2/dof "
                f"{'-' if fit is None else f'{fit:.2f}'})")
    a = ax[1]
    top = order[::-1]
    m = np.full((k, k), np.nan)
    for i, n in enumerate(top):
        for j, o in enumerate(top):
            v = report["matrix"]["mean_diff"][names.index(n)][names.index(o)]
            if v is not None:
                m[i, j] = v
    vmax = max(1.0, float(np.nanmax(np.abs(m)))) if np.isfinite(m).any() else 1.0
    im = a.imshow(m, cmap="RdBu", vmin=-vmax, vmax=vmax)
    half = report["matrix"]["half_width"]
    for i, n in enumerate(top):
        for j, o in enumerate(top):
            if np.isfinite(m[i, j]):
                h = half[names.index(n)][names.index(o)]
                a.text(j, i, f"{m[i, j]:+.1f}" + ("" if h is None else f"\n±{h:.1f}"),
                       ha="center", va="center", fontsize=7,
                       color="white" if abs(m[i, j]) > 0.6 * vmax else "black")
    a.set_xticks(range(k), top, rotation=35, ha="right", fontsize=8)
    a.set_yticks(range(k), top, fontsize=8)
    a.set_title("points per hand, row against column (95% half-width)")
    fig.colorbar(im, ax=a, shrink=0.8)
    fig.suptitle(f"league: {report['hands']} hands, commit "
                 f"{(report.get('commit') or '?')[:10]}, {report.get('date', '')}"
                 + ("" if report.get("complete") else " (unfinished)"), fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- output
def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    _pyplot().close(fig)
    return buf.getvalue()


def _table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(k))}</td>" for k in keys) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v) -> str:
    return html.escape(f"{v:.3f}" if isinstance(v, float) else str(v))


def write_report(source, out, skip=(), progress=None) -> dict:
    """Draw the report of `source` (a dataset directory or shard, a training run
    directory, or a league: its league.json or its directory) into `out` (.png or .html),
    atomically, less the shards `skip` names (load_records); progress(message) hears each
    step. Returns what was drawn."""
    from ..data.shards import load_records
    from ..utils.atomic import atomic_write_bytes

    source, out = Path(source), Path(out)
    if out.suffix not in (".png", ".html"):
        raise ValueError(f"--out {out}: the report is a .png or an .html file")
    say = progress or (lambda message: None)
    league = read_league(source)
    if league is not None:
        say(f"reading the league {source}")
        fig, kind = draw_league(league), "league"
        pts = league["ratings"]["points"]["ratings"]
        tables = _table([{"policy": n, "rating": None if v is None else v["rating"],
                          "ci95 lo": None if v is None else v["ci95"][0],
                          "ci95 hi": None if v is None else v["ci95"][1]}
                         for n, v in pts.items()]) + _table(
            [{k: p[k] for k in ("a", "b", "hands", "status", "mean_diff", "half_width",
                                "win_share")} for p in league["pairs"]])
    elif (source / "history.jsonl").exists():
        say(f"reading the training run {source}")
        numbers = run_figures(source)
        fig, kind = draw_run(numbers), "training run"
        tables = _table([{k: p.get(k) for k in ("step", "rows_seen", "wall_s", "q_gap",
                                                 "q_mae", "accuracy")}
                         for p in numbers["history"]])
    else:
        say(f"reading {source}")
        records, _ = load_records(source, skip=skip)
        if len(records) == 0:
            raise ValueError(f"{source}: no records to draw")
        say(f"computing the figures of {len(records)} records")
        numbers = dataset_figures(records)
        fig, kind = draw_dataset(numbers), "dataset"
        tables = _table(numbers["by_decision"]) + _table(
            [{"mode": k, "records": v} for k, v in numbers["modes"].items()])
    say(f"drawing {out}")
    png = _png(fig)
    if out.suffix == ".png":
        atomic_write_bytes(out, png)
    else:
        page = (f"<!doctype html><meta charset='utf-8'><title>eqfast report: "
                f"{html.escape(str(source))}</title><style>body{{font-family:sans-serif}}"
                f"table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;"
                f"padding:2px 6px;text-align:right}}</style>"
                f"<h1>{html.escape(kind)}: {html.escape(str(source))}</h1>"
                f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
                f"{tables}")
        atomic_write_bytes(out, page.encode())
    return {"source": str(source), "kind": kind, "out": str(out), "bytes": out.stat().st_size}
