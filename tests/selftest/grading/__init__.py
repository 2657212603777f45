"""A battery of generated submissions (correct, partly wrong, hostile) for the grader."""
