"""The saturation knee (informational): where throughput stops growing while latency climbs.

Primary rules (docs/capacity.md, "The knee"):
- rate sweeps: the last level before achieved/offered falls under 0.95 (offered = arrivals
  actually scheduled, so Poisson noise cannot fake a knee);
- concurrency sweeps: the last level whose throughput still rose >= 10 % over the best so far
  when the next level(s) do not (running max, so noise cannot un-saturate a curve). A level
  "rose" only when the 10 % gain exceeds the noise of both throughputs (their intervals): the
  llama.cpp curve 14.7 / 14.3 / 16.2 / 15.1 rps is saturated from the first level, not knee at
  4 because one noisy step beat the best by 10.2 %. "Saturated from the first level" is a valid
  answer. Confidence high when two further levels are shown flat, medium when one of them is
  only within noise (or latency did not grow), low when only one level follows. `interval`: the
  levels the knee may be at given the noise (up to the last later level whose gain the noise
  cannot rule out).
Cross-checks, never the answer on their own: a bounded USL fit (N* trusted only when beta's 95 %
CI excludes 0 and N* lies in the tested range; otherwise the Amdahl reading) and Kneedle on
(log2 N, X) with >= 7 points (fewer points make its curvature noise).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from capacity_plugins.analysis.intervals import gain_class
from capacity_plugins.analysis.table import rps_half_width
from capacity_plugins.contracts.summary import CrossChecks, Knee, Kneedle, StepSummary, ToDecide, Usl

GAIN_MIN = 0.10
RATE_RATIO_MIN = 0.95


def _no_knee(unit: str, method: str, reason: str, **extra: Any) -> Knee:
    return Knee(value=None, unit=unit, bracket=None, interval=None, method=method, confidence=None, reason=reason,
                **extra)


def marginal_gain_knee(levels: list[float], xs: list[float], latency: list[float | None] | None = None,
                       halves: list[float] | None = None) -> Knee:
    """Concurrency sweep: the last level before throughput stops rising >= 10 % beyond the noise.

    `halves`: half-width of each throughput's interval (None or zeros: plain point comparisons).
    """
    if len(levels) < 2:
        return _no_knee("users", "marginal_gain", "fewer than two valid levels: no sweep to judge")
    x = np.asarray(xs, float)
    h = np.asarray(halves if halves is not None else [0.0] * len(x), float)
    best = [int(np.argmax(x[: k + 1])) for k in range(len(x))]  # index of the best so far
    # gains[0] is undefined (nothing before the first level); math.nan compares False everywhere
    gains: list[float | None] = [math.nan, *(float(x[k] / x[best[k - 1]] - 1) if x[best[k - 1]] > 0 else math.inf
                                             for k in range(1, len(x)))]
    cls: list[str] = ["rise"] + [gain_class(float(x[k]), float(h[k]), float(x[best[k - 1]]), float(h[best[k - 1]]), GAIN_MIN)
                                 for k in range(1, len(x))]
    for i in range(len(levels) - 1):
        # a knee at i: no level after it (up to two) rises 10 % over the best so far
        following = list(range(i + 1, min(i + 3, len(levels))))
        if any(cls[k] == "rise" for k in following):
            continue
        if i > 0 and cls[i] != "rise":
            continue  # i itself did not demonstrably rise: the knee was earlier (or absent)
        flat = [k for k in following if cls[k] == "flat"]
        unclear = [k for k in range(i + 1, len(levels)) if cls[k] == "unclear"]
        if not flat:
            # only noise after i: neither a rise nor a flat is shown
            continue
        confidence = "high" if len(flat) >= 2 else ("medium" if len(following) >= 2 else "low")
        lat_note = ""
        if latency is not None and latency[i] and latency[following[0]]:
            ratio = latency[following[0]] / latency[i]  # type: ignore[operator]
            lat_note = f"; p95 latency ×{ratio:.1f} over the bracket"
            if confidence == "high" and ratio < 1.2:
                confidence = "medium"  # flat throughput without latency growth: odd, say so
        words = ", ".join(f"{levels[k]:g} ({gains[k]:+.0%}{', within noise' if cls[k] == 'unclear' else ''})"
                          for k in following)
        head = (f"no gain beyond level {levels[0]:g}: saturated from the first level; " if i == 0 else "")
        upper = levels[unclear[-1]] if unclear else levels[i]
        noise_note = (f"; within the noise the knee may be as late as {upper:g}" if unclear else "")
        return Knee(
            value=levels[i], unit="users", bracket=[levels[i], levels[i + 1]],
            interval=[levels[i], upper], saturated_from_first=i == 0,
            method="marginal_gain", confidence=confidence,
            reason=f"{head}throughput rose < {GAIN_MIN:.0%} beyond the noise at the next level(s): {words}"
                   f" ({len(flat)} level{'s' if len(flat) != 1 else ''} shown flat){lat_note}{noise_note}",
            gains=gains, gain_classes=cls,
        )
    risers = [k for k in range(1, len(cls)) if cls[k] == "rise"]
    if not risers:
        return _no_knee("users", "marginal_gain",
                        f"no gain beyond level {levels[0]:g} shown beyond the noise, and no level shown flat either: "
                        "saturated from the first level or too noisy to tell (longer steps or repeats sharpen this)",
                        gains=gains, gain_classes=cls)
    if cls[-1] == "rise":
        why = f"throughput still rose >= {GAIN_MIN:.0%} at the highest level"
    else:
        why = (f"no level stayed demonstrably flat after the last rise (at {levels[risers[-1]]:g}); "
               "the differences are within noise")
    return _no_knee("users", "marginal_gain", f"no knee within the tested range: {why}", gains=gains, gain_classes=cls)


def requests_to_decide(rows: list[StepSummary], gain: float = GAIN_MIN) -> ToDecide | None:
    """How many requests per step would tell a `gain` rise from flat at the noise these steps had.

    Two levels' throughputs with relative half-widths r each separate a flat pair from a `gain`
    rise once r·√(1 + (1+gain)²) < gain (gain_class's rule); a half-width shrinks with √n, so the
    noisiest step needs n × (r / r*)² requests. None when every step is already that sharp.
    """
    target = gain / math.hypot(1.0, 1.0 + gain)
    worst = max(((rps_half_width(r) / r.rps, r) for r in rows if r.rps and r.requests),
                key=lambda p: p[0], default=None)
    if worst is None or not math.isfinite(worst[0]) or worst[0] <= target:
        return None
    rel, row = worst
    need = math.ceil(row.requests * (rel / target) ** 2)
    slowest = min(r.rps for r in rows if r.rps)
    step_s = math.ceil(need / slowest)
    repeats = math.ceil(need / row.requests)
    return ToDecide(requests_per_step=need, step_s=step_s, repeats=repeats,
                    text=f"a {gain:.0%} difference at this noise (±{rel:.0%} at level {row.level:g}) needs ≈ {need:,} "
                         f"requests per step: measured windows of ≥ {step_s} s at the slowest level "
                         f"({slowest:.3g} req/s), or --repeat {repeats}")


def boundary_noise(offered_rps: float | None, e2e_mean_ms: float | None, window_s: float | None) -> float:
    """Relative shortfall of achieved vs offered that counting alone explains (3 sigma).

    Completions in a window minus arrivals in it = in flight at its start − in flight at its end;
    each is ~Poisson(rate × mean E2E), so a short step at a healthy server can show achieved at
    92 % of offered. Saturation instead grows the deficit with the window, so long steps still
    see it.
    """
    if not offered_rps or not e2e_mean_ms or not window_s:
        return 0.0
    in_flight = offered_rps * e2e_mean_ms / 1000.0
    return 3.0 * math.sqrt(2.0 * in_flight) / (offered_rps * window_s)


def rate_knee(levels: list[float], achieved: list[float | None], offered: list[float | None],
              noise: list[float] | None = None) -> Knee:
    """Rate sweep: the last level before achieved/offered falls under 0.95 (beyond counting noise)."""
    ratios = [a / o if a is not None and o else None for a, o in zip(achieved, offered, strict=True)]
    floors = [min(RATE_RATIO_MIN, 1.0 - (noise[k] if noise else 0.0)) for k in range(len(levels))]
    if not levels or all(r is None for r in ratios):
        return _no_knee("rps", "achieved_over_offered", "no offered/achieved rates in steps.json")
    for k, r in enumerate(ratios):
        if r is None or r >= floors[k]:
            continue
        if k == 0:
            return _no_knee("rps", "achieved_over_offered",
                            f"saturated already at the lowest rate {levels[0]:g} (achieved {r:.0%} of offered)",
                            ratios=ratios, saturated_from_first=True)
        after = [(q, floors[j]) for j, q in enumerate(ratios[k + 1:k + 2], k + 1) if q is not None]
        confidence = "high" if after and after[0][0] < after[0][1] else "low"
        # Earlier levels short of 95 % only by counting noise: the knee may be that early.
        noisy = [j for j in range(k) if (q := ratios[j]) is not None and q < RATE_RATIO_MIN]
        low = levels[max(noisy[0] - 1, 0)] if noisy else levels[k - 1]
        return Knee(value=levels[k - 1], unit="rps", bracket=[levels[k - 1], levels[k]],
                    interval=[low, levels[k - 1]], saturated_from_first=False,
                    method="achieved_over_offered", confidence=confidence,
                    reason=f"achieved fell to {r:.0%} of offered at {levels[k]:g} rps"
                           + ("" if after else " (no further level to confirm)"),
                    ratios=ratios)
    lowered = [f"{lv:g}" for lv, f in zip(levels, floors, strict=True) if f < RATE_RATIO_MIN]
    note = (f" (steps at {', '.join(lowered)} rps are too short to judge 95 % against counting noise; "
            "longer steps sharpen this)") if lowered else ""
    return _no_knee("rps", "achieved_over_offered",
                    f"no knee within the tested range: achieved >= {RATE_RATIO_MIN:.0%} of offered at every rate" + note,
                    ratios=ratios, ratio_floors=floors)


def _usl(n: np.ndarray, lam: float, a: float, b: float) -> np.ndarray:
    return lam * n / (1 + a * (n - 1) + b * n * (n - 1))


def usl_fit(levels: list[float], xs: list[float]) -> Usl | None:
    """Bounded USL fit with a 95 % CI on beta; None when there are too few points to fit 3 parameters."""
    from scipy.optimize import curve_fit

    n = np.asarray(levels, float)
    x = np.asarray(xs, float)
    if len(n) < 4 or not np.all(np.isfinite(x)) or x.max() <= 0:
        return None
    p0 = [max(x[0] / n[0], 1e-9), 0.01, 1e-4]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p, cov = curve_fit(_usl, n, x, p0=p0, bounds=([0, 0, 0], [np.inf, 1, 1]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    lam, a, b = (float(v) for v in p)
    se = np.sqrt(np.clip(np.diag(cov), 0, None)) if np.all(np.isfinite(cov)) else np.full(3, np.inf)
    n_star = math.sqrt((1 - a) / b) if b > 0 else math.inf
    beta_sig = bool(b - 2 * se[2] > 0)
    trusted = beta_sig and n.min() <= n_star <= n.max()
    out = Usl(
        lambda_=lam, alpha=a, beta=b,
        beta_ci95=[b - 2 * float(se[2]), b + 2 * float(se[2])],
        n_star=n_star if math.isfinite(n_star) else None,
        x_star=float(_usl(np.array([n_star]), lam, a, b)[0]) if math.isfinite(n_star) else None,
        trusted=bool(trusted),
    )
    if not trusted:
        # Amdahl reading (beta ~ 0): asymptote lambda/alpha, 90 % of it at N90 = 9(1-alpha)/alpha.
        out.amdahl_x_max = lam / a if a > 0 else None
        out.amdahl_n90 = 9 * (1 - a) / a if a > 0 else None
        out.why_untrusted = ("beta's 95 % CI includes 0" if not beta_sig
                             else f"N* = {n_star:.0f} outside the tested range")
    return out


def kneedle_x(x: np.ndarray, y: np.ndarray, sensitivity: float = 1.0) -> float | None:
    """Kneedle (Satopää et al. 2011) on a concave, increasing curve: the x of its first knee, or
    None. The `kneed` package's offline algorithm for curve="concave", direction="increasing"
    (tests/test_knee.py checks it against kneed on random curves); written here because importing
    kneed pulls in scipy.signal and scipy.stats, about a tenth of analysing a million records."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a flat curve: 0/0, no extremum, no knee
        xn = (x - x.min()) / (x.max() - x.min())
        yn = (y - y.min()) / (y.max() - y.min())
    d = yn - xn  # the difference curve
    before, after = np.r_[d[0], d[:-1]], np.r_[d[1:], d[-1]]  # neighbours, the ends clipped
    maxima = np.flatnonzero((d >= before) & (d >= after))
    minima = set(np.flatnonzero((d <= before) & (d <= after)).tolist())
    if not maxima.size:
        return None
    thresholds = d[maxima] - sensitivity * abs(float(np.diff(xn).mean()))
    at_max = {int(i): k for k, i in enumerate(maxima)}
    threshold, knee_at, active = 0.0, int(maxima[0]), True
    for i in range(int(maxima[0]), len(d) - 1):
        if i in at_max:
            threshold, knee_at, active = float(thresholds[at_max[i]]), i, True
        if i in minima:  # after a local minimum, no knee until the next maximum
            threshold, active = 0.0, False
        if active and d[i + 1] < threshold:
            return float(x[knee_at])
    return None


def kneedle(levels: list[float], xs: list[float]) -> Kneedle | None:
    """Kneedle on (log2 N, X); needs >= 7 points, else it only reflects the grid."""
    if len(levels) < 7 or min(levels) <= 0:
        return None
    lx = np.log2(np.asarray(levels, float))
    if len(set(lx)) != len(lx):
        return None
    knee = kneedle_x(lx, np.asarray(xs, float))
    return Kneedle(value=float(2 ** knee) if knee is not None else None, x="log2(level)")


def find_knee(rows: list[StepSummary], sweep_kind: str) -> Knee:
    valid = sorted((r for r in rows if r.valid), key=lambda r: r.level)
    excluded = [r.level for r in rows if not r.valid]
    if sweep_kind == "rate":
        offered = [r.offered_rps if r.offered_rps is not None else r.target_rps for r in valid]
        knee = rate_knee([r.level for r in valid], [r.achieved_rps for r in valid], offered,
                         [boundary_noise(o, r.e2e_mean_ms, r.window_s) for o, r in zip(offered, valid, strict=True)])
    elif sweep_kind in ("peak", "trace") or len(valid) < 2:
        why = ("not a sweep (one valid level): no knee to find" if len(valid) < 2 else
               "trace replay: windows of recorded traffic, not a sweep" if sweep_kind == "trace" else
               "peak rehearsal: no sweep")
        knee = _no_knee("users" if sweep_kind == "concurrency" else "rps", "none", why)
    else:
        levels = [r.level for r in valid]
        xs = [r.rps or 0.0 for r in valid]
        lat = [r.e2e_p95_ms for r in valid]
        knee = marginal_gain_knee(levels, xs, lat, [rps_half_width(r) for r in valid])
        usl = usl_fit(levels, xs)
        kn = kneedle(levels, xs)
        checks = CrossChecks()
        if usl is not None:
            checks.usl = usl
        if kn is not None:
            checks.kneedle = kn
        knee.cross_checks = checks
        undecided = knee.value is None and "unclear" in (knee.gain_classes or [])
        decide = requests_to_decide(valid) if undecided or (knee.value is not None and knee.confidence != "high") else None
        if decide is not None:
            knee.to_decide = decide
            knee.reason += f"; to decide: {decide.text}"
        if knee.value is not None and knee.confidence == "high":
            disagree = []
            bracket = knee.bracket or [None, None]
            if usl and usl.trusted and usl.n_star and bracket[0] is not None and bracket[1] is not None \
                    and not (bracket[0] / 2 <= usl.n_star <= bracket[1] * 2):
                disagree.append(f"USL N* = {usl.n_star:.0f}")
            if disagree:
                knee.confidence = "medium"
                knee.reason += "; cross-check disagrees: " + ", ".join(disagree)
    if excluded:
        knee.excluded_levels = excluded
    return knee
