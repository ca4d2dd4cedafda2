"""I/O throughput prediction after [Bang23, ch. 5] (docs/references.md: feature selection, clustering,
per-cluster KNN) plus gradient boosting, evaluated both with the thesis's protocol (named "seed" in the
code and reports) and by held-out application with everything chosen inside the training folds
(`nested.py`); `recommend.py` searches the settable parameters, layout included."""
