"""The readable table of an `evaluate` result (the JSON holds everything; this is a view)."""
from __future__ import annotations


def _p(x: float) -> str:
    """A probability in 4 characters: ' 1  ' and ' 0  ' only when exact, '>.99' / '<.01'
    for values that two decimals would round to 1 or 0, else ' .NN'."""
    if x == 1 or x == 0:
        return f" {x:.0f}  "
    text = f"{x:.2f}"
    if text == "1.00":
        return ">.99"
    if text == "0.00":
        return "<.01"
    return text[1:].rjust(4)


def _g(x) -> str:
    return "none" if x is None else f"{x:.1f}"


def format_table(r: dict, detail: str = "best") -> str:
    """Header, per-contract scores, the p_upper matrix, and per-level detail for the chosen
    contract (`detail` = "best"), every contract ("all") or none ("none")."""
    lines = [f"hand {r['hand']}  (bidder seat {r['bidder_seat']}, leads)   "
             f"completion model {r['completion_model']}   N = {r['n']}   seed {r['seed']}",
             f"values: {r['values']}",
             f"p_upper = {r['labels']['p_upper']}"]
    if "first_lead" in r["contracts"][0]:
        lines.append(f"fixed lead = {r['labels']['p_upper_fixed_lead']}")
    if r.get("lower_bracket"):
        lb = r["lower_bracket"]
        lines.append(f"p_lower = {r['labels']['p_lower']}  (first {lb['n']} completions"
                     + (f", {lb['worlds']} worlds per decision, oracle {lb['oracle']}" if "worlds" in lb else "")
                     + ")")
    lines += ["", "bidder team points under perfect-information play (per contract, over the completions)",
              f"{'contract':<16}{'mean':>6}{'q05':>5}{'q10':>5}{'q50':>5}{'q90':>5}{'cvar10':>7}{'worst':>6}"
              + ("  fixed lead (mean)" if "first_lead" in r["contracts"][0] else "")
              + ("   mean_lower" if r.get("lower_bracket") else "")]
    for c in r["contracts"]:
        s = c["score_upper"]
        lines.append(f"{c['decl']} {c['name']:<14}{s['mean']:6.1f}" + "".join(
                     f"{s[q]:5g}" for q in ("q05", "q10", "q50", "q90"))
                     + f"{s['cvar10']:7.1f}{s['worst']:6g}"
                     + (f"  {c['first_lead']['best_fixed_lead']:>4} ({c['first_lead']['mean_points_fixed_lead']:4.1f})"
                        if "first_lead" in c else "")
                     + (f"   {c['score_lower']['mean']:10.1f}" if "score_lower" in c else ""))
    levels = [lv["level"] for lv in r["levels"]]
    lines += ["", "p_upper by contract (rows) and bid level (columns; 42 = 1 mark, 84 = 2 marks: all 42 points)",
              f"{'':<16}" + "".join(f"{lv:>5}" for lv in levels)]
    for c in r["contracts"]:
        lines.append(f"{c['decl']} {c['name']:<14}" + "".join(f"{_p(x['p_upper']['p']):>5}" for x in c["cells"]))
    ch = r["choice"]
    lines += ["", f"choice: {ch['contract']} {ch['name']} by {ch['criterion']}: "
                  f"{ch['max_of_averages']:.1f} points",
              f"        fused average of max (INVALID: a different contract per completion): "
              f"{ch['fused_average_of_max_INVALID']:.1f} points (+{ch['fusion_points']:.1f})"]
    bb = r["best_bid"]
    lines.append(f"best bid: {bb['level'] or 'none'} in contract {bb['contract']} "
                 f"(highest level with p_upper >= {bb['target']})")
    if r.get("stopping"):
        st = r["stopping"]
        lines.append(f"stopping: {st['reason']} after {st['rounds']} rounds")
    if r.get("audit"):
        a = r["audit"]
        lines.append(f"audit: {a['audited_fraction']:.0%} of rows solved exactly, worst |V_net - V_PI| "
                     f"{_g(a['worst_discrepancy_audited'])} points (adversarial search: "
                     f"{_g(a['adversarial']['worst_discrepancy'])}), flips found {a['flips_found']}")
    shown = {"best": [c for c in r["contracts"] if c["decl"] == ch["contract"]],
             "all": r["contracts"], "none": []}[detail]
    for c in shown:
        fl = "first_lead" in c
        lines += ["", f"{c['decl']} {c['name']}: level  p_upper [95% Wilson]   mark swing"
                  + ("   fixed lead" if fl else "")
                  + ("   p_lower [95% Wilson]   gap" if r.get("lower_bracket") else "")
                  + ("   audit" if r.get("audit") else "")]
        for x in c["cells"]:
            u = x["p_upper"]
            line = (f"{x['level']:>8}  {u['p']:6.3f} [{u['ci95'][0]:.3f}, {u['ci95'][1]:.3f}]"
                    f"   {u['mark_swing']:+6.2f}")
            if fl:
                line += f"     {x['p_upper_fixed_lead']['p']:6.3f}"
            if "p_lower" in x:
                lo = x["p_lower"]
                line += (f"      {lo['p']:6.3f} [{lo['ci95'][0]:.3f}, {lo['ci95'][1]:.3f}]"
                         f"  {x['gap']['gap']:+.2f}{' !' if x['gap']['warning'] else ''}")
            if "audit" in x:
                line += "   validated" if x["audit"]["validated"] else \
                    f"   NOT validated ({x['audit']['near_unaudited']} near rows unaudited)"
            lines.append(line)
    for w in r.get("warnings", []):
        lines.append(f"warning: large clairvoyance gap: {w}")
    return "\n".join(lines)


def plot_matrix(r: dict, path) -> None:
    """The p_upper matrix of an `evaluate` result as a heat map (contracts x bid levels,
    each cell's P_M(make) printed in it; the chosen contract's row marked), saved as an
    image at `path` (matplotlib, the `report` extra)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("--plot draws with matplotlib, an optional extra: "
                          "pip install -e '.[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..utils.atomic import atomic_path

    contracts = r["contracts"]
    levels = [x["level"] for x in contracts[0]["cells"]]
    p = np.array([[x["p_upper"]["p"] for x in c["cells"]] for c in contracts])
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(levels), 1.2 + 0.45 * len(contracts)))
    ax.imshow(p, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i in range(p.shape[0]):
        for j in range(p.shape[1]):
            ax.text(j, i, f"{p[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if p[i, j] < 0.6 else "black")
    best = r.get("choice", {}).get("contract")
    ax.set_yticks(range(len(contracts)),
                  [c["name"] + (" (chosen)" if c["decl"] == best else "") for c in contracts])
    ax.set_xticks(range(len(levels)), levels)
    ax.set_xlabel("bid")
    label = r.get("labels", {}).get("p_upper", "P(make)")
    ax.set_title(f"{r.get('hand', '')}: {label}, n = {r.get('n')}", fontsize=8, wrap=True)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1] if "." in str(path) else "png",
                    dpi=110)
    plt.close(fig)
