"""Detections compared as sets (compare.detection): order-free, by IoU, labels exact."""

from __future__ import annotations

import numpy as np

from parity_gate.compare.detection import Detections, compare_detections, iou_matrix
from parity_gate.model.comparison import Tolerance, Verdict

TOL = Tolerance(atol=1e-4, rtol=1e-3)


def dets(boxes: list[list[float]], scores: list[float], labels: list[int]) -> Detections:
    return Detections(np.array(boxes, np.float32), np.array(scores, np.float32),
                      np.array(labels, np.int64))


EAGER = dets([[0, 0, 10, 10], [20, 20, 40, 40], [50, 0, 60, 30]], [0.9, 0.7, 0.4], [1, 2, 1])


def test_iou_of_identical_disjoint_and_half_overlapping_boxes() -> None:
    m = iou_matrix(np.array([[0, 0, 2, 2]]), np.array([[0, 0, 2, 2], [5, 5, 6, 6], [1, 0, 3, 2]]))
    assert np.allclose(m, [[1.0, 0.0, 1 / 3]])


def test_the_same_detections_in_another_order_pass() -> None:
    order = [2, 0, 1]
    onnx = Detections(EAGER.boxes[order], EAGER.scores[order], EAGER.labels[order])
    c = compare_detections("output0", EAGER, onnx, TOL)
    assert c.passed and c.verdict is Verdict.PASS and "3 matched" in c.reason


def test_a_different_count_is_said_as_such() -> None:
    onnx = Detections(EAGER.boxes[:2], EAGER.scores[:2], EAGER.labels[:2])
    c = compare_detections("output0", EAGER, onnx, TOL)
    assert not c.passed and c.verdict is Verdict.COUNT
    assert c.reason.startswith("count: eager finds 3 detections, ONNX 2")
    assert "eager #2 (score 0.4)" in c.reason


def test_a_shifted_box_and_a_changed_label_fail() -> None:
    shifted = dets([[0, 0, 10, 10], [25, 20, 45, 40], [50, 0, 60, 30]], [0.9, 0.7, 0.4],
                   [1, 2, 1])
    c = compare_detections("output0", EAGER, shifted, TOL)
    assert not c.passed and c.verdict is Verdict.MISMATCH
    assert "eager #1 vs ONNX #1 in its box" in c.reason and c.max_abs == 5.0
    relabelled = dets([[0, 0, 10, 10], [20, 20, 40, 40], [50, 0, 60, 30]], [0.9, 0.7, 0.4],
                      [1, 3, 1])
    c = compare_detections("output0", EAGER, relabelled, TOL)
    assert not c.passed and "2 without a partner" in c.reason


def test_a_box_kept_instead_of_an_equal_scoring_one_fails_and_says_the_scores_tie() -> None:
    """The outputs cannot tell an NMS tie from a wrong box: it fails, saying so."""
    eager = dets([[0, 0, 10, 10], [100, 100, 110, 110], [0, 50, 10, 60]], [0.5, 0.5, 0.3],
                 [1, 1, 2])
    onnx = dets([[2, 2, 12, 12], [100, 100, 110, 110], [0, 50, 10, 60]], [0.5, 0.5, 0.3],
                [1, 1, 2])
    c = compare_detections("output0", eager, onnx, TOL)
    assert not c.passed and "non-maximum suppression may keep either" in c.reason
    distinct = dets([[0, 0, 10, 10], [100, 100, 110, 110], [0, 50, 10, 60]], [0.6, 0.5, 0.3],
                    [1, 1, 2])
    moved = dets([[2, 2, 12, 12], [100, 100, 110, 110], [0, 50, 10, 60]], [0.6, 0.5, 0.3],
                 [1, 1, 2])
    c = compare_detections("output0", distinct, moved, TOL)
    assert not c.passed and "non-maximum suppression" not in c.reason
