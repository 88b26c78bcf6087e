"""Detections compared as sets: the count, then boxes matched by IoU, labels exactly, scores
and coordinates within tolerance.

A detector returns, per image, boxes `[N, 4]` (x1, y1, x2, y2), scores `[N]` and labels
`[N]` whose count N depends on the data. Compared element by element, the k-th box of
eager meets the k-th box of ONNX Runtime, which two near-equal scores put in another
order, and a different count is a bare "shape" failure. So each eager detection is
matched, highest score first, to the unmatched ONNX detection of the same label that
overlaps it most (IoU at least `iou`); a matched pair must agree on its coordinates and
its score within the tolerance; a detection without a partner is a failure, and a
different count is said as such. Where two overlapping boxes score alike, non-maximum
suppression may keep either, and the outputs alone cannot tell that from a wrong box:
such a difference still fails, and the reason says the scores were tied.
Pure: arrays in, a `Comparison` out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from parity_gate.compare.decide import tie_window
from parity_gate.compare.tolerance import close
from parity_gate.compare.ulp import dtype_name
from parity_gate.model.comparison import Comparison, Tolerance, Verdict

__all__ = ["DETECTION_KEYS", "Detections", "compare_detections"]

DETECTION_KEYS = ("boxes", "scores", "labels")


class Detections(NamedTuple):
    """One image's detections, in any order."""

    boxes: np.ndarray   # [N, 4]
    scores: np.ndarray  # [N]
    labels: np.ndarray  # [N]

    @property
    def found(self) -> int:
        return int(self.scores.shape[0])


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box of `a` [N, 4] with every box of `b` [M, 4]."""
    a, b = a.astype(np.float64).reshape(-1, 4), b.astype(np.float64).reshape(-1, 4)
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=-1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _within(ref: np.ndarray, got: np.ndarray, tol: Tolerance) -> np.ndarray:
    return close(ref, got, tol.atol, tol.rtol)


def _tied(scores: np.ndarray, dname: str) -> bool:
    """Two scores of one side within the dtype's tie window of each other."""
    ordered = np.sort(scores.astype(np.float64))
    gaps = np.diff(ordered)
    return bool(gaps.size) and bool((gaps <= tie_window(np.abs(ordered[1:]), dname)).any())


def compare_detections(name: str, eager: Detections, onnx: Detections, tol: Tolerance,
                       iou: float = 0.5) -> Comparison:
    """The comparison of one image's detections (see the module docstring)."""
    dname = dtype_name(eager.scores.dtype)
    head = dict(name=name, shape_ref=str(tuple(eager.boxes.shape)),
                shape_got=str(tuple(onnx.boxes.shape)), dtype_ref=dname,
                dtype_got=dtype_name(onnx.scores.dtype), atol=tol.atol, rtol=tol.rtol,
                task="detection", total=eager.found)
    overlap = iou_matrix(eager.boxes, onnx.boxes)
    same = eager.labels.reshape(-1, 1) == onnx.labels.reshape(1, -1)
    overlap = np.where(same, overlap, 0.0)
    pairs: list[tuple[int, int]] = []
    taken: set[int] = set()
    for i in np.argsort(-eager.scores.astype(np.float64), kind="stable"):
        order = [j for j in np.argsort(-overlap[i], kind="stable") if j not in taken]
        if order and overlap[i, order[0]] >= iou:
            pairs.append((int(i), int(order[0])))
            taken.add(order[0])
    lone_eager = sorted(set(range(eager.found)) - {i for i, _ in pairs})
    lone_onnx = sorted(set(range(onnx.found)) - taken)
    bad_pairs, max_abs = [], 0.0
    for i, j in pairs:
        box_ok = bool(_within(eager.boxes[i], onnx.boxes[j], tol).all())
        score_ok = bool(_within(eager.scores[i:i + 1], onnx.scores[j:j + 1], tol).all())
        err = float(np.max(np.abs(eager.boxes[i].astype(np.float64)
                                  - onnx.boxes[j].astype(np.float64))))
        max_abs = max(max_abs, err)
        if not (box_ok and score_ok):
            bad_pairs.append((i, j, box_ok, score_ok))
    lone = [("eager", k, float(eager.scores[k])) for k in lone_eager] + \
        [("ONNX", k, float(onnx.scores[k])) for k in lone_onnx]
    failures = len(bad_pairs) + len(lone)
    facts = (f"{eager.found} detections in eager, {onnx.found} in ONNX; {len(pairs)} matched "
             f"by IoU>={iou:g} with the same label")
    if not failures:
        return Comparison(passed=True, verdict=Verdict.PASS, reason=facts, max_abs=max_abs,
                          **head)  # type: ignore[arg-type]
    parts = []
    if lone:
        where = ", ".join(f"{side} #{k} (score {s:.4g})" for side, k, s in lone[:5])
        parts.append(f"{len(lone)} without a partner: {where}")
    if bad_pairs:
        i, j, box_ok, score_ok = bad_pairs[0]
        what = "score" if box_ok else "box" if score_ok else "box and score"
        parts.append(f"{len(bad_pairs)} matched pair(s) differ beyond tolerance, first eager "
                     f"#{i} vs ONNX #{j} in its {what}: {eager.boxes[i].tolist()} "
                     f"{float(eager.scores[i]):.4g} vs {onnx.boxes[j].tolist()} "
                     f"{float(onnx.scores[j]):.4g}")
    if _tied(eager.scores, dname) or _tied(onnx.scores, dname):
        parts.append("some scores are equal within the dtype's resolution: where two "
                     "overlapping boxes score alike, non-maximum suppression may keep either "
                     "(random weights make that common; trained ones rarely)")
    verdict = Verdict.COUNT if eager.found != onnx.found else Verdict.MISMATCH
    lead = (f"count: eager finds {eager.found} detections, ONNX {onnx.found}"
            if verdict is Verdict.COUNT else "detections differ")
    return Comparison(passed=False, verdict=verdict,
                      reason=f"{lead} ({facts}); {'; '.join(parts)}", max_abs=max_abs,
                      mismatch_count=failures, **head)  # type: ignore[arg-type]
