"""streamd.second_pass.align: the edit alignment, words dated from first-pass anchors or the model's own times,
and where long segments are cut."""

from __future__ import annotations

import pytest

from streamd.second_pass.align import WORD_S, anchor_times, cut_points, edit_pairs, offset_times


def test_edit_pairs_match_and_substitute_in_order():
    assert edit_pairs(["a", "b", "c"], ["a", "b", "c"]) == [(0, 0), (1, 1), (2, 2)]
    assert edit_pairs(["a", "x", "c"], ["a", "b", "c"]) == [(0, 0), (1, 1), (2, 2)]  # substitution pairs
    assert edit_pairs(["a", "c"], ["a", "b", "c"]) == [(0, 0), (1, 2)]  # b deleted
    assert edit_pairs(["a", "b", "c"], ["a", "c"]) == [(0, 0), (2, 1)]  # b inserted
    assert edit_pairs([], ["a"]) == [] and edit_pairs(["a"], []) == []


def test_anchor_times_take_partner_spans_and_share_gaps():
    first = [("mark", 1.0, 1.3), ("going", 1.5, 1.8), ("elephant", 2.4, 2.9)]
    t = anchor_times(["mark", "is", "going", "to", "see", "elephant"], first, 0.0, 3.5)
    assert t[0] == (1.0, 1.3) and t[2] == (1.5, 1.8) and t[5] == (2.4, 2.9)
    assert t[1] == pytest.approx((1.3, 1.5))  # the gap between its neighbours
    assert t[3][0] == pytest.approx(1.8) and t[4][1] == pytest.approx(2.4)  # "to see" share 1.8-2.4 by characters
    assert t[3][1] - t[3][0] == pytest.approx(0.6 * 2 / 5)
    assert all(a <= b for a, b in t) and all(t[i][1] <= t[i + 1][0] + 1e-9 for i in range(len(t) - 1))


def test_anchor_times_at_the_edges_and_without_first_pass_words():
    first = [("b", 2.0, 2.4)]
    t = anchor_times(["x", "y", "b", "z"], first, 0.0, 5.0)
    assert t[2] == (2.0, 2.4)  # "b" matched; x, y before it (WORD_S each), z after it
    assert t[0][0] == pytest.approx(2.0 - 2 * WORD_S) and t[1][1] == pytest.approx(2.0)
    assert t[3] == pytest.approx((2.4, 2.4 + WORD_S))
    t = anchor_times(["ab", "c"], [], 1.0, 2.0)  # by characters
    assert t[0] == pytest.approx((1.0, 1.0 + 2 / 3)) and t[1] == pytest.approx((1.0 + 2 / 3, 2.0))
    assert anchor_times(["a", "b"], [("a", 0.1, 0.2)], 0.0, 0.25)[1] == pytest.approx((0.2, 0.25))  # in the segment
    assert anchor_times([], first, 0.0, 1.0) == []


def test_offset_times_move_and_clip_to_the_segment():
    assert offset_times([(0.0, 0.5), (0.5, 1.2)], 10.0, 10.0, 11.0) == [(10.0, 10.5), (10.5, 11.0)]
    assert offset_times([(0.4, 0.3), (0.1, 0.2)], 1.0, 1.0, 5.0) == [(1.4, 1.4), (1.4, 1.4)]  # non-decreasing


def test_cut_points_prefer_pauses_past_half_a_window():
    assert cut_points(20.0, 28.0, [5.0]) == []
    assert cut_points(50.0, 28.0, [10.0, 20.0, 26.0, 40.0]) == [26.0]  # last pause within the window
    assert cut_points(50.0, 28.0, [10.0]) == [28.0]  # no pause past 14 s: cut at the window
    cuts = cut_points(100.0, 28.0, [])
    assert cuts == [28.0, 56.0, 84.0]


def test_a_misspelt_first_pass_word_anchors_its_second_pass_word():
    assert edit_pairs(["hello", "world", "three"], ["hallo", "wold"]) == [(0, 0), (1, 1)]
    assert edit_pairs(["x", "y"], ["a", "b"]) == [(0, 0), (1, 1)]  # unlike words still pair (1 < 2 edits)
