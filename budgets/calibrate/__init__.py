"""Calibration: each model's media rule fitted to what the provider billed, from the ledger ``mmtok proxy`` keeps
(:mod:`mmtok.budgets.ledger`), and written as a price sheet that ``--prices`` takes.

- ``fit``: observations from the ledger, the fit of a rule's own parameters, the judgement that keeps or changes it
  (the method is in its docstring);
- ``checks``: the documented rules each fit is checked against, and the sizes that would settle a rule;
- ``search``: the search over rule families and parameters the least squares cannot reach;
- ``sheet``: the fitted rules as a dated sheet, and the words that describe a fit;
- ``measure``: active measuring, photos of chosen sizes sent to a provider's free token-counting endpoint.

    >>> from mmtok.budgets.calibrate import calibrate, write_sheet  # doctest: +SKIP
    >>> from mmtok.budgets.ledger import open_ledger  # doctest: +SKIP
    >>> write_sheet(calibrate(open_ledger("calls.sqlite").records()), "fitted.toml")  # doctest: +SKIP
"""

from mmtok.budgets.calibrate.fit import (
    Calibration,
    Fit,
    ModelCalibration,
    Observation,
    Overhead,
    RuleCounter,
    calibrate,
    calibrate_model,
    fit_overhead,
    observations,
)
from mmtok.budgets.calibrate.sheet import describe_fit, settle_text, write_sheet

__all__ = [
    "Calibration",
    "Fit",
    "ModelCalibration",
    "Observation",
    "Overhead",
    "RuleCounter",
    "calibrate",
    "calibrate_model",
    "describe_fit",
    "fit_overhead",
    "observations",
    "settle_text",
    "write_sheet",
]
