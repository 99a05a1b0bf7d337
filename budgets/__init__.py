"""Pricing (provider token formulas, price sheets), the NSGA-II budget planner and planning reports."""
