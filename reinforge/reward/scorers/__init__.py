"""Rule-based scorers: one module per task, each with `compute_score(solution_str, ground_truth, ...) -> float`.

Scorers are pure functions of strings; they never raise on malformed model output (a malformed
answer scores 0 or the task's format score). Routing by data source lives in
`reinforge.reward.registry`, not here.
"""
