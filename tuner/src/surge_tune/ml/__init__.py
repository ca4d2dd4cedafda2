"""I/O throughput prediction after seed 000 ch. 5 (feature selection, clustering, per-cluster KNN) plus
gradient boosting, evaluated both with the seed's protocol and leakage-free by held-out application."""
