"""What tokens cost and how to spend fewer: one package per concern.

- ``pricing``: what a request costs on a model (token rules, price sheets, the model catalog, the quote, batches);
- ``ledger``: what each call was billed (the store, usage readers, batch results, the ledger's report);
- ``calibrate``: each model's rule fitted to its bills, and active measuring at the providers' count endpoints;
- ``proxy``: the metering proxy in front of the provider APIs (prices, limits, forwards, records);
- ``shrink``: the cheapest rendition of an input per model, held to quality bars;
- ``planner``: the NSGA-II search over measured cost and quality, and its report.

All but the planner are the core (``pip install mmtok``, no torch); shrink's measured bars come with the ``shrink``
extra, the planner with ``models`` (``mmtok.extras`` says which module needs which). ``examples/`` holds planning
specs and the reports made from them.
"""
