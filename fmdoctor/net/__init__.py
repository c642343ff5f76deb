"""Network semantics shared by the EFA checks and the reachability engine."""
