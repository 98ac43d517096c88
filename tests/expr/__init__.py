"""Tests of caslake.expr: parsing, binding, Arrow evaluation and statistics pruning."""
