"""QwenClawBench (and PinchBench): tasks read from the user's checkout, graded by its own code."""
