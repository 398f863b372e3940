"""What evaluate.compare makes of a set of results: repeats of one configuration (`repeats`), compare.png (`plot`)
and report.md (`report`) with its sections: where the step time went (`breakdown`), frameworks side by side
(`frameworks`), the fastest layout per platform (`strategies`), scaling across nodes (`scaling`), energy and cost
(`energy`) and the predicted bound against the measured step (`prediction`).
"""
