"""Segment reductions over a 1-D tensor split by lengths: sum, max and mean."""

from wf_segops._C import segment_max, segment_mean, segment_sum

__all__ = ["segment_max", "segment_mean", "segment_sum"]
