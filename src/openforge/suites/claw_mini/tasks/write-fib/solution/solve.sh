#!/bin/sh
set -e
printf 'def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n' > fib.py
