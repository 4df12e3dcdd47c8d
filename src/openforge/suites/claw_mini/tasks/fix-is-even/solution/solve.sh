#!/bin/sh
set -e
sed -i 's/== 1/== 0/' is_even.py
