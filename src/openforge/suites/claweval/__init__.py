"""ClawEval: tasks read from the user's claw-eval checkout, graded by its own graders."""
