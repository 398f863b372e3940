"""The specification of a run, the facts every stage shares: `models` (architecture numbers), `strategies` (named
layouts), `fairness` (profiles and workload conventions), `precision`
(the training precisions and their switches), `request` (one run's typed request), `result` (+
`result.schema.json`: the one result shape) and `metrics` (the FLOPs formula and every figure)."""
